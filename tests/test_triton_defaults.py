"""Options a call leaves unset take the installed Triton's defaults, as a kernel launched by Triton itself would.

FP fusion (``a * b + c`` → one FMA):
Triton 3.6–3.8 fuse unless ``TRITON_DEFAULT_FP_FUSION=0``; 3.9 also honours ``TRITON_FORCE_DISABLE_FP_FUSION`` (and
warns when the default is unset); 3.10 does not fuse unless ``TRITON_DEFAULT_FP_FUSION=1``. A call's
``enable_fp_fusion=`` wins over the default. Each test compares with what Triton's own ``triton.compile`` does in
the same environment (its options, its PTX), so it holds on every Triton version without naming one.

Debug mode (device assertions compiled in): ``@triton.jit(debug=True)`` or ``TRITON_DEBUG=1``, as Triton's launcher.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import for_backend, requires_backend, requires_cuda_device

import tritonplug
from tritonplug.inspection import kernel_calls

cuda = for_backend("cuda")
SM90 = ("cuda", 90, 32)
FMA = "fma.rn.f32"


@triton.jit
def mul_add_kernel(x_ptr, y_ptr, z_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * tl.load(y_ptr + offs) + tl.load(z_ptr + offs))


@pytest.fixture(params=["unset", "0", "1"], ids=lambda v: f"TRITON_DEFAULT_FP_FUSION={v}")
def default_fusion(request, monkeypatch):
    """``TRITON_DEFAULT_FP_FUSION`` unset, 0 or 1 (tox and the test session set it to 1 otherwise)."""
    monkeypatch.delenv("TRITON_FORCE_DISABLE_FP_FUSION", raising=False)
    if request.param == "unset":
        monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION", raising=False)
    else:
        monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", request.param)
    monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")  # PTX in the payload, on every jaxlib
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Triton 3.9's one-time "TRITON_DEFAULT_FP_FUSION is unset"
        yield request.param


def triton_options(requested: bool | None):
    """The options Triton's own ``triton.compile`` would compile with for sm_90 (its ``parse_options``)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    return make_backend(GPUTarget(*SM90)).parse_options({} if requested is None else {"enable_fp_fusion": requested})


