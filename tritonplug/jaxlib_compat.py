"""The host's one adapter over jaxlib's Triton runtime (jaxlib 0.10 and 0.11).

Every jaxlib probe of the host lives here: the custom-call targets (every supported jaxlib
registers the FFI target ``triton_kernel_call_ffi``; the legacy ``triton_kernel_call`` is
emitted only on request), which fields of the kernel call each version reads, and whether
host-side TMA descriptors can be passed.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jaxlib

FFI_TARGET = "triton_kernel_call_ffi"
LEGACY_TARGET = "triton_kernel_call"
GPU_TARGETS = (FFI_TARGET, LEGACY_TARGET)
JAXLIB_VERSION = tuple(int(p) for p in jaxlib.__version__.split(".")[:3] if p.isdigit())


@functools.cache
def gpu_triton_module() -> Any | None:
    """jaxlib's ``gpu_triton`` module (``TritonKernel``, ``create_tma_descriptor_parameter``, ...), None
    if this jaxlib lacks it. jaxlib ships the module; its classes come from the installed GPU plugin
    (jax-cuda12-plugin, the ROCm plugin), so without one they are absent."""
    try:
        from jax._src.lib import gpu_triton
    except ImportError:
        return None
    return gpu_triton


def accepts_cost_estimate() -> bool:
    """jaxlib newer than 0.11.0 reads ``cost_estimate_json`` on the FFI target."""
    return JAXLIB_VERSION > (0, 11, 0)


def accepts_module_image() -> bool:
    """jaxlib 0.11 loads a ready cubin from ``module_image`` (seen on 0.11.2: no ptxas ran); older
    jaxlib protos lack the field."""
    return JAXLIB_VERSION >= (0, 11, 0)


def export_disabled_checks() -> list:
    """What ``jax.export.export(..., disabled_checks=...)`` needs for programs calling kernels.

    The GPU targets are jaxlib's. The CPU target (``tritonplug_host_kernel``) names a Python
    function registered in *this* process by id: a CPU export deserializes anywhere but runs
    only in the process that exported it; elsewhere the call fails with "no host function is
    registered under id N". Export for ``cuda``/``rocm`` to ship a program.
    """
    from tritonplug.host_ffi import TARGET_NAME

    checks = jax.export.DisabledSafetyCheck
    return [checks.custom_call(FFI_TARGET), checks.custom_call(LEGACY_TARGET), checks.custom_call(TARGET_NAME)]


TMA_MIN_JAXLIB = (0, 11, 1)  # jax-triton: host-side TMA descriptors need jaxlib > 0.11.0


def tma_descriptor_support() -> str | None:
    """None when the installed jaxlib can pass host-side TMA descriptors, else why not."""
    if JAXLIB_VERSION >= TMA_MIN_JAXLIB and hasattr(gpu_triton_module(), "create_tma_descriptor_parameter"):
        return None
    return (f"host-side TMA descriptors need jaxlib > 0.11.0 with gpu_triton.create_tma_descriptor_parameter; "
            f"the installed jaxlib is {jaxlib.__version__}")
