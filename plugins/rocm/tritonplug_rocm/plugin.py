"""The ROCm backend's hooks: gfx targets, Triton's AMD options, HSACO binaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tritonplug import plugin_kit
from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, GpuKernel, Launch, Options, Target
from tritonplug_rocm import __version__, compat, hsaco_files, settings

ARCH_VARIABLE = settings.ARCH.name
#: The LDS one workgroup may use (Triton's ``max_shared_mem``), in bytes, per architecture. The target carries the
#: table's figure on every machine (the device's own needs a GPU); an architecture not listed gets ``None``, and its
#: configurations are not checked.
MAX_SHARED_MEM = {"gfx90a": 65536, "gfx942": 65536, "gfx950": 163840}


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    return BackendInfo("rocm", ("rocm",), f"{__version__}+triton{compat.TRITON_VERSION}",
                       "AMD GPUs through jaxlib's Triton kernel-call runtime",
                       option_names=tuple(sorted(plugin_kit.option_names(compat.OPTIONS_CLASS))),
                       buffer_order="operands_first")


@hookimpl
def tritonplug_declare_settings() -> Sequence[plugin_kit.Setting]:
    return settings.ALL


def _parse_arch(value: Any, source: str) -> str:
    try:
        return settings.gfx(str(value))
    except ValueError:
        raise ValueError(f"{source} must be an AMD GPU architecture such as gfx942, got {value!r}") from None


@hookimpl
def tritonplug_detect_target(platform: str, device: Any | None, requested: Mapping[str, Any]) -> Target | None:
    if platform != "rocm":
        return None
    if settings.ARCH.is_set():  # read, validated and parsed by the setting
        arch = str(settings.ARCH.get())
    elif device is not None and str(getattr(device, "compute_capability", "")).startswith("gfx"):
        arch = _parse_arch(device.compute_capability, f"device {device}")
    else:
        raise ValueError(f"no ROCm device is visible to detect the target: set {ARCH_VARIABLE}=gfx942 "
                         f"to lower for gfx942 without a GPU")
    return Target("rocm", "rocm", arch, compat.warp_size(arch), "hip", MAX_SHARED_MEM.get(arch))


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    def num_ctas(ctas: Any) -> Any:
        if ctas != 1:
            raise ValueError(f"num_ctas must be 1 on ROCm, got {ctas!r}")
        return ctas

    return plugin_kit.triton_options(call_options, compat.OPTIONS_CLASS, "ROCm", max_warps=16, num_ctas=num_ctas)


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    images, metadata = compat.compile_ttir(job.ir, job.kernel_name, str(job.target.arch), job.options.as_dict())
    return Binary(metadata.get("name", job.kernel_name), "rocm", images, metadata)


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> GpuKernel:
    """jaxlib's ROCm runtime reads the HSACO from a file path in the ``ptx`` field and deletes it:
    the path names the binary's content and resolves to a directory of this process (``hsaco_files``)."""
    return plugin_kit.gpu_kernel(binary, launch, hsaco_files.hsaco_path(binary.images["hsaco"]), compute_capability=0)
