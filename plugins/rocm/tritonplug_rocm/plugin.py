"""The ROCm backend's hooks: gfx targets, Triton's AMD options, HSACO binaries."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tritonplug import plugin_kit
from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, GpuKernel, Launch, Options, Target
from tritonplug_rocm import __version__, compat, hsaco_files

ARCH_VARIABLE = plugin_kit.ROCM_ARCH.name


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    return BackendInfo("rocm", ("rocm",), f"{__version__}+triton{compat.TRITON_VERSION}",
                       "AMD GPUs through jaxlib's Triton kernel-call runtime",
                       option_names=tuple(sorted(plugin_kit.option_names(compat.OPTIONS_CLASS))),
                       buffer_order="operands_first")


def _parse_arch(value: Any, source: str) -> str:
    arch = str(value).split(":")[0].strip().lower()
    if not re.fullmatch(r"gfx[0-9a-f]{3,4}", arch):
        raise ValueError(f"{source} must be an AMD GPU architecture such as gfx942, got {value!r}")
    return arch


@hookimpl
def tritonplug_detect_target(platform: str, device: Any | None, requested: Mapping[str, Any]) -> Target | None:
    if platform != "rocm":
        return None
    if plugin_kit.ROCM_ARCH.is_set():  # read, validated and parsed by the setting
        arch = str(plugin_kit.ROCM_ARCH.get())
    elif device is not None and str(getattr(device, "compute_capability", "")).startswith("gfx"):
        arch = _parse_arch(device.compute_capability, f"device {device}")
    else:
        raise ValueError(f"no ROCm device is visible to detect the target: set {ARCH_VARIABLE}=gfx942 "
                         f"to lower for gfx942 without a GPU")
    return Target("rocm", "rocm", arch, compat.warp_size(arch), "hip")


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    options = {k: v for k, v in call_options.items() if v is not None}
    defaults = {k: plugin_kit.triton_default(compat.OPTIONS_CLASS, k) for k in ("num_warps", "num_stages")}
    options["num_warps"] = plugin_kit.power_of_two("num_warps", options.get("num_warps", defaults["num_warps"]), 16)
    options["num_stages"] = plugin_kit.int_in_range("num_stages", options.get("num_stages", defaults["num_stages"]), 0)
    if options.get("num_ctas", 1) != 1:
        raise ValueError(f"num_ctas must be 1 on ROCm, got {options['num_ctas']!r}")
    plugin_kit.check_bools(options)
    plugin_kit.check_known_options(options, compat.OPTIONS_CLASS, "ROCm")
    # Triton's own default where the call leaves it unset, resolved here so it is part of the cache key
    options["enable_fp_fusion"] = plugin_kit.fp_fusion_enabled(options.get("enable_fp_fusion"))
    return Options.from_mapping(options)


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    images, metadata = compat.compile_ttir(job.ir, job.kernel_name, str(job.target.arch), job.options.as_dict())
    return Binary(metadata.get("name", job.kernel_name), "rocm", images, metadata)


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> GpuKernel:
    """jaxlib's ROCm runtime reads the HSACO from a file path in the ``ptx`` field and deletes it:
    the path names the binary's content and resolves to a directory of this process (``hsaco_files``)."""
    return plugin_kit.gpu_kernel(binary, launch, hsaco_files.hsaco_path(binary.images["hsaco"]), compute_capability=0)
