"""Lowering for CUDA and ROCm on a machine without a GPU: the payload jaxlib's runtime gets."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import for_backend
from kernels import add_kernel

import tritonplug
from tritonplug.inspection import kernel_calls, paths

cuda = for_backend("cuda")
rocm = for_backend("rocm")


@triton.jit
def scalars_kernel(x_ptr, a, b, c, d, e, f, flag, one, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    x = x + a + b + c + d + e + f + one
    x = tl.where(flag, x, -x)
    tl.store(out_ptr + offs, x)


@pytest.fixture(autouse=True)
def _ptx_in_payloads(monkeypatch):
    """Send PTX, which these tests read, where jaxlib 0.11+ would get Triton's cubin and a tag instead."""
    monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")


def add(x, y, block=256, **options):
    return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(tritonplug.cdiv(x.size, block),), BLOCK=block, **options)


def lower(fn, *args, platform="cuda"):
    return jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def spec(shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


@cuda
def test_add_lowers_for_sm90_without_a_gpu(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")  # PTX in the payload on every jaxlib
    text = lower(lambda x, y: add(x, y, compute_capability=90), spec((1000,)), spec((1000,)))
    (call,) = kernel_calls(text)
    assert call["target"] == "triton_kernel_call_ffi"
    kernel_call = call["kernel_call"]
    kernel = kernel_call["kernel"]
    assert kernel["kernel_name"] == "add_kernel"
    assert ".target sm_90" in kernel["ptx"]
    assert kernel["compute_capability"] == 90
    assert kernel["num_warps"] == 4
    assert "ttir" not in kernel  # sent only with debug=True
    assert (kernel_call["grid_0"], kernel_call.get("grid_1", 0), kernel_call.get("grid_2", 0)) == (4, 1, 1)
    params = kernel_call["parameters"]
    assert params[:2] == [{"array": {"ptr_divisibility": 16}}] * 2
    assert params[2] == {"i32": 1000}
    assert params[3] == {"array": {"ptr_divisibility": 16}}
    assert len(params) == 4


@cuda
def test_arch_from_environment(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "80")
    (call,) = kernel_calls(lower(add, spec((512,)), spec((512,))))
    assert ".target sm_80" in call["kernel_call"]["kernel"]["ptx"]
    assert call["kernel_call"]["kernel"]["compute_capability"] == 80


@cuda
def test_no_device_and_no_arch_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TRITONPLUG_CUDA_ARCH", raising=False)
    from helpers import gpu_platforms

    if "cuda" in gpu_platforms():
        pytest.skip("a CUDA device is visible, so the target is detected")
    with pytest.raises(ValueError, match="compute_capability=90.*TRITONPLUG_CUDA_ARCH=90"):
        lower(add, spec((520,)), spec((520,)))  # a shape no other test lowers: JAX caches lowerings


@cuda
def test_scalar_parameters_are_typed_and_one_is_specialized():
    def f(x):
        return tritonplug.triton_call(
            x, -7, 2**31 + 5, -(2**40), 2**63 + 9, 0.1, 1e300, True, 1, kernel=scalars_kernel,
            out_shape=spec((128,)), grid=1, compute_capability=90, BLOCK=128)

    (call,) = kernel_calls(lower(f, spec((128,))))
    params = call["kernel_call"]["parameters"]
    assert params == [
        {"array": {"ptr_divisibility": 16}},
        {"i32": -7}, {"u32": 2**31 + 5}, {"i64": -(2**40)}, {"u64": 2**63 + 9},
        {"f32": float(np.float32(0.1))}, {"f64": 1e300}, {"bool_": True}, {"array": {"ptr_divisibility": 16}},
    ]  # `one` == 1 is specialised into the kernel, as Triton does; 0.1 is fp32 (in range), 1e300 fp64


@cuda
def test_zeroed_outputs_and_aliases_reach_the_payload():
    @triton.jit
    def two_out(x_ptr, acc_ptr, n, out_ptr, acc_out_ptr, BLOCK: tl.constexpr):
        pass

    def g(x, acc):
        return tritonplug.triton_call(
            x, acc, x.size, kernel=two_out, out_shape=(spec((256,)), spec((256,))), grid=1,
            input_output_aliases={1: 1}, zeroed_outputs=(0,), compute_capability=90, BLOCK=256)

    text = lower(g, spec((256,)), spec((256,)))
    (call,) = kernel_calls(text)
    params = call["kernel_call"]["parameters"]
    assert params[3] == {"array": {"bytes_to_zero": 1024, "ptr_divisibility": 16}}
    assert "tf.aliasing_output = 1" in text or "output_operand_aliases" in text


@cuda
def test_autotuned_matmul_carries_every_config_with_its_grid(monkeypatch):
    from matmul import CONFIGS, matmul

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    text = lower(lambda a, b: matmul(a, b), spec((256, 256), jnp.float16), spec((256, 256), jnp.float16))
    (call,) = kernel_calls(text)
    configs = call["autotuned_kernel_call"]["configs"]
    assert len(configs) == len(CONFIGS) == 4
    for config, expected in zip(configs, CONFIGS, strict=True):
        bm, bn = expected.kwargs["BLOCK_M"], expected.kwargs["BLOCK_N"]
        assert config["kernel_call"]["grid_0"] == tritonplug.cdiv(256, bm) * tritonplug.cdiv(256, bn)
        assert config["kernel_call"]["kernel"]["num_warps"] == expected.num_warps
        assert f"BLOCK_M={bm}" in config["description"]
        assert ".target sm_90" in config["kernel_call"]["kernel"]["ptx"]


@cuda
def test_autotuned_call_records_aliases():
    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=[])
    @triton.jit
    def inplace(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    def f(x):
        return tritonplug.triton_call(x, x.size, kernel=inplace, out_shape=spec((512,)),
                                      grid=lambda m: (512 // m["BLOCK"],), input_output_aliases={0: 0},
                                      compute_capability=90)

    (call,) = kernel_calls(lower(f, spec((512,))))
    autotuned = call["autotuned_kernel_call"]
    (alias,) = autotuned["input_output_aliases"]  # proto3 leaves zero indices out
    # jaxlib saves the input while it autotunes when buffers[input] == buffers[output], both indices into
    # its one list of buffers (operands, then results): the output is buffer 1.
    assert alias.get("input_buffer_idx", 0) == 0 and alias["output_buffer_idx"] == 1
    assert alias["buffer_size_bytes"] == 2048
    assert [c["kernel_call"]["grid_0"] for c in autotuned["configs"]] == [8, 4]


@rocm
def test_add_lowers_for_gfx942_without_a_gpu(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_ROCM_ARCH", "gfx942")
    (call,) = kernel_calls(lower(lambda x, y: add(x, y, compute_capability=90), spec((1000,)), spec((1000,)),
                                 platform="rocm"))
    kernel = call["kernel_call"]["kernel"]
    assert kernel["kernel_name"] == "add_kernel"
    hsaco = Path(kernel["ptx"])
    assert hsaco.read_bytes()[:4] == b"\x7fELF"
    assert b"gfx942" in hsaco.read_bytes()
    os.unlink(hsaco)


@rocm
def test_autotuned_matmul_lowers_for_gfx942(monkeypatch):
    from matmul import CONFIGS, matmul

    monkeypatch.setenv("TRITONPLUG_ROCM_ARCH", "gfx942")
    text = lower(lambda a, b: matmul(a, b), spec((192, 192), jnp.float16), spec((192, 192), jnp.float16),
                 platform="rocm")
    (call,) = kernel_calls(text)
    configs = call["autotuned_kernel_call"]["configs"]
    # the two largest tiles need more than gfx942's 64 KiB of LDS: left out, as Triton's autotuner leaves them
    skipped = [p for p in paths() if p.kernel == "matmul_kernel"][-1].skipped
    assert len(skipped) == 2 and all("BLOCK_M=128" in s and "more than the 65536 B" in s for s in skipped), skipped
    fitting = CONFIGS[2:]
    assert len(configs) == len(fitting)
    for config, expected in zip(configs, fitting, strict=True):
        bm, bn = expected.kwargs["BLOCK_M"], expected.kwargs["BLOCK_N"]
        assert config["kernel_call"]["grid_0"] == tritonplug.cdiv(192, bm) * tritonplug.cdiv(192, bn)
        hsaco = Path(config["kernel_call"]["kernel"]["ptx"])
        assert hsaco.read_bytes()[:4] == b"\x7fELF"
        os.unlink(hsaco)


@rocm
def test_rocm_without_arch_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TRITONPLUG_ROCM_ARCH", raising=False)
    with pytest.raises(ValueError, match="TRITONPLUG_ROCM_ARCH=gfx942"):
        lower(add, spec((528,)), spec((528,)), platform="rocm")


@cuda
def test_export_for_cuda_round_trips():
    exported = jax.export.export(jax.jit(lambda x, y: add(x, y, compute_capability=90)), platforms=["cuda"],
                                 disabled_checks=tritonplug.export_disabled_checks())(spec((300,)), spec((300,)))
    restored = jax.export.deserialize(exported.serialize())
    (call,) = kernel_calls(restored.mlir_module())
    assert call["kernel_call"]["kernel"]["kernel_name"] == "add_kernel"


@cuda
def test_grad_points_to_custom_vjp():
    x = jnp.ones(256, jnp.float32)
    with pytest.raises(NotImplementedError, match="custom_vjp"):
        jax.grad(lambda x: add(x, x, compute_capability=90).sum())(x)


@cuda
def test_num_ctas_above_one_needs_hopper():
    with pytest.raises(ValueError, match="num_ctas"):
        lower(lambda x, y: add(x, y, compute_capability=80, num_ctas=2), spec((256,)), spec((256,)))


@cuda
def test_two_kernels_in_one_program():
    text = lower(lambda x, y: add(add(x, y, compute_capability=90), y, block=128, compute_capability=90),
                 spec((256,)), spec((256,)))
    grids = sorted(c["kernel_call"]["grid_0"] for c in kernel_calls(text))
    assert grids == [1, 2]


@cuda
@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.int8, jnp.uint32, jnp.float64, jnp.bool_])
def test_pointer_dtypes_lower(dtype):
    @triton.jit
    def copy(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))

    with jax.enable_x64(True):
        text = lower(lambda x: tritonplug.triton_call(x, kernel=copy, out_shape=spec((64,), dtype), grid=1,
                                                      compute_capability=90, BLOCK=64), spec((64,), dtype))
    assert kernel_calls(text)[0]["kernel_call"]["kernel"]["kernel_name"] == "copy"


def test_entry_points_are_registered():
    from helpers import installed_backends

    names = installed_backends()
    assert names, "no tritonplug backend is installed"
    loaded = {b.name: b.platforms for b in tritonplug.backends()}
    for name in names:
        assert name in loaded
    if "cuda" in loaded:
        assert loaded["cuda"] == ("cuda",)
    np.testing.assert_equal(tritonplug.cdiv(10, 4), 3)


@cuda
def test_legacy_custom_call_target_on_request():
    text = lower(lambda x, y: add(x, y, compute_capability=90, custom_call_target_name="triton_kernel_call"),
                 spec((640,)), spec((640,)))
    (call,) = kernel_calls(text)
    assert call["target"] == "triton_kernel_call"
    assert call["kernel_call"]["kernel"]["kernel_name"] == "add_kernel"
    with pytest.raises(ValueError, match="custom_call_target_name"):
        add(jnp.ones(8), jnp.ones(8), custom_call_target_name="my_call")
