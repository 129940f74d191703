"""Hooks of a backend for ``oneapi`` and ``tpu``, declared entirely through its ``BackendInfo``.

It asks for Triton's TTIR (``ir_stages``), compiles it in a worker into a "binary" that is the
TTIR itself plus a manifest, lets the host cache that on disk, and keeps every autotune
configuration. Its kernels run in Triton's interpreter on host buffers, so the platform
needs no device here: tests lower for ``tpu``/``oneapi`` on a CPU-only machine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from tritonplug_interpret import plugin as interpret
from tritonplug_interpret import runner

from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, HostKernel, Launch, Options, Target
from tritonplug_accelerator import __version__

NAME = "accelerator"
PLATFORMS = ("oneapi", "tpu")


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    return BackendInfo(NAME, PLATFORMS, __version__, "example backend for oneapi and tpu: TTIR compiled in workers",
                       ir_stages=("ttir",), cache_binaries=True, compile_in_worker=True, autotune="runtime",
                       pointer_divisibility=8, integer_divisibility=0, specialize_ones=False)


@hookimpl
def tritonplug_detect_target(platform: str, device: Any | None, requested: Mapping[str, Any]) -> Target | None:
    if platform not in PLATFORMS:
        return None
    # Triton's front end needs a GPU target; its TTIR is the same for any backend that reads it.
    return Target(backend=NAME, platform=platform, arch=80, warp_size=32, triton_backend="cuda")


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    return interpret.tritonplug_parse_options(target=target, call_options=call_options)


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    if job.ir_stage != "ttir" or "tt.func" not in job.ir:
        raise ValueError(f"the accelerator backend expects TTIR, got stage {job.ir_stage!r}")
    manifest = {"kernel": job.kernel_name, "compiled_by_pid": os.getpid()}
    return Binary(job.kernel_name, "accelerator-ttir", {"ttir": job.ir.encode()},
                  {"manifest": json.dumps(manifest)})


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> HostKernel:
    # Triton's interpreter on host buffers (the interpret backend's fallback path): a host call lowers for
    # any platform, where the interpret backend's checked XLA path would need Python callbacks.
    return HostKernel(launch.kernel_name, runner.prepare(launch).run, launch)