def triton_ptx(requested: bool | None) -> str:
    """The PTX Triton itself makes of ``mul_add_kernel`` for sm_90."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "out_ptr": "*fp32", "BLOCK": "constexpr"}
    options = {} if requested is None else {"enable_fp_fusion": requested}
    compiled = triton.compile(ASTSource(mul_add_kernel, signature, {(4,): 128}), target=GPUTarget(*SM90),
                              options=options)
    return compiled.asm["ptx"]


def tritonplug_ptx(**options) -> str:
    """The PTX in the payload of a call of ``mul_add_kernel`` lowered for sm_90."""
    spec = jax.ShapeDtypeStruct((128,), jnp.float32)

    def f(x, y, z):
        return tritonplug.triton_call(x, y, z, kernel=mul_add_kernel, out_type=spec, grid=(1,), BLOCK=128,
                                      compute_capability=90, **options)

    text = jax.jit(f).trace(spec, spec, spec).lower(lowering_platforms=("cuda",)).as_text()
    (call,) = kernel_calls(text)
    return call["kernel_call"]["kernel"]["ptx"]


@cuda
@pytest.mark.parametrize("requested", [None, True, False], ids=["unset", "True", "False"])
def test_parse_options_decides_fusion_as_triton_does(default_fusion, requested):
    from tritonplug_cuda import plugin

    from tritonplug.records import Target

    sm90 = Target("cuda", "cuda", 90, 32, "cuda")
    ours = plugin.tritonplug_parse_options(sm90, {"enable_fp_fusion": requested}).get("enable_fp_fusion")
    assert ours is triton_options(requested).enable_fp_fusion
    if requested is not None:
        assert ours is requested  # the call's option wins over TRITON_DEFAULT_FP_FUSION


@cuda
def test_compiled_kernel_fuses_exactly_when_triton_would(default_fusion):
    expected = FMA in triton_ptx(None)
    assert expected is triton_options(None).enable_fp_fusion  # the PTX tells fusion apart
    assert (FMA in tritonplug_ptx()) is expected


@cuda
def test_the_call_option_wins_and_is_part_of_the_cache_key(default_fusion):
    # One cache, one environment: an option missing from the key would hand the second call the first's binary.
    assert FMA in tritonplug_ptx(enable_fp_fusion=True)
    assert FMA not in tritonplug_ptx(enable_fp_fusion=False)
    assert (FMA in tritonplug_ptx()) is triton_options(None).enable_fp_fusion


@cuda
@pytest.mark.skipif(not hasattr(triton.knobs.language, "force_disable_fp_fusion"),
                    reason=f"Triton {triton.__version__} has no TRITON_FORCE_DISABLE_FP_FUSION (3.9+)")
def test_force_disable_overrides_the_call_as_in_triton(monkeypatch):
    monkeypatch.setenv("TRITON_FORCE_DISABLE_FP_FUSION", "1")
    monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")
    assert triton_options(True).enable_fp_fusion is False
    assert FMA not in tritonplug_ptx(enable_fp_fusion=True)


def test_enable_fp_fusion_is_unset_unless_given():
    """The call passes ``None`` to the backends (the hook spec's "unset"), so they apply Triton's default."""
    from tritonplug.calls.options import CallOptions

    assert CallOptions(grid=(1,)).checked(1).compiler_options()["enable_fp_fusion"] is None
    assert CallOptions(grid=(1,), enable_fp_fusion=False).checked(1).compiler_options()["enable_fp_fusion"] is False
    assert CallOptions(grid=(1,), enable_fp_fusion=np.bool_(True)).checked(1).compiler_options()[
        "enable_fp_fusion"] is True


def _asserting(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.device_assert(x > 0, "x must be positive")
    tl.store(out_ptr + offs, x)


@cuda
@pytest.mark.skipif(triton.knobs.runtime.debug, reason="TRITON_DEBUG=1 was set when Triton was imported")
def test_debug_follows_the_kernels_jit_decorator_as_in_triton(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")
    spec = jax.ShapeDtypeStruct((128,), jnp.float32)

    def ptx(kernel, **options):
        def f(x):
            return tritonplug.triton_call(x, kernel=kernel, out_type=spec, grid=(1,), BLOCK=128, compute_capability=90,
                                          **options)
        (call,) = kernel_calls(jax.jit(f).trace(spec).lower(lowering_platforms=("cuda",)).as_text())
        return call["kernel_call"]["kernel"]["ptx"]

    assert "assertfail" not in ptx(triton.jit(_asserting))
    assert "assertfail" in ptx(triton.jit(debug=True)(_asserting))  # Triton's launcher: debug from the decorator
    assert "assertfail" in ptx(triton.jit(_asserting), debug=True)


@pytest.mark.cuda
@requires_backend("cuda")
@requires_cuda_device
@pytest.mark.parametrize("option", [None, True, False], ids=["unset", "True", "False"])
def test_on_the_gpu_results_equal_tritons_launcher_bit_for_bit(default_fusion, option, monkeypatch):
    """Where an FMA and a rounded multiply-then-add differ (random fp32 inputs), the same kernel gives the same
    bits through tritonplug as through Triton's own launcher on torch tensors, in every environment."""
    torch = pytest.importorskip("torch", reason="Triton's own launcher is compared on torch tensors")
    monkeypatch.delenv("TRITONPLUG_CUDA_MODULE_IMAGE")  # the default payload: Triton's cubin
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(128, dtype=np.float32) for _ in range(3))
    device = jax.devices("cuda")[0]
    spec = jax.ShapeDtypeStruct((128,), jnp.float32)
    extra = {} if option is None else {"enable_fp_fusion": option}
    got = jax.jit(lambda a, b, c: tritonplug.triton_call(a, b, c, kernel=mul_add_kernel, out_type=spec, grid=(1,),
                                                         BLOCK=128, **extra))(
        *(jax.device_put(v, device) for v in (x, y, z)))
    tensors = [torch.tensor(v, device="cuda") for v in (x, y, z)]
    out = torch.empty(128, device="cuda")
    # A fresh JITFunction: Triton's in-memory kernel cache keys on the launch's keywords, not on
    # TRITON_DEFAULT_FP_FUSION, so a kernel compiled under another setting earlier in this process would answer.
    triton.jit(mul_add_kernel.fn)[(1,)](*tensors, out, BLOCK=128, **extra)
    np.testing.assert_array_equal(np.asarray(got), out.cpu().numpy())
