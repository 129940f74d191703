"""tritonplug.adapters.host_ffi: Python functions on XLA:CPU buffers through a typed FFI custom call."""

from __future__ import annotations

import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.extend.core import Primitive
from jax.interpreters import mlir

from tritonplug.adapters import host_ffi

CPU = jax.devices("cpu")[0]

# A tiny primitive: n_out results shaped like the first n_out operands, computed by a host function.
host_p = Primitive("test_host_ffi_call")
host_p.multiple_results = True


def _abstract(*avals, function_id, n_out, aliases, side_effect, attrs):
    return [jax.core.ShapedArray(a.shape, a.dtype) for a in avals[:n_out]]


def _lowering(ctx, *args, function_id, n_out, aliases, side_effect, attrs):
    return host_ffi.lower_host_call(ctx, args, function_id=function_id, operand_output_aliases=dict(aliases),
                                    has_side_effect=side_effect, extra_attributes=dict(attrs))


host_p.def_abstract_eval(_abstract)
host_p.def_impl(lambda *xs, **kw: jax.jit(lambda *ys: host_p.bind(*ys, **kw))(*xs))
mlir.register_lowering(host_p, _lowering, platform="cpu")


def call(fid, *xs, n_out=1, aliases=(), side_effect=False, attrs=()):
    return host_p.bind(*xs, function_id=fid, n_out=n_out, aliases=tuple(aliases), side_effect=side_effect,
                       attrs=tuple(attrs))


def _add(ops, res):
    np.add(ops[0], ops[1], out=res[0])


def _copy(ops, res):
    res[0][...] = ops[0]


ADD = host_ffi.register_function(_add)
COPY = host_ffi.register_function(_copy)


def _data(a):
    return a.__array_interface__["data"][0]


def test_out_of_place_add_jit_and_eager():
    x, y = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3), jnp.full((2, 3), 0.5, jnp.float32)
    expected = np.asarray(x) + np.asarray(y)
    np.testing.assert_array_equal(jax.jit(lambda a, b: call(ADD, a, b)[0])(x, y), expected)
    (eager,) = call(ADD, x, y)
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(x, np.arange(6.0).reshape(2, 3))


DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.bool_, np.int8, np.int16, np.int32,
          np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.complex64, np.complex128,
          ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtype_roundtrip(dtype):
    rng = np.random.default_rng(0)
    host = (rng.standard_normal((3, 5)) * 10).astype(dtype)
    seen = []
    fid = host_ffi.register_function(lambda ops, res: (seen.append(ops[0].dtype), _copy(ops, res)))
    with jax.enable_x64(True):
        out = jax.jit(lambda a: call(fid, a)[0])(jnp.asarray(host))
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(out), host)
    assert seen == [np.dtype(dtype)]


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2)])
def test_scalar_and_empty(shape):
    x = jnp.ones(shape, jnp.float32) * 2
    out = jax.jit(lambda a, b: call(ADD, a, b)[0])(x, x)
    assert out.shape == shape
    np.testing.assert_array_equal(out, np.full(shape, 4, np.float32))


def test_alias_with_donation_writes_in_place():
    seen = []

    def scale(ops, res):
        seen.append((_data(ops[0]), _data(res[0]), ops[0].flags.writeable, res[0].flags.writeable))
        res[0] *= ops[1]  # the aliased result already holds operand 0

    fid = host_ffi.register_function(scale)
    f = jax.jit(lambda a, b: call(fid, a, b, aliases=[(0, 0)])[0], donate_argnums=0)
    x, y = jnp.arange(8.0, dtype=jnp.float32), jnp.full(8, 3.0, jnp.float32)
    x_ptr = x.unsafe_buffer_pointer()
    out = f(x, y)
    assert out.unsafe_buffer_pointer() == x_ptr
    assert x.is_deleted()
    np.testing.assert_array_equal(out, np.arange(8.0) * 3)
    operand_ptr, result_ptr, operand_writable, result_writable = seen[-1]
    assert operand_ptr == result_ptr == x_ptr
    assert not operand_writable and result_writable


def test_alias_without_donation_keeps_input():
    def bump(ops, res):
        res[0] += 1

    fid = host_ffi.register_function(bump)
    x = jnp.arange(5, dtype=jnp.int32)
    out = jax.jit(lambda a: call(fid, a, aliases=[(0, 0)])[0])(x)
    np.testing.assert_array_equal(out, np.arange(5) + 1)
    np.testing.assert_array_equal(x, np.arange(5))
    assert out.unsafe_buffer_pointer() != x.unsafe_buffer_pointer()


def test_has_side_effect_keeps_unused_call():
    log = []
    fid = host_ffi.register_function(lambda ops, res: (log.append(float(ops[0].sum())), _copy(ops, res)))

    def f(x, side_effect):
        # JAX keeps the call (its result is used); XLA folds the select and the call becomes dead.
        (y,) = call(fid, x, side_effect=side_effect)
        return jax.lax.select(jnp.zeros(x.shape, bool), y, x + 1)

    x = jnp.ones(3, jnp.float32)
    np.testing.assert_array_equal(jax.jit(lambda a: f(a, False))(x), np.full(3, 2.0))
    assert log == []  # without the side effect XLA removed the unused call
    np.testing.assert_array_equal(jax.jit(lambda a: f(a, True))(x), np.full(3, 2.0))
    assert log == [3.0]
    assert "custom_call_has_side_effect=true" in jax.jit(lambda a: f(a, True)).lower(x).as_text("hlo")


