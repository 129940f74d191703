"""The CPU backend's hooks: CPU targets, GPU-compatible option checks, TTIR as the binary, and kernels
compiled by XLA from it (or run in Triton's interpreter)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tritonplug import plugin_kit
from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, HostKernel, JaxKernel, Launch, Options, Target
from tritonplug_interpret import __version__, compat, paths, settings
from tritonplug_interpret.checked import OutOfBoundsAccess

__all__ = ["CHECK_VARIABLE", "OutOfBoundsAccess"]

CHECK_VARIABLE = settings.CHECK.name
#: Triton's front end runs as for an sm_90 GPU, so a kernel's source errors, and arguments it cannot
#: use, are refused on the CPU as on a GPU; its TTIR is the most generic (every fp8 type is legal), and
#: neither CPU path uses the GPU specifics.
FRONT_END_ARCH = 90


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    return BackendInfo("interpret", ("cpu", ), f"{__version__}+triton{compat.TRITON_VERSION}",
                       "Triton kernels on the CPU: their TTIR compiled by XLA, or Triton's interpreter "
                       f"({paths.PATH_VARIABLE}=xla|interpret; bounds-checked when {CHECK_VARIABLE}=1)",
                       ir_stages=("ttir",), cache_binaries=True, compile_in_worker=False, autotune="first",
                       option_names=compat.GPU_OPTION_NAMES, max_grid=plugin_kit.CUDA_MAX_GRID,
                       tensor_descriptors="kernel", inlines=True)


@hookimpl
def tritonplug_declare_settings() -> Sequence[plugin_kit.Setting]:
    return settings.ALL


@hookimpl
def tritonplug_detect_target(platform: str, device: Any | None,
                             requested: Mapping[str, Any]) -> Target | None:
    if platform != "cpu" and not requested.get("inline"):
        return None
    return Target(backend="interpret", platform=platform, arch=FRONT_END_ARCH, warp_size=32, triton_backend="cuda")


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    """Check the options as the GPU the front end compiles for (sm_90) would, so a call that runs here
    also runs there.

    The interpreter ignores them all; options of Triton's GPU backends (CUDA's and AMD's) are accepted
    (portability), any other name is refused.
    """
    options = {k: v for k, v in call_options.items() if v is not None}
    if "num_warps" in options:
        plugin_kit.power_of_two("num_warps", options["num_warps"], 32)
    if "num_stages" in options:
        plugin_kit.int_in_range("num_stages", options["num_stages"], 0)
    if options.get("num_ctas", 1) not in (1, 2, 4, 8):
        raise ValueError(f"num_ctas must be one of (1, 2, 4, 8) (the thread blocks of a portable cluster on "
                         f"sm_90), got {options['num_ctas']!r}")
    plugin_kit.check_bools(options)
    plugin_kit.check_hashable(options)
    plugin_kit.check_option_names(options, compat.GPU_OPTION_NAMES, "interpret",
                                  "Triton's GPU backends (CUDAOptions, HIPOptions)")
    return Options.from_mapping(options)


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    """The binary is the kernel's TTIR after Triton's clean-up passes (cached on disk like any binary):
    the XLA path translates it; the interpreter runs the source."""
    return Binary(job.kernel_name, "ttir", {"ttir": compat.canonical_ttir(job.ir).encode()}, {})


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> HostKernel | JaxKernel:
    if target.platform != "cpu":  # a call inlined on another platform (inline=True): the translation or nothing,
        return paths.inline_kernel(binary, launch, False, target.platform)  # unchecked, as a launched kernel is
    check = settings.CHECK.get()
    compiled = paths.xla_kernel(binary, launch, check)
    if compiled is not None:
        return compiled
    from tritonplug_interpret import runner  # the interpreter: imported only when a kernel needs it

    prepared = runner.prepare(launch, check)
    return HostKernel(launch.kernel_name, prepared.run, launch)
