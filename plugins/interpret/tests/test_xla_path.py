"""The CPU backend's XLA path: kernels' TTIR as JAX operations, one op family per test.

Each test runs a kernel through ``triton_call`` on the CPU, checks the numbers against NumPy
and checks that the lowered program holds no host call (the kernel really was translated),
unless the test is about the fallback to the interpreter.
"""

from __future__ import annotations

import logging
import sys
import textwrap
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from helpers import requires_backend, run_exported
from xla_kernels import (
    atomics_kernel,
    bf16_kernel,
    bits_kernel,
    block_pointer_kernel,
    cas_kernel,
    cas_vector_kernel,
    descriptor_kernel,
    dot_kernel,
    dot_trans_kernel,
    int_kernel,
    loop_store_kernel,
    math_kernel,
    oob_kernel,
    rand_sort_kernel,
    scan_argmax_kernel,
    shape_kernel,
    ticket_kernel,
    while_if_kernel,
)

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
ROOT = Path(__file__).resolve().parents[3]
RNG = np.random.default_rng(7)
HOST_CALL = "tritonplug_host_kernel"  # the interpreter path's FFI target


@pytest.fixture(autouse=True)
def _xla_path(monkeypatch):
    """These tests are about the XLA path, whatever TRITONPLUG_CPU_PATH the run forces elsewhere."""
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")


def lowered(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text()


def run_xla(fn, *args):
    """``fn(*args)`` jitted, after checking that its lowering calls no host function."""
    assert HOST_CALL not in lowered(fn, *args), "the kernel was not translated to XLA"
    return jax.jit(fn)(*args)


def call(kernel, *args, out, grid, **kw):
    return tritonplug.triton_call(*args, kernel=kernel, out_shape=out, grid=grid, **kw)


def sds(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


# ----------------------------------------------------------------------------- tests


def test_elementwise_math_and_libdevice():
    x = (RNG.standard_normal(1000) * 3).astype(np.float32)
    out = run_xla(lambda a: call(math_kernel, a, a.size, out=sds(a.shape, a.dtype), grid=(8,), BLOCK=128), x)
    ax = np.abs(x)
    ref = np.exp(x) + np.log(ax + 1) * np.sqrt(ax) - 1 / (1 + np.exp(-x)) + np.maximum(x, 0.5) + np.tanh(x)
    ref = ref + np.floor(x) + np.where(x > 0, np.fmod(x, 2.0), -x)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=2e-5, atol=2e-5)


def test_integer_ops_signed_and_unsigned():
    x = RNG.integers(-1000, 1000, 500).astype(np.int32)
    out = run_xla(lambda a: call(int_kernel, a, a.size, out=sds(a.shape, a.dtype), grid=(4,), BLOCK=128), x)
    q = np.fix(x / 3).astype(np.int32)
    r = np.fmod(x, 5).astype(np.int32)
    y = (q * 7 + r - (x >> 1) + (x << 2)) ^ (x & 12) | 1
    u = (x.view(np.uint32) // 3).view(np.int32)
    np.testing.assert_array_equal(np.asarray(out), y + u)


def test_scan_and_argmax():
    x = RNG.standard_normal((6, 64)).astype(np.float32)
    cum, idx = run_xla(lambda a: call(scan_argmax_kernel, a, out=(sds(a.shape, a.dtype), sds((6,), jnp.int32)),
                                      grid=(6,), BLOCK=64), x)
    np.testing.assert_allclose(np.asarray(cum), np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(idx), np.argmax(x, axis=1))


def test_while_and_if_with_per_program_trip_counts():
    n = np.array([0, 1, 5, 10, 3], np.int32)
    out = run_xla(lambda a: call(while_if_kernel, a, out=sds((5,), jnp.int32), grid=(5,)), n)
    ref = [sum(i if i % 2 == 0 else -1 for i in range(k)) for k in n]
    np.testing.assert_array_equal(np.asarray(out), ref)


def test_stores_in_a_loop_then_loads_run_programs_in_order():
    x = RNG.standard_normal((3, 100)).astype(np.float32)
    out = run_xla(lambda a: call(loop_store_kernel, a, 100, out=sds(a.shape, a.dtype), grid=(3,), BLOCK=32), x)
    ref = x * 2
    ref[:, 0] += 1
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-6)


BLOCK_POINTERS_REMOVED = tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 9)


@pytest.mark.parametrize("kernel", [
    pytest.param(block_pointer_kernel, marks=pytest.mark.skipif(
        BLOCK_POINTERS_REMOVED,
        reason=f"Triton {triton.__version__} removed tl.make_block_ptr (tox -e triton36 runs it)")),
    descriptor_kernel], ids=["block_ptr", "descriptor"])
