"""The CUDA backend's hooks: sm_XY targets, Triton's NVIDIA options, PTX + cubin binaries from TTIR or
(Gluon kernels) TTGIR, host-side tensor descriptors as jaxlib TMA descriptor parameters."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tritonplug import plugin_kit
from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, GpuKernel, Launch, Options, Target
from tritonplug_cuda import __version__, compat, descriptors, settings

ARCH_VARIABLE = settings.ARCH.name
MODULE_IMAGE_VARIABLE = settings.MODULE_IMAGE.name
#: ``num_ctas`` values a GPU with thread-block clusters (sm_90+) launches: a portable cluster's sizes.
CLUSTER_SIZES = (1, 2, 4, 8)
#: The shared memory one block may use (the opt-in maximum, ``cudaDevAttrMaxSharedMemoryPerBlockOptin``, which
#: Triton reads as ``max_shared_mem``), in bytes, per compute capability, from NVIDIA's tables. Neither JAX nor
#: jaxlib exposes the device's figure, and Triton's driver query needs a GPU, so the target carries the table's
#: figure on every machine; a capability not listed gets ``None``, and its configurations are not checked.
MAX_SHARED_MEM = {70: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448,
                  120: 101376}


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    return BackendInfo("cuda", ("cuda",), f"{__version__}+triton{compat.TRITON_VERSION}",
                       "NVIDIA GPUs through jaxlib's Triton kernel-call runtime",
                       option_names=tuple(sorted(plugin_kit.option_names(compat.OPTIONS_CLASS))),
                       max_grid=plugin_kit.CUDA_MAX_GRID, ir_stages=("ttir", "ttgir"), tensor_descriptors="jaxlib",
                       buffer_order="operands_first")


@hookimpl
def tritonplug_declare_settings() -> Sequence[plugin_kit.Setting]:
    return settings.ALL


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
    elif settings.ARCH.is_set():  # read, validated and parsed by the setting
        capability = int(settings.ARCH.get() or 0)
    elif device is not None and getattr(device, "compute_capability", None):
        capability = _parse_capability(device.compute_capability, f"device {device}")
    else:
        raise ValueError(f"no CUDA device is visible to detect the target: pass compute_capability=90 to "
                         f"triton_call or set {ARCH_VARIABLE}=90 to lower for sm_90 without a GPU")
    return Target("cuda", "cuda", capability, 32, "cuda", MAX_SHARED_MEM.get(capability))


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    def num_ctas(ctas: Any) -> Any:
        if ctas != 1 and int(target.arch) < 90:
            raise ValueError(f"num_ctas={ctas!r} needs thread-block clusters (compute capability 90+); "
                             f"the target is sm_{target.arch}, where num_ctas must be 1")
        if ctas not in CLUSTER_SIZES:
            raise ValueError(f"num_ctas must be one of {CLUSTER_SIZES} on sm_{target.arch} (the thread blocks of a "
                             f"portable cluster), got {ctas!r}")
        return ctas

    return plugin_kit.triton_options(call_options, compat.OPTIONS_CLASS, "CUDA", max_warps=32, num_ctas=num_ctas)


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    images, metadata = compat.compile_ir(job.ir, job.ir_stage, job.kernel_name, int(job.target.arch),
                                         job.options.as_dict())
    return Binary(metadata.get("name", job.kernel_name), "cuda", images, metadata)


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> GpuKernel:
    use_cubin = settings.MODULE_IMAGE.get()
    if descriptors.count(launch.params):
        params = descriptors.expand(launch.params, binary.metadata.get("tensordesc_meta") or (), launch.kernel_name)
        launch = dataclasses.replace(launch, params=params)
    return plugin_kit.gpu_kernel(binary, launch, binary.images["ptx"].decode(), int(target.arch),
                                 module_image=binary.images["cubin"] if use_cubin else None)
