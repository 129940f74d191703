"""The rest of jax-triton 0.4's surface, what goes into a call: tuples, Refs, autotune and heuristics,
scalars and output types, @triton.jit functions as constexprs, TensorDescriptor.

Numeric tests run on every execution platform (``device``); checks of the payload a GPU
would get lower for CUDA without a GPU. Call options and export: ``test_surface_options.py``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from kernels import accumulate_kernel, add_kernel
from surface_support import SPEC8, cuda, cuda_payload, interpret, normal, put

import tritonplug

# --------------------------------------------------------------------------- tuple operands

@triton.jit
def nested_tuple_kernel(x_ptr, ab_c, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ab = ab_c[0]
    total = tl.load(x_ptr + offs) + tl.load(ab[0] + offs) * tl.load(ab[1] + offs) - tl.load(ab_c[1] + offs)
    tl.store(out_ptr + offs, total)


@triton.jit
def scale_add_kernel(scale, xy, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, scale * (tl.load(xy[0] + offs) + tl.load(xy[1] + offs).to(tl.float32)))


def test_nested_tuple_operand(device):
    x, a, b, c = put(device, *(normal(16) for _ in range(4)))
    out = jax.jit(lambda x, a, b, c: tritonplug.triton_call(x, ((a, b), c), kernel=nested_tuple_kernel,
                                                            out_type=jax.typeof(x), grid=1, BLOCK=16))(x, a, b, c)
    want = np.asarray(x) + np.asarray(a) * np.asarray(b) - np.asarray(c)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)


@pytest.mark.parametrize("second_dtype", [np.float32, np.float16])
def test_scalar_before_a_tuple_of_mixed_dtypes(device, second_dtype):
    x, y = put(device, normal(16), normal(16, dtype=second_dtype))

    def f(x, y):
        return tritonplug.triton_call(3.0, (x, y), kernel=scale_add_kernel, out_type=jax.typeof(x), grid=(1,),
                                      BLOCK=16)

    for out in (f(x, y), jax.jit(f)(x, y)):
        want = 3.0 * (np.asarray(x) + np.asarray(y).astype(np.float32))
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)


# --------------------------------------------------------------------------- Refs

@triton.jit
def acc_tuple_kernel(x_ptr, acc_and_bias, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.load(acc_and_bias[0] + offs) + tl.load(x_ptr + offs)
    tl.store(acc_and_bias[0] + offs, acc)
    tl.store(out_ptr + offs, acc + tl.load(acc_and_bias[1] + offs))


@triton.jit
def scale_in_place_kernel(scale, x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * scale)


def test_ref_inside_a_tuple_with_an_allocated_output(device):
    x, acc, bias = put(device, normal(16), normal(16), normal(16))

    def f(x, acc, bias):
        ref = jax.new_ref(acc)
        out = tritonplug.triton_call(x, (ref, bias), kernel=acc_tuple_kernel, out_type=jax.typeof(x), grid=1,
                                     BLOCK=16)
        return out, ref[...]

    for out, updated in (f(x, acc, bias), jax.jit(f)(x, acc, bias)):
        np.testing.assert_allclose(np.asarray(updated), np.asarray(acc) + np.asarray(x), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(out), np.asarray(updated) + np.asarray(bias), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(acc), np.asarray(put(device, acc)[0]))  # acc itself unchanged


def test_scalar_before_a_ref_and_empty_out_type(device):
    (x,) = put(device, normal(16))
    ref = jax.new_ref(x)
    assert tritonplug.triton_call(2.5, ref, kernel=scale_in_place_kernel, out_type=(), grid=1, BLOCK=16) == ()
    np.testing.assert_allclose(np.asarray(ref[...]), 2.5 * np.asarray(x), rtol=1e-6)

    def jitted(x):
        r = jax.new_ref(x)
        assert tritonplug.triton_call(-2.0, r, kernel=scale_in_place_kernel, out_type=(), grid=1, BLOCK=16) == ()
        return r[...]

    np.testing.assert_allclose(np.asarray(jax.jit(jitted)(x)), -2.0 * np.asarray(x), rtol=1e-6)


def test_refs_cannot_be_combined_with_input_output_aliases():
    x = jnp.ones(8, jnp.float32)
    with pytest.raises(ValueError, match="cannot be combined with Ref"):
        tritonplug.triton_call(x, jax.new_ref(x), 8, kernel=accumulate_kernel, out_type=jax.typeof(x), grid=1,
                               input_output_aliases={0: 0}, BLOCK=8)


# --------------------------------------------------------------------------- autotune and heuristics

@triton.jit
def add_in_place_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def inc_pair_kernel(pair, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(pair[0] + offs, tl.load(pair[0] + offs, mask=mask) + 1, mask=mask)
    tl.store(pair[1] + offs, tl.load(pair[1] + offs, mask=mask) + 2, mask=mask)


def _configs():
    return [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=1)]


def test_autotuned_aliased_call_applies_its_effect_once(device):
    kernel = triton.autotune(_configs(), key=["n"])(add_in_place_kernel)
    x, y = put(device, normal(256), normal(256))
    out = tritonplug.triton_call(x, y, 256, kernel=kernel, out_type=jax.typeof(x),
                                 grid=lambda m: (triton.cdiv(256, m["BLOCK"]),), input_output_aliases={0: 0})
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) + np.asarray(y))


def test_autotuned_call_on_a_tuple_of_refs_applies_its_effect_once(device):
    kernel = triton.autotune(_configs(), key=["n"])(inc_pair_kernel)
    a, b = put(device, normal(128), normal(128))
    a_ref, b_ref = jax.new_ref(a), jax.new_ref(b)
    assert tritonplug.triton_call((a_ref, b_ref), 128, kernel=kernel, out_type=(),
                                  grid=lambda m: (triton.cdiv(128, m["BLOCK"]),)) == ()
    np.testing.assert_array_equal(np.asarray(a_ref[...]), np.asarray(a) + 1)
    np.testing.assert_array_equal(np.asarray(b_ref[...]), np.asarray(b) + 2)


@interpret
def test_heuristics_run_once_per_config_in_order_and_leave_configs_alone():
    seen = []

    def even(args):
        seen.append((args["BLOCK"], args["n"]))
        return args["n"] % args["BLOCK"] == 0

    @triton.jit
    def kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    configs = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 16})]
    tuned = triton.autotune(configs, key=["n"])(triton.heuristics({"EVEN": even})(kernel))
    x = jnp.ones(96, jnp.float32)
    call = jax.jit(lambda x: tritonplug.triton_call(x, x, x.size, kernel=tuned, out_type=jax.typeof(x),
                                                    grid=lambda m: (triton.cdiv(96, m["BLOCK"]),)))
    call.lower(x)
    assert seen == [(64, 96), (32, 96), (16, 96)]
    assert [c.kwargs for c in configs] == [{"BLOCK": 64}, {"BLOCK": 32}, {"BLOCK": 16}]
    np.testing.assert_array_equal(np.asarray(call(x)), 2 * np.ones(96, np.float32))


# --------------------------------------------------------------------------- scalars and output types

@triton.jit
def add_scalar_kernel(x_ptr, y, out_ptr):
    tl.store(out_ptr, tl.load(x_ptr) + y)


@triton.jit
def scaled_copy_kernel(scale, x_ptr, out_ptr):
    i = tl.program_id(0)
    tl.store(out_ptr + i, scale * tl.load(x_ptr + i))


@pytest.mark.parametrize("value", [42.0, np.float32(42.0), 1e-30, float("inf"), -float("inf")])
def test_float_scalar_into_a_zero_dimensional_output(device, value):
    (x,) = put(device, np.array([1.0], np.float32))
    out = tritonplug.triton_call(x, value, kernel=add_scalar_kernel, out_type=jax.ShapeDtypeStruct((), x.dtype),
                                 grid=1)
    assert out.shape == ()
    np.testing.assert_array_equal(np.asarray(out), np.float32(1.0) + np.float32(value))


def test_int_one_in_first_position(device):
    (x,) = put(device, np.arange(8, dtype=np.float32) + 1)
    out = tritonplug.triton_call(1, x, kernel=scaled_copy_kernel, out_type=jax.typeof(x), grid=(x.size,))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x))
    out = tritonplug.triton_call(3, x, kernel=scaled_copy_kernel, out_type=jax.typeof(x), grid=(x.size,))
    np.testing.assert_array_equal(np.asarray(out), 3 * np.asarray(x))


@cuda
def test_int_one_is_specialised_unless_do_not_specialize():
    dns_kernel = triton.jit(do_not_specialize=["scale"])(scaled_copy_kernel.fn)

    def f(kernel):
        return lambda x: tritonplug.triton_call(1, x, kernel=kernel, out_type=jax.typeof(x), grid=(8,),
                                                compute_capability=90, debug=True)  # debug: TTIR in the payload

    (call,) = cuda_payload(f(scaled_copy_kernel), SPEC8)[1]
    assert call["kernel_call"]["parameters"] == [{"array": {"ptr_divisibility": 16}}] * 2
    (call,) = cuda_payload(f(dns_kernel), SPEC8)[1]
    assert call["kernel_call"]["parameters"][0] == {"i32": 1}
    assert "%scale: i32" in call["kernel_call"]["kernel"]["ttir"]


def test_out_type_from_jax_typeof_and_do_not_specialize(device):
    kernel = triton.jit(do_not_specialize=["n"])(add_kernel.fn)
    x, y = put(device, normal(40), normal(40))
    out = tritonplug.triton_call(x, y, x.size, kernel=kernel, out_type=jax.typeof(x), grid=(2,), BLOCK=32)
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) + np.asarray(y))


# --------------------------------------------------------------------------- @triton.jit constexprs

@triton.jit
def add_fn(a, b):
    return a + b


@triton.jit
def mul_fn(a, b):
    return a * b


@triton.jit
def dispatch_kernel(x_ptr, y_ptr, out_ptr, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, FN(tl.load(x_ptr + offs), tl.load(y_ptr + offs)))


def dispatch(x, y, fn, **kw):
    return tritonplug.triton_call(x, y, kernel=dispatch_kernel, out_type=jax.typeof(x), grid=(1,), FN=fn, BLOCK=8,
                                  **kw)


def test_jit_function_as_constexpr_selects_the_code(device):
    x, y = put(device, normal(8), normal(8))
    before = tritonplug.compile_stats()
    np.testing.assert_array_equal(np.asarray(dispatch(x, y, add_fn)), np.asarray(x) + np.asarray(y))
    middle = tritonplug.compile_stats()
    np.testing.assert_array_equal(np.asarray(dispatch(x, y, mul_fn)), np.asarray(x) * np.asarray(y))
    after = tritonplug.compile_stats()
    # mul_fn gives a cache key of its own: found compiled nowhere in memory, so compiled or read from disk
    assert after["memory_hits"] == middle["memory_hits"]
    assert after["compiled"] + after["disk_hits"] == middle["compiled"] + middle["disk_hits"] + 1
    assert middle["compiled"] + middle["disk_hits"] <= before["compiled"] + before["disk_hits"] + 1


@cuda
def test_jit_function_constexpr_reaches_the_ttir():
    ttirs = [cuda_payload(lambda x, y, fn=fn: dispatch(x, y, fn, compute_capability=90, debug=True), SPEC8, SPEC8)[1][0]
             ["kernel_call"]["kernel"]["ttir"] for fn in (add_fn, mul_fn)]
    assert "arith.addf" in ttirs[0] and "arith.mulf" not in ttirs[0]
    assert "arith.mulf" in ttirs[1]


# --------------------------------------------------------------------------- TensorDescriptor

def test_tensor_descriptor_record():
    base = jnp.arange(24.0, dtype=jnp.float32).reshape(4, 6)
    desc = tritonplug.TensorDescriptor.from_array(base, block_shape=[2, 3])
    assert (desc.shape, desc.strides, desc.block_shape) == ((4, 6), (6, 1), (2, 3))
    assert (desc.layout, desc.padding, desc.round_f32_to_tf32) == (None, "zero", False)
    leaves, tree = jax.tree_util.tree_flatten(desc)
    assert len(leaves) == 1 and leaves[0] is base
    doubled = jax.tree_util.tree_map(lambda a: a * 2, desc)
    assert doubled.block_shape == (2, 3) and float(doubled.base[1, 1]) == 14.0
    assert jax.jit(lambda d: d.base.sum() + d.shape[0])(desc) == base.sum() + 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        desc.padding = "nan"
    with pytest.raises(ValueError, match="padding must be 'zero' or 'nan', got 'inf'"):
        tritonplug.TensorDescriptor.from_array(base, [2, 3], padding="inf")
    with pytest.raises(ValueError, match="same length"):
        tritonplug.TensorDescriptor(base, (4, 6), (6, 1), (2,))



def test_an_empty_grid_launches_nothing_when_every_output_is_defined_without_the_kernel(device):
    """As Triton: ``grid=(0,)`` launches no program. Zeroed outputs are zeros, an output updated in place is its
    input, a ref keeps its value; a fresh output nothing would write is refused (it would be uninitialised)."""
    (x,) = put(device, normal(16))
    call = functools.partial(tritonplug.triton_call, grid=(0,), BLOCK=16)

    def zeroed(a):
        return call(a, a, 0, kernel=add_kernel, out_type=jax.typeof(a), zeroed_outputs=[0])

    def in_place(a):
        return call(a, jnp.ones_like(a), 0, kernel=accumulate_kernel, out_type=jax.typeof(a),
                    input_output_aliases={1: 0})

    for fn in (zeroed, jax.jit(zeroed)):
        np.testing.assert_array_equal(np.asarray(fn(x)), np.zeros(16, np.float32))
    with pytest.warns(DeprecationWarning):
        for fn in (in_place, jax.jit(in_place)):
            np.testing.assert_array_equal(np.asarray(fn(x)), np.ones(16, np.float32))
    ref = jax.new_ref(x)
    assert call(x, ref, 0, kernel=accumulate_kernel, out_type=()) == ()
    np.testing.assert_array_equal(np.asarray(ref[...]), np.asarray(x))
    with pytest.raises(ValueError, match=r"grid \(0,\) of kernel 'add_kernel' launches no program.*zeroed_outputs"):
        call(x, x, 0, kernel=add_kernel, out_type=jax.typeof(x))
