"""The CUDA backend's hooks: sm_XY targets, Triton's NVIDIA options, PTX + cubin binaries."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, GpuKernel, Launch, Options, Target
from tritonplug_cuda import __version__, compat

ARCH_VARIABLE = "TRITONPLUG_CUDA_ARCH"
MODULE_IMAGE_VARIABLE = "TRITONPLUG_CUDA_MODULE_IMAGE"


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    return BackendInfo("cuda", ("cuda",), f"{__version__}+triton{compat.TRITON_VERSION}",
                       "NVIDIA GPUs through jaxlib's Triton kernel-call runtime")


def _parse_capability(value: Any, source: str) -> int:
    text = str(value).strip().lower().removeprefix("sm_").rstrip("a")
    try:
        capability = int(float(text) * 10) if "." in text else int(text)
    except ValueError:
        raise ValueError(f"{source} must be a compute capability such as 90 or 9.0, got {value!r}") from None
    if not 50 <= capability < 200:
        raise ValueError(f"{source}: compute capability {capability} is outside the range Triton supports")
    return capability


@hookimpl
def tritonplug_detect_target(platform: str, device: Any | None, requested: Mapping[str, Any]) -> Target | None:
    if platform != "cuda":
        return None
    if requested.get("compute_capability") is not None:
        capability = _parse_capability(requested["compute_capability"], "compute_capability")
    elif os.environ.get(ARCH_VARIABLE):
        capability = _parse_capability(os.environ[ARCH_VARIABLE], ARCH_VARIABLE)
    elif device is not None and getattr(device, "compute_capability", None):
        capability = _parse_capability(device.compute_capability, f"device {device}")
    else:
        raise ValueError(f"no CUDA device is visible to detect the target: pass compute_capability=90 to "
                         f"triton_call or set {ARCH_VARIABLE}=90 to lower for sm_90 without a GPU")
    return Target("cuda", "cuda", capability, 32, "cuda")


def _positive_power_of_two(name: str, value: Any, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1) or value > limit:
        raise ValueError(f"{name} must be a power of two between 1 and {limit}, got {value!r}")
    return value


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    options = {k: v for k, v in call_options.items() if v is not None}
    options["num_warps"] = _positive_power_of_two("num_warps", options.get("num_warps", 4), 32)
    stages = options.get("num_stages", 3)
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 0:
        raise ValueError(f"num_stages must be a non-negative int, got {stages!r}")
    options["num_stages"] = stages
    ctas = options.get("num_ctas", 1)
    if isinstance(ctas, bool) or not isinstance(ctas, int) or not 1 <= ctas <= 16:
        raise ValueError(f"num_ctas must be an int between 1 and 16, got {ctas!r}")
    if ctas > 1 and int(target.arch) < 90:
        raise ValueError(f"num_ctas={ctas} needs thread-block clusters (compute capability 90+); "
                         f"the target is sm_{target.arch}")
    for flag in ("enable_fp_fusion", "debug"):
        if flag in options and not isinstance(options[flag], bool):
            raise TypeError(f"{flag} must be a bool, got {options[flag]!r}")
    unknown = sorted(set(options) - compat.OPTION_NAMES)
    if unknown:
        raise ValueError(f"unknown CUDA backend option(s) {unknown} in backend_options; "
                         f"Triton's CUDAOptions has {sorted(compat.OPTION_NAMES)}")
    return Options.from_mapping(options)


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    images, metadata = compat.compile_ttir(job.ir, job.kernel_name, int(job.target.arch), job.options.as_dict())
    return Binary(metadata.get("name", job.kernel_name), "cuda", images, metadata)


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> GpuKernel:
    meta = binary.metadata
    use_cubin = os.environ.get(MODULE_IMAGE_VARIABLE, "1") != "0"
    return GpuKernel(
        kernel_name=meta["name"], num_warps=meta["num_warps"], num_ctas=meta.get("num_ctas", 1),
        shared_mem_bytes=meta.get("shared", 0), image=binary.images["ptx"].decode(),
        ttir=binary.images.get("ttir", b"").decode(), compute_capability=int(target.arch), launch=launch,
        module_image=binary.images["cubin"] if use_cubin else None,
        global_scratch_size=meta.get("global_scratch_size", 0),
        global_scratch_align=meta.get("global_scratch_align", 1))
