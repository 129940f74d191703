"""The interpreter backend's hooks: CPU targets, GPU-compatible option checks, no binary."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tritonplug import plugin_kit
from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, HostKernel, Launch, Options, Target
from tritonplug_interpret import __version__, compat, runner
from tritonplug_interpret.checked import OutOfBoundsAccess

__all__ = ["CHECK_VARIABLE", "OutOfBoundsAccess"]

CHECK_VARIABLE = "TRITONPLUG_INTERPRET_CHECK"


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    return BackendInfo("interpret", ("cpu", ), f"{__version__}+triton{compat.TRITON_VERSION}",
                       "Triton kernels on the CPU through Triton's interpreter "
                       f"(bounds-checked when {CHECK_VARIABLE}=1)",
                       ir_stages=(), cache_binaries=False, compile_in_worker=False, autotune="first",
                       tensor_descriptors="kernel")


@hookimpl
def tritonplug_detect_target(platform: str, device: Any | None,
                             requested: Mapping[str, Any]) -> Target | None:
    if platform != "cpu":
        return None
    return Target(backend="interpret", platform="cpu", arch="host", warp_size=1, triton_backend=None)


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    """Check the options as a GPU backend would, so a call that runs here also runs there.

    The interpreter ignores them all; options of other backends are accepted (portability)
    as long as they are hashable.
    """
    options = {k: v for k, v in call_options.items() if v is not None}
    if "num_warps" in options:
        plugin_kit.power_of_two("num_warps", options["num_warps"])
    if "num_stages" in options:
        plugin_kit.int_in_range("num_stages", options["num_stages"], 0)
    if "num_ctas" in options:
        plugin_kit.int_in_range("num_ctas", options["num_ctas"], 1)
    plugin_kit.check_bools(options)
    plugin_kit.check_hashable(options)
    return Options.from_mapping(options)


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    return Binary(job.kernel_name, "interpret", {}, {})


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> HostKernel:
    check = os.environ.get(CHECK_VARIABLE, "0").strip().lower() in ("1", "true", "yes", "on")
    prepared = runner.prepare(launch, check)
    return HostKernel(launch.kernel_name, prepared.run, launch)
