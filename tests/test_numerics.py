"""Kernels computing real numbers on every backend: the interpreter on CPU, and CUDA when visible.

Each test runs eagerly and under jax.jit with fresh random data against NumPy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from kernels import (
    accumulate_kernel,
    add_kernel,
    atomic_sum_kernel,
    grid3_kernel,
    heuristic_add_kernel,
    tuple_add_kernel,
    two_outputs_kernel,
    uses_helpers_kernel,
    where_rowsum_kernel,
)

import tritonplug

RNG = np.random.default_rng()


def put(device, *arrays):
    return [jax.device_put(a, device) for a in arrays]


def both_ways(fn, *args, rtol=0.0, atol=0.0):
    """Run ``fn`` eagerly and jitted; both results must agree (exactly, unless atomics reorder sums)."""
    eager = fn(*args)
    jitted = jax.jit(fn)(*args)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol), eager, jitted)
    return eager


def add(x, y, block=128):
    return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(triton.cdiv(x.size, block),), BLOCK=block)


@pytest.mark.parametrize("dtype,size", [(np.float32, 1000), (np.float16, 77), (np.int32, 4097), (np.float64, 333)])
def test_add(device, dtype, size):
    with jax.enable_x64(dtype == np.float64):
        x = (RNG.standard_normal(size) * 100).astype(dtype)
        y = (RNG.standard_normal(size) * 100).astype(dtype)
        out = both_ways(add, *put(device, x, y))
        np.testing.assert_allclose(np.asarray(out), x + y, rtol=1e-3 if dtype == np.float16 else 1e-6)


def test_bf16_add_is_exact_or_refused(device):
    x = RNG.standard_normal(300).astype(jnp.bfloat16)
    y = RNG.standard_normal(300).astype(jnp.bfloat16)
    out = both_ways(add, *put(device, x, y))
    expected = (x.astype(np.float32) + y.astype(np.float32)).astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(out).astype(np.float32), expected.astype(np.float32))


def test_nested_helpers_from_another_module(device):
    x = RNG.standard_normal(500).astype(np.float32)
    (xd,) = put(device, x)
    out = both_ways(lambda x: tritonplug.triton_call(x, x.size, kernel=uses_helpers_kernel,
                                                      out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                                                      BLOCK=128), xd)
    np.testing.assert_allclose(np.asarray(out), x + 3.0, rtol=1e-6)


def test_two_outputs_and_a_float_scalar(device):
    x = RNG.standard_normal(257).astype(np.float32)
    scale = float(RNG.uniform(1, 2))
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)

    def f(x):
        return tritonplug.triton_call(x, scale, x.size, kernel=two_outputs_kernel, out_shape={"a_sum": spec,
                                      "b_prod": spec}, grid=(3,), BLOCK=128)

    out = both_ways(f, *put(device, x))
    # `scale` is not exact in fp32: it travels as fp64 and Triton's promotion decides the precision
    np.testing.assert_allclose(np.asarray(out["a_sum"]), x + scale, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(out["b_prod"]), x * scale, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("donate", [False, True])
def test_inplace_accumulate_through_aliases(device, donate):
    x = RNG.standard_normal(300).astype(np.float32)
    acc = RNG.standard_normal(300).astype(np.float32)

    def f(x, acc):
        return tritonplug.triton_call(x, acc, x.size, kernel=accumulate_kernel,
                                      out_shape=jax.ShapeDtypeStruct(acc.shape, acc.dtype), grid=(3,),
                                      input_output_aliases={1: 0}, BLOCK=128)

    xd, accd = (jax.numpy.array(a, copy=True) for a in put(device, x, acc))  # buffers XLA owns, so donatable
    if donate:
        pointer = accd.unsafe_buffer_pointer()
        out = jax.jit(f, donate_argnums=1)(xd, accd)
        assert accd.is_deleted()
        assert out.unsafe_buffer_pointer() == pointer
    else:
        out = both_ways(f, xd, accd)
        np.testing.assert_array_equal(np.asarray(accd), acc)  # the caller's array is untouched
    np.testing.assert_allclose(np.asarray(out), acc + x, rtol=1e-6)


@pytest.mark.parametrize("zeroed", [(0,), lambda meta: (0,)])
def test_atomic_sum_into_zeroed_output(device, zeroed):
    x = RNG.standard_normal(1000).astype(np.float32)
    out = both_ways(lambda x: tritonplug.triton_call(x, x.size, kernel=atomic_sum_kernel,
                                                      out_shape=jax.ShapeDtypeStruct((1,), np.float32),
                                                      grid=(8,), zeroed_outputs=zeroed, BLOCK=128), *put(device, x),
                    atol=1e-6 * np.abs(x).sum())  # atomics add the programs' partial sums in any order
    # The sum of 1000 normals may be near 0, so the rounding of a different order is bounded by the terms' size
    # (a lost or doubled program's partial sum is off by about 10, far above this bound).
    np.testing.assert_allclose(np.asarray(out)[0], x.sum(), rtol=0, atol=1e-6 * np.abs(x).sum())


def test_three_dimensional_grid(device):
    out = both_ways(lambda: tritonplug.triton_call(kernel=grid3_kernel,
                                                    out_shape=jax.ShapeDtypeStruct((4, 3, 5), np.int32),
                                                    grid=lambda meta: (meta["NX"], meta["NY"], 4), NX=5, NY=3))
    k, j, i = np.meshgrid(np.arange(4), np.arange(3), np.arange(5), indexing="ij")
    np.testing.assert_array_equal(np.asarray(out), i + 10 * j + 100 * k)


@pytest.mark.parametrize("n", [256, 250])
def test_heuristics_pick_the_unmasked_path(device, n):
    x, y = (RNG.standard_normal(n).astype(np.float32) for _ in range(2))
    out = both_ways(lambda x, y: tritonplug.triton_call(x, y, n, kernel=heuristic_add_kernel,
                                                         out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                                         grid=(2,), BLOCK=128), *put(device, x, y))
    np.testing.assert_allclose(np.asarray(out), x + y, rtol=1e-6)


def test_reduction_with_where(device):
    x = RNG.standard_normal((7, 50)).astype(np.float32)
    out = both_ways(lambda x: tritonplug.triton_call(x, 50, kernel=where_rowsum_kernel,
                                                      out_shape=jax.ShapeDtypeStruct((7,), np.float32), grid=(7,),
                                                      BLOCK=64), *put(device, x))
    np.testing.assert_allclose(np.asarray(out), np.where(x > 0, x, 0).sum(1), rtol=1e-5)


def test_tuple_operand(device):
    x, y, z = (RNG.standard_normal(100).astype(np.float32) for _ in range(3))
    out = both_ways(lambda x, y, z: tritonplug.triton_call(x, (y, z), x.size, kernel=tuple_add_kernel,
                                                            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                                            grid=(1,), BLOCK=128), *put(device, x, y, z))
    np.testing.assert_allclose(np.asarray(out), x + y * z, rtol=1e-6, atol=1e-6)  # GPUs fuse into an FMA


def test_keyword_operands_and_constexpr_default(device):
    x, y = (RNG.standard_normal(64).astype(np.float32) for _ in range(2))
    xd, yd = put(device, x, y)
    out = tritonplug.triton_call(xd, n=x.size, y_ptr=yd, kernel=add_kernel,
                                 out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1,), BLOCK=64)
    np.testing.assert_allclose(np.asarray(out), x + y, rtol=1e-6)


def test_ref_is_updated_in_place(device):
    x = RNG.standard_normal(64).astype(np.float32)
    acc = RNG.standard_normal(64).astype(np.float32)
    xd, accd = put(device, x, acc)
    acc_ref = jax.new_ref(accd)
    result = tritonplug.triton_call(xd, acc_ref, x.size, kernel=accumulate_kernel, out_shape=(), grid=(1,),
                                    BLOCK=64)
    assert result == ()
    np.testing.assert_allclose(np.asarray(acc_ref[...]), acc + x, rtol=1e-6)


def test_autotuned_matmul_against_numpy(device):
    from matmul import matmul

    a = RNG.standard_normal((64, 48)).astype(np.float32)
    b = RNG.standard_normal((48, 80)).astype(np.float32)
    out = jax.jit(matmul)(*put(device, a, b))
    np.testing.assert_allclose(np.asarray(out), a @ b, rtol=2e-2, atol=5e-2)  # tl.dot may use TF32 on GPUs


@pytest.mark.parametrize("example", ["add", "softmax", "fused_attention"])
def test_examples_run(device, example):
    import importlib

    module = importlib.import_module(example)
    with jax.default_device(device):
        module.main()
