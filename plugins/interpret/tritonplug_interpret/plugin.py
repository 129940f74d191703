"""The interpreter backend's hooks: CPU targets, GPU-compatible option checks, no binary."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, HostKernel, JaxKernel, Launch, Options, Target
from tritonplug_interpret import __version__, compat, paths, runner
from tritonplug_interpret.checked import OutOfBoundsAccess

__all__ = ["CHECK_VARIABLE", "OutOfBoundsAccess"]

CHECK_VARIABLE = "TRITONPLUG_INTERPRET_CHECK"
#: Triton's front end runs as for an sm_90 GPU: the most generic TTIR (every fp8 type is legal, no
#: lowering decisions are taken before TTIR); the CPU paths use none of the GPU specifics.
FRONT_END_ARCH = 90


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    return BackendInfo("interpret", ("cpu", ), f"{__version__}+triton{compat.TRITON_VERSION}",
                       "Triton kernels on the CPU: their TTIR compiled by XLA, or Triton's interpreter "
                       f"({paths.PATH_VARIABLE}=xla|interpret; bounds-checked when {CHECK_VARIABLE}=1)",
                       ir_stages=("ttir",), cache_binaries=True, compile_in_worker=False, autotune="first")


@hookimpl
def tritonplug_detect_target(platform: str, device: Any | None,
                             requested: Mapping[str, Any]) -> Target | None:
    if platform != "cpu":
        return None
    return Target(backend="interpret", platform="cpu", arch=FRONT_END_ARCH, warp_size=32, triton_backend="cuda")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    """Check the options as a GPU backend would, so a call that runs here also runs there.

    The interpreter ignores them all; options of other backends are accepted (portability)
    as long as they are hashable.
    """
    options = {k: v for k, v in call_options.items() if v is not None}
    warps = options.get("num_warps")
    if warps is not None and (not _is_int(warps) or warps <= 0 or warps & (warps - 1)):
        raise ValueError(f"num_warps must be a positive power of two, got {warps!r}")
    stages = options.get("num_stages")
    if stages is not None and (not _is_int(stages) or stages < 0):
        raise ValueError(f"num_stages must be a non-negative int, got {stages!r}")
    ctas = options.get("num_ctas")
    if ctas is not None and (not _is_int(ctas) or ctas < 1):
        raise ValueError(f"num_ctas must be an int >= 1, got {ctas!r}")
    for flag in ("enable_fp_fusion", "debug"):
        if flag in options and not isinstance(options[flag], bool):
            raise TypeError(f"{flag} must be a bool, got {options[flag]!r}")
    for name, value in options.items():
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"option {name} must be hashable, got {type(value).__name__} {value!r}") from None
    return Options.from_mapping(options)


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    """The binary is the kernel's TTIR after Triton's clean-up passes (cached on disk like any binary)."""
    if not job.ir:
        return Binary(job.kernel_name, "interpret", {}, {})
    return Binary(job.kernel_name, "ttir", {"ttir": compat.canonical_ttir(job.ir).encode()}, {})


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> HostKernel | JaxKernel:
    check = os.environ.get(CHECK_VARIABLE, "0").strip().lower() in ("1", "true", "yes", "on")
    compiled = paths.xla_kernel(binary, launch, check)
    if compiled is not None:
        return compiled
    prepared = runner.prepare(launch, check)
    return HostKernel(launch.kernel_name, prepared.run, launch)