def test_block_pointers_and_descriptors_with_boundary_checks(kernel):
    m, n = 10, 24
    x = RNG.standard_normal((m, n)).astype(np.float32)
    out = run_xla(lambda a: call(kernel, a, m, n, out=sds(a.shape, a.dtype), grid=(3,), BM=4, BN=32), x)
    np.testing.assert_allclose(np.asarray(out), x + 1 if kernel is block_pointer_kernel else x * 2, rtol=1e-6)


def test_atomics_over_programs_sum_all():
    x = RNG.standard_normal(1000).astype(np.float32)
    outs = (sds((1,), jnp.float32), sds((4,), jnp.int32), sds((1,), jnp.float32))
    total, bins, hi = run_xla(lambda a: call(atomics_kernel, a, a.size, out=outs, grid=(8,), BLOCK=128,
                                             zeroed_outputs=(0, 1, 2)), x)
    np.testing.assert_allclose(np.asarray(total)[0], x.sum(), rtol=0, atol=1e-6 * np.abs(x).sum())  # sums near 0
    np.testing.assert_array_equal(np.asarray(bins), np.bincount(np.arange(1000) % 4))
    assert np.asarray(hi)[0] == x.max()


def test_atomic_results_and_compare_and_swap_run_programs_in_order():
    order = run_xla(lambda: call(ticket_kernel, out=(sds((1,), jnp.int32), sds((6,), jnp.int32)), grid=(6,),
                                 zeroed_outputs=(0,)))
    np.testing.assert_array_equal(np.asarray(order[1]), np.arange(6))
    lock, old = run_xla(lambda: call(cas_kernel, out=(sds((1,), jnp.int32), sds((4,), jnp.int32)), grid=(4,),
                                     zeroed_outputs=(0,)))
    assert np.asarray(lock)[0] == 1 and list(np.asarray(old)) == [0, 1, 1, 1]


def test_bitwise_reductions_and_atomics():
    x = RNG.integers(0, 1 << 20, 64).astype(np.int32)
    flags = run_xla(lambda a: call(bits_kernel, a, out=sds((2,), jnp.int32), grid=(4,), BLOCK=16,
                                   zeroed_outputs=(0,)), x)
    assert int(np.asarray(flags)[0]) == int(np.bitwise_or.reduce(x))
    assert int(np.asarray(flags)[1]) == int(np.bitwise_xor.reduce(x))


def on_path(path, fn, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", path)
    try:
        return jax.jit(lambda *a: fn(*a))()
    finally:
        monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")


def test_philox_random_sort_and_barrier_match_the_interpreter(monkeypatch):
    def fn():
        return call(rand_sort_kernel, 1234, out=(sds((256,), jnp.float32), sds((256,), jnp.uint32)), grid=(4,),
                    BLOCK=64)

    assert HOST_CALL not in lowered(fn)
    xla, interp = on_path("xla", fn, monkeypatch), on_path("interpret", fn, monkeypatch)
    for a, b in zip(xla, interp, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.all(np.diff(np.asarray(xla[1]).reshape(4, 64).astype(np.int64), axis=1) >= 0)


def test_unsupported_operation_falls_back_to_the_interpreter_with_one_log_line(caplog):
    def fn():
        return call(cas_vector_kernel, out=(sds((8,), jnp.int32), sds((8,), jnp.int32)), grid=(1,), BLOCK=8,
                    zeroed_outputs=(0,))

    with caplog.at_level(logging.WARNING, logger="tritonplug.interpret"):
        text = lowered(fn)
    assert HOST_CALL in text
    lines = [r.getMessage() for r in caplog.records if "runs in Triton's interpreter" in r.getMessage()]
    assert len(lines) == 1 and "cas_vector_kernel" in lines[0] and "tt.atomic_cas" in lines[0]
    lock, old = jax.jit(fn)()
    np.testing.assert_array_equal(np.asarray(lock), np.arange(1, 9))
    np.testing.assert_array_equal(np.asarray(old), np.zeros(8))


def test_bf16_arithmetic_and_rounding():
    x = RNG.standard_normal(100).astype(jnp.bfloat16)
    y = (RNG.standard_normal(100) + 3).astype(jnp.bfloat16)
    out, down = run_xla(lambda a, b: call(bf16_kernel, a, b, a.size, out=(sds(a.shape, a.dtype),) * 2, grid=(1,),
                                          BLOCK=128), x, y)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    # Triton: x * y in bf16 (rounded), x / y promoted to fp32, the difference in fp32, rounded once
    ref = (xf * yf).astype(jnp.bfloat16).astype(np.float32) - xf / yf
    np.testing.assert_array_equal(np.asarray(out), ref.astype(jnp.bfloat16))
    np.testing.assert_array_equal(np.asarray(down), (xf * np.float32(3.3)).astype(jnp.bfloat16))


@pytest.mark.parametrize("dtype", [np.float32, jnp.float16, jnp.bfloat16])
def test_dot_accumulates_in_fp32(dtype):
    a = RNG.standard_normal((16, 16)).astype(dtype)
    b = RNG.standard_normal((16, 16)).astype(dtype)
    out = run_xla(lambda p, q: call(dot_kernel, p, q, out=sds((16, 16), jnp.float32), grid=(1,), B=16), a, b)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("programs", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, jnp.float16, jnp.bfloat16])
def test_transposed_dot_of_narrow_floats_runs(dtype, programs):
    """``tl.trans(tl.dot(a, b))``: with bf16 operands XLA:CPU's DotThunk refused the dot it folds the transpose
    into (BF16 x BF16 = F32); the translator widens bf16 operands (exactly) first."""
    a = RNG.standard_normal((programs, 16, 16)).astype(dtype)
    b = RNG.standard_normal((programs, 16, 16)).astype(dtype)
    out = run_xla(lambda p, q: call(dot_trans_kernel, p, q, out=sds(p.shape, jnp.float32), grid=(programs,), B=16),
                  a, b)
    ref = np.swapaxes(a.astype(np.float32) @ b.astype(np.float32), 1, 2)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)