def test_exception_surfaces_and_process_survives():
    def boom(ops, res):
        raise ValueError("host kernel exploded 42")

    fid = host_ffi.register_function(boom)
    with pytest.raises(Exception, match="host kernel exploded 42") as info:
        np.asarray(jax.jit(lambda a: call(fid, a)[0])(jnp.ones(2)))
    assert "ValueError" in str(info.value) and "in boom" in str(info.value)
    np.testing.assert_array_equal(jax.jit(lambda a, b: call(ADD, a, b)[0])(jnp.ones(2), jnp.ones(2)), [2, 2])


def test_unknown_function_id_is_an_error():
    with pytest.raises(Exception, match="no host function is registered under id 987654"):
        np.asarray(jax.jit(lambda a: call(987654, a)[0])(jnp.ones(2)))


def test_extra_attribute_in_hlo_and_runs():
    f = jax.jit(lambda a, b: call(ADD, a, b, attrs=[("cost_estimate_json", '{"flops": 123}'), ("note", 7)])[0])
    x = jnp.ones(4, jnp.float32)
    hlo = f.lower(x, x).compiler_ir("hlo").as_hlo_text()
    assert 'custom_call_target="tritonplug_host_kernel"' in hlo
    assert r'cost_estimate_json = "{\22flops\22: 123}"' in hlo
    assert f"function_id = {ADD} : i64" in hlo and "note = 7 : i64" in hlo
    np.testing.assert_array_equal(f(x, x), np.full(4, 2, np.float32))


def test_reserved_and_bad_attributes():
    x = jnp.ones(2)
    with pytest.raises(ValueError, match="reserved"):
        jax.jit(lambda a: call(COPY, a, attrs=[("function_id", 1)])[0]).lower(x)
    with pytest.raises(TypeError, match="must be a str or an int"):
        jax.jit(lambda a: call(COPY, a, attrs=[("bad", (1, 2))])[0]).lower(x)


def test_inside_lax_map_and_fori_loop():
    xs = jnp.arange(12.0, dtype=jnp.float32).reshape(4, 3)
    out = jax.jit(lambda v: jax.lax.map(lambda r: call(ADD, r, r)[0], v))(xs)
    np.testing.assert_array_equal(out, np.asarray(xs) * 2)
    loop = jax.jit(lambda v: jax.lax.fori_loop(0, 5, lambda i, c: call(ADD, c, jnp.ones_like(c))[0], v))
    np.testing.assert_array_equal(loop(jnp.zeros(3)), np.full(3, 5.0))


def test_multiple_results_from_threads():
    threads = set()

    def split(ops, res):
        threads.add(threading.get_ident())
        res[0][...] = ops[0] * 2
        res[1][...] = ops[1] - 1

    fid = host_ffi.register_function(split)
    f = jax.jit(lambda a, b: call(fid, a, b, n_out=2))

    def work(i):
        a, b = jnp.full(64, float(i), jnp.float32), jnp.full(64, i, jnp.int32)
        for _ in range(20):
            r0, r1 = f(a, b)
            np.testing.assert_array_equal(r0, np.full(64, 2.0 * i))
            np.testing.assert_array_equal(r1, np.full(64, i - 1))
        return i

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(work, range(8))) == list(range(8))
    assert threads


def test_register_function_ids_are_unique_and_checked():
    ids = set()
    with ThreadPoolExecutor(4) as pool:
        ids.update(pool.map(lambda _: host_ffi.register_function(_copy), range(100)))
    assert len(ids) == 100
    with pytest.raises(TypeError):
        host_ffi.register_function(3)


def test_metadata_query_and_other_stages():
    """Call the handler directly as XLA does at registration, and for a non-execute stage."""
    api = host_ffi._ApiPrefix(ctypes.sizeof(host_ffi._ApiPrefix), None, host_ffi._ApiVersion(24, None, 0, 7))
    metadata = host_ffi._Metadata(struct_size=36)
    ext = host_ffi._MetadataExtension(host_ffi._ExtensionBase(ctypes.sizeof(host_ffi._MetadataExtension), 1),
                                      ctypes.pointer(metadata))
    frame = host_ffi._CallFrame(struct_size=host_ffi._CALL_FRAME_SIZE, api=ctypes.addressof(api), stage=3)
    frame.extension_start = ctypes.cast(ctypes.pointer(ext), ctypes.POINTER(host_ffi._ExtensionBase))
    assert host_ffi._HANDLER(ctypes.pointer(frame)) is None
    assert (metadata.api_version.major, metadata.api_version.minor) == (0, 3)
    assert metadata.api_version.struct_size == 24 and metadata.traits == 0
    api.api_version.minor = 1  # an older framework gets its own version back
    host_ffi._HANDLER(ctypes.pointer(frame))
    assert metadata.api_version.minor == 1
    plain = host_ffi._CallFrame(struct_size=host_ffi._CALL_FRAME_SIZE, api=ctypes.addressof(api), stage=0)
    assert host_ffi._HANDLER(ctypes.pointer(plain)) is None  # instantiate: nothing to do


def test_struct_sizes_match_c_api():
    # XLA_FFI_STRUCT_SIZE values for x86-64 / aarch64 (LP64) computed from c_api.h.
    assert host_ffi._CALL_FRAME_SIZE == 168
    assert ctypes.sizeof(host_ffi._Buffer) == 48
    assert ctypes.sizeof(host_ffi._Args) == 40 and ctypes.sizeof(host_ffi._Attrs) == 48
    assert host_ffi._ERROR_ARGS_SIZE == 28
    assert host_ffi._ApiPrefix.error_create.offset == 48
    assert host_ffi._Metadata.traits.offset == 32
