"""Gluon kernels (``@gluon.jit``): Gluon's own front end (TTGIR), the worker continuing Triton's pipeline
from it, caching, the interpreter's refusal, and numerics on a GPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import for_backend, requires_backend, requires_cuda_device
from hopper_kernels import (
    gluon_add_kernel,
    gluon_copy_scalar_kernel,
    gluon_device_tma_copy_kernel,
    gluon_host_desc_copy_kernel,
)
from test_tensor_descriptors import cuda_kernels

import tritonplug
from tritonplug.adapters import jaxlib_compat
from tritonplug.adapters.triton_compat import kernel_facts
from tritonplug.inspection import kernel_calls
from tritonplug.lowering.kernel_call import decode_kernel_call, encode_kernel_call

cuda = for_backend("cuda")
S = jax.ShapeDtypeStruct


def gluon_add(x, y, block=256, **options):
    return tritonplug.triton_call(x, y, x.size, kernel=gluon_add_kernel, out_type=S(x.shape, x.dtype),
                                  grid=(tritonplug.cdiv(x.size, block),), BLOCK=block, **options)


def test_gluon_kernels_are_detected():
    assert kernel_facts(gluon_add_kernel).language == "gluon"
    assert kernel_facts(gluon_add_kernel).ir_stage == "ttgir"
    from kernels import add_kernel

    assert (kernel_facts(add_kernel).language, kernel_facts(add_kernel).ir_stage) == ("triton", "ttir")


@requires_backend("interpret")
def test_the_interpreter_refuses_a_gluon_kernel_at_the_call(fresh_state):
    x = jax.device_put(jnp.ones(1000, jnp.float32), jax.devices("cpu")[0])  # the CPU backend, on a GPU machine too
    before = tritonplug.compile_stats()
    with pytest.raises(NotImplementedError, match=r"Gluon kernels need a GPU backend: .* backend 'interpret' serving "
                                                  r"platform 'cpu' compiles \['ttir'\]"):
        gluon_add(x, x)
    assert tritonplug.compile_stats() == before  # refused before anything compiled


@cuda
@pytest.mark.parametrize("num_warps", [4, 8])
def test_a_gluon_kernel_with_a_layout_lowers_for_sm90(num_warps, private_cache):
    # debug=True: the payload then carries the IR (the Gluon module) and the PTX on every jaxlib
    text = jax.jit(lambda x, y: gluon_add(x, y, num_warps=num_warps, compute_capability=90, debug=True)).trace(
        S((1000,), jnp.float32), S((1000,), jnp.float32)).lower(lowering_platforms=("cuda",)).as_text()
    (call,) = kernel_calls(text)
    kernel = call["kernel_call"]["kernel"]
    assert kernel["num_warps"] == num_warps and ".target sm_90" in kernel["ptx"]
    assert f"warpsPerCTA = [{num_warps}]" in kernel["ttir"]  # the Gluon module rides along, its layout resolved
    assert kernel["module_image"]["object_file"][:4] == b"\x7fELF" if "module_image" in kernel else True
    assert call["kernel_call"]["grid_0"] == 4
    assert [p for p in call["kernel_call"]["parameters"]][:2] == [{"array": {"ptr_divisibility": 16}}] * 2


@cuda
def test_a_gluon_kernel_is_cached_like_any_kernel(private_cache):
    specs = (S((4096,), jnp.float32), S((4096,), jnp.float32))

    def lower():
        return jax.jit(lambda x, y: gluon_add(x, y, compute_capability=90)).trace(*specs).lower(
            lowering_platforms=("cuda",)).as_text()

    before = tritonplug.compile_stats()
    first = kernel_calls(lower())[0]["kernel_call"]["kernel"]["ptx"]
    after = tritonplug.compile_stats()
    assert after["compiled"] - before["compiled"] == 1
    from tritonplug.process.state import state

    state.reset()  # a new process: only the disk cache remains
    before = tritonplug.compile_stats()
    assert kernel_calls(lower())[0]["kernel_call"]["kernel"]["ptx"] == first
    after = tritonplug.compile_stats()
    assert (after["compiled"] - before["compiled"], after["disk_hits"] - before["disk_hits"]) == (0, 1)


@cuda
def test_gluon_tma_mbarrier_and_shared_memory_compile_for_sm90():
    (kernel,) = cuda_kernels(lambda x: tritonplug.triton_call(
        x, kernel=gluon_device_tma_copy_kernel, out_type=S((32, 32), jnp.float32), grid=1, M=32, N=32),
        S((32, 32), jnp.float32))
    assert "cp.async.bulk.tensor" in kernel.image and "mbarrier" in kernel.image
    assert kernel.shared_mem_bytes >= 32 * 32 * 4
    decoded = decode_kernel_call(encode_kernel_call([kernel], name="g"))["kernel_call"]["kernel"]
    assert decoded["global_scratch_size"] == kernel.global_scratch_size > 0  # device-side descriptors live there
    assert decoded["global_scratch_align"] == kernel.global_scratch_align


@cuda
def test_device_side_descriptors_lower_where_jaxlib_allocates_scratch_else_name_the_version():
    def f(x):
        return tritonplug.triton_call(x, kernel=gluon_device_tma_copy_kernel, out_type=jax.typeof(x), grid=1, M=32,
                                      N=32, compute_capability=90)

    traced = jax.jit(f).trace(S((32, 32), jnp.float32))
    if jaxlib_compat.global_scratch_problem() is None:
        (call,) = kernel_calls(traced.lower(lowering_platforms=("cuda",)).as_text())
        assert call["kernel_call"]["kernel"]["global_scratch_size"] > 0
    else:
        with pytest.raises(NotImplementedError, match=r"bytes of global scratch .* from version 0\.11\.1 on"):
            traced.lower(lowering_platforms=("cuda",))


@cuda
def test_a_gluon_kernel_takes_a_host_descriptor_with_its_layout():
    import triton.experimental.gluon.language as gl

    layout = gl.NVMMASharedLayout(128, 32, 2)  # swizzle bytes, element bits, rank

    def f(x):
        desc = tritonplug.TensorDescriptor.from_array(x, [16, 32], layout=layout)
        return tritonplug.triton_call(desc, kernel=gluon_host_desc_copy_kernel, out_type=jax.typeof(x), grid=1, M=16,
                                      N=32)

    (kernel,) = cuda_kernels(f, S((16, 32), jnp.float32))
    params = decode_kernel_call(encode_kernel_call([kernel], name="g"))["kernel_call"]["parameters"]
    descriptor = params[0]["tensor_descriptor"]["nvidia"]
    assert descriptor["swizzle"] == 3 and descriptor["block_shape"] == [16, 32]  # CU_TENSOR_MAP_SWIZZLE_128B
    with pytest.raises(ValueError, match="Gluon kernel, whose descriptors need a shared-memory layout"):
        jax.make_jaxpr(lambda x: tritonplug.triton_call(
            tritonplug.TensorDescriptor.from_array(x, [16, 32]), kernel=gluon_host_desc_copy_kernel,
            out_type=jax.typeof(x), grid=1, M=16, N=32))(S((16, 32), jnp.float32))


# --------------------------------------------------------------------------- on a GPU

@pytest.mark.cuda
@requires_backend("cuda")
@requires_cuda_device
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.int8, jnp.int64, jnp.uint16])
def test_gpu_gluon_copy_scalar(dtype):
    x = jnp.array(42, dtype=dtype)
    out = tritonplug.triton_call(x, kernel=gluon_copy_scalar_kernel, out_type=jax.typeof(x), grid=1)
    np.testing.assert_equal(np.asarray(out), np.asarray(x))


@pytest.mark.cuda
@requires_backend("cuda")
@requires_cuda_device
def test_gpu_gluon_add_and_tma():
    x = jnp.arange(5000, dtype=jnp.float32)
    np.testing.assert_array_equal(np.asarray(jax.jit(gluon_add)(x, x)), 2 * np.asarray(x))
    if jaxlib_compat.global_scratch_problem() is None:
        y = jnp.asarray(np.random.default_rng(0).standard_normal((32, 32)), jnp.float32)
        out = tritonplug.triton_call(y, kernel=gluon_device_tma_copy_kernel, out_type=jax.typeof(y), grid=1, M=32, N=32)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(y))
