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


#: The first jaxlib whose kernel-call proto has ``module_image`` (field 11), global scratch (fields 12/13)
#: and tensor-descriptor parameters (``Parameter.tensor_descriptor``, field 9): read from the protos
#: embedded in the CUDA plugins' ``_triton`` extensions, which 0.11.0 still lacks and 0.11.1 has (as
#: ``gpu_triton.create_tma_descriptor_parameter``). jax-triton 0.4 says "jaxlib > 0.11.0".
KERNEL_CALL_V2_JAXLIB = (0, 11, 1)
_NEEDED = ".".join(map(str, KERNEL_CALL_V2_JAXLIB))


def accepts_module_image() -> bool:
    """jaxlib 0.11.1+ loads a ready cubin from ``module_image`` (seen on 0.11.2: no ptxas ran); older
    jaxlib skips the unknown field and loads the PTX."""
    return JAXLIB_VERSION >= KERNEL_CALL_V2_JAXLIB


def global_scratch_problem() -> str | None:
    """None when jaxlib allocates the per-launch global scratch a kernel asks for (proto fields 12/13,
    needed by ``tl.make_tensor_descriptor``), else why not."""
    if JAXLIB_VERSION >= KERNEL_CALL_V2_JAXLIB:
        return None
    return (f"global scratch memory (what device-side TMA descriptors, tl.make_tensor_descriptor, are built "
            f"in) is allocated by jaxlib's runtime from version {_NEEDED} on; the installed jaxlib is "
            f"{jaxlib.__version__}")


def tensor_descriptor_problem() -> str | None:
    """None when jaxlib's runtime can pass host-side TMA descriptors, else why not.

    The version decides where no GPU plugin is installed (lowering on a machine without a GPU);
    where one is, its ``gpu_triton`` module must have ``create_tma_descriptor_parameter``.
    """
    module = gpu_triton_module()
    has_function = module is None or getattr(module, "TritonKernel", None) is None \
        or hasattr(module, "create_tma_descriptor_parameter")
    if JAXLIB_VERSION >= KERNEL_CALL_V2_JAXLIB and has_function:
        return None
    return (f"host-side TMA descriptors (TensorDescriptor operands) need jaxlib {_NEEDED} or newer, whose "
            f"kernel-call runtime encodes them; the installed jaxlib is {jaxlib.__version__}")


def export_disabled_checks() -> list:
    """What ``jax.export.export(..., disabled_checks=...)`` needs for programs calling kernels.

    The GPU targets are jaxlib's. The CPU target (``tritonplug_host_kernel``) names a Python
    function registered in *this* process by id: a CPU export deserializes anywhere but runs
    only in the process that exported it; elsewhere the call fails with "no host function is
    registered under id N". Export for ``cuda``/``rocm`` to ship a program. ``exported.serialize()``
    needs the ``flatbuffers`` package, which jax does not install (``pip install flatbuffers``).
    """
    from tritonplug.adapters.host_ffi import TARGET_NAME

    checks = jax.export.DisabledSafetyCheck
    return [checks.custom_call(FFI_TARGET), checks.custom_call(LEGACY_TARGET), checks.custom_call(TARGET_NAME)]
