"""The ROCm backend's hooks: gfx targets, Triton's AMD options, HSACO binaries."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any

from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, GpuKernel, Launch, Options, Target
from tritonplug_rocm import __version__, compat

ARCH_VARIABLE = "TRITONPLUG_ROCM_ARCH"
_HSACO_DIR = os.path.join(tempfile.gettempdir(), f"tritonplug-hsaco-{os.getuid()}")


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    return BackendInfo("rocm", ("rocm",), f"{__version__}+triton{compat.TRITON_VERSION}",
                       "AMD GPUs through jaxlib's Triton kernel-call runtime")


def _parse_arch(value: Any, source: str) -> str:
    arch = str(value).split(":")[0].strip().lower()
    if not re.fullmatch(r"gfx[0-9a-f]{3,4}", arch):
        raise ValueError(f"{source} must be an AMD GPU architecture such as gfx942, got {value!r}")
    return arch


@hookimpl
def tritonplug_detect_target(platform: str, device: Any | None, requested: Mapping[str, Any]) -> Target | None:
    if platform != "rocm":
        return None
    if os.environ.get(ARCH_VARIABLE):
        arch = _parse_arch(os.environ[ARCH_VARIABLE], ARCH_VARIABLE)
    elif device is not None and str(getattr(device, "compute_capability", "")).startswith("gfx"):
        arch = _parse_arch(device.compute_capability, f"device {device}")
    else:
        raise ValueError(f"no ROCm device is visible to detect the target: set {ARCH_VARIABLE}=gfx942 "
                         f"to lower for gfx942 without a GPU")
    return Target("rocm", "rocm", arch, compat.warp_size(arch), "hip")


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    options = {k: v for k, v in call_options.items() if v is not None}
    warps = options.setdefault("num_warps", 4)
    if isinstance(warps, bool) or not isinstance(warps, int) or warps <= 0 or warps & (warps - 1) or warps > 16:
        raise ValueError(f"num_warps must be a power of two between 1 and 16, got {warps!r}")
    stages = options.setdefault("num_stages", 2)
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 0:
        raise ValueError(f"num_stages must be a non-negative int, got {stages!r}")
    if options.get("num_ctas", 1) != 1:
        raise ValueError(f"num_ctas must be 1 on ROCm, got {options['num_ctas']!r}")
    for flag in ("enable_fp_fusion", "debug"):
        if flag in options and not isinstance(options[flag], bool):
            raise TypeError(f"{flag} must be a bool, got {options[flag]!r}")
    unknown = sorted(set(options) - compat.OPTION_NAMES)
    if unknown:
        raise ValueError(f"unknown ROCm backend option(s) {unknown} in backend_options; "
                         f"Triton's HIPOptions has {sorted(compat.OPTION_NAMES)}")
    return Options.from_mapping(options)


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    images, metadata = compat.compile_ttir(job.ir, job.kernel_name, str(job.target.arch), job.options.as_dict())
    return Binary(metadata.get("name", job.kernel_name), "rocm", images, metadata)


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> GpuKernel:
    """jaxlib's ROCm runtime reads the HSACO from a file path in the ``ptx`` field and deletes
    it, so every lowering gets its own copy of the cached binary."""
    os.makedirs(_HSACO_DIR, mode=0o700, exist_ok=True)
    fd, path = tempfile.mkstemp(suffix=".hsaco", dir=_HSACO_DIR)
    with os.fdopen(fd, "wb") as f:
        f.write(binary.images["hsaco"])
    meta = binary.metadata
    return GpuKernel(
        kernel_name=meta["name"], num_warps=meta["num_warps"], num_ctas=meta.get("num_ctas", 1),
        shared_mem_bytes=meta.get("shared", 0), image=path, ttir=binary.images.get("ttir", b"").decode(),
        compute_capability=0, launch=launch,
        global_scratch_size=meta.get("global_scratch_size", 0),
        global_scratch_align=meta.get("global_scratch_align", 1))