def test_trans_reshape_split_join_broadcast():
    x = RNG.standard_normal((8, 8)).astype(np.float32)
    out = run_xla(lambda a: call(shape_kernel, a, out=sds(a.shape, a.dtype), grid=(1,), B=8), x)
    t = x.T.reshape(8, 4, 2)
    ref = np.stack([t[..., 1], t[..., 0]], axis=-1).reshape(8, 8) + x.sum(axis=0)[None, :]
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)


def test_checked_mode_names_kernel_argument_and_offset(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "1")
    x = np.ones(16, np.float32)
    fn = jax.jit(lambda a: call(oob_kernel, a, out=sds((20,), jnp.float32), grid=(1,), BLOCK=16))
    with pytest.raises(Exception, match=r"oob_kernel.*out_ptr.*byte offset 80"):
        np.asarray(fn(x))


def test_two_threads_run_different_kernels_at_once():
    x = RNG.standard_normal(4096).astype(np.float32)
    rows = RNG.standard_normal((64, 128)).astype(np.float32)
    add_fn = jax.jit(lambda a: call(math_kernel, a, a.size, out=sds(a.shape, a.dtype), grid=(32,), BLOCK=128))
    scan_fn = jax.jit(lambda a: call(scan_argmax_kernel, a, out=(sds(a.shape, a.dtype), sds((64,), jnp.int32)),
                                     grid=(64,), BLOCK=128))
    expected = (np.asarray(add_fn(x)), np.asarray(scan_fn(rows)[0]))
    errors: list[BaseException] = []

    def worker(which: int) -> None:
        try:
            for _ in range(20):
                got = np.asarray(add_fn(x)) if which == 0 else np.asarray(scan_fn(rows)[0])
                np.testing.assert_array_equal(got, expected[which])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


EXPORT_SCRIPT = textwrap.dedent("""
    import sys
    import jax, numpy as np
    exported = jax.export.deserialize(open(sys.argv[1], "rb").read())
    x = np.arange(1000, dtype=np.float32)
    out = exported.call(x, x * 2)
    np.testing.assert_allclose(np.asarray(out), x * 3)
    print("ok", "tritonplug" in sys.modules)
""")


def test_exported_cpu_program_runs_in_a_fresh_python(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")  # checked mode adds a host callback
    sys.path.insert(0, str(ROOT / "examples"))
    import add as add_example

    x = np.zeros(1000, np.float32)
    exported = jax.export.export(jax.jit(add_example.add), platforms=["cpu"])(x, x)
    path = tmp_path / "add.jax"
    path.write_bytes(exported.serialize())
    assert run_exported(EXPORT_SCRIPT, path) == ["ok", "False"]


def test_cpu_path_variable_is_checked(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "gpu")
    x = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="TRITONPLUG_CPU_PATH"):
        jax.jit(lambda a: call(oob_kernel, a, out=sds((32,), jnp.float32), grid=(1,), BLOCK=8)).lower(x)
