"""The example backend's six hooks: the five every backend implements and the optional sixth.

It serves JAX's ``cpu`` platform under the name ``example``. Its "binary" is a small record of
what was asked for; running a kernel is delegated to the interpret backend (a distribution this
one depends on), wrapped so every run is recorded. ``RECORD`` lets tests see each hook at work.
Its one variable of its own, ``TRITONPLUG_EXAMPLE_TAG`` (the tag of a call that passes none), is
declared to the host through ``tritonplug_declare_settings``: ``tritonplug info`` lists it, never
as a typo.

Like every plugin it imports nothing from the host but the plugin API (``tritonplug.hookspecs``,
``tritonplug.records``, ``tritonplug.plugin_kit``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tritonplug_interpret import plugin as interpret
from tritonplug_interpret import runner

from tritonplug import plugin_kit
from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, CompileJob, HostKernel, Launch, Options, Target
from tritonplug_example import __version__

NAME = "example"
BINARY_FORMAT = "example-v1"
#: Options this backend understands: triton_call's own plus one of its own, passed as
#: ``backend_options={"example_tag": "..."}``.
OPTION_NAMES = {"num_warps", "num_stages", "num_ctas", "enable_fp_fusion", "debug", "example_tag"}



def _tag(text: str) -> str:
    if not text.replace("-", "_").isidentifier():
        raise ValueError(text)
    return text


#: The example backend's own setting: the tag of a call that passes no ``example_tag``.
TAG: plugin_kit.Setting[str] = plugin_kit.Setting(
    "TRITONPLUG_EXAMPLE_TAG", "the example backend's tag for calls that pass no `example_tag`", "text",
    "a word (letters, digits, `_`, `-`)", "none", _tag, lambda: "", "a word of letters, digits, _ and -", owner=NAME)

#: What each hook saw, in order: tests read it; a real backend would not keep this.
RECORD: dict[str, list[Any]] = {"detect_target": [], "parse_options": [], "compile": [], "make_kernel": [], "run": []}


@hookimpl
def tritonplug_backend_info() -> BackendInfo:
    # Capabilities: no IR (the host skips Triton's front end), nothing worth caching, compiled here,
    # and only the first autotune configuration is run.
    return BackendInfo(NAME, ("cpu",), __version__, "example backend: runs kernels through the interpreter",
                       ir_stages=(), cache_binaries=False, compile_in_worker=False, autotune="first")


@hookimpl
def tritonplug_declare_settings() -> Sequence[plugin_kit.Setting]:
    return (TAG,)


@hookimpl
def tritonplug_detect_target(platform: str, device: Any | None, requested: Mapping[str, Any]) -> Target | None:
    if platform != "cpu":
        return None
    RECORD["detect_target"].append(platform)
    return Target(backend=NAME, platform="cpu", arch="host", warp_size=1, triton_backend=None)


@hookimpl
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    options = {k: v for k, v in call_options.items() if v is not None}
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:  # a ValueError/TypeError describes the user's call and reaches them unchanged
        raise ValueError(f"unknown option(s) {unknown} for the example backend; it knows {sorted(OPTION_NAMES)}")
    tag = options.get("example_tag", TAG.get())  # read (and validated) when asked for
    if not isinstance(tag, str):
        raise TypeError(f"backend_options['example_tag'] must be a str, got {tag!r}")
    gpu_like = {k: v for k, v in options.items() if k != "example_tag"}
    checked = interpret.tritonplug_parse_options(target, gpu_like)  # the interpreter's GPU-like checks
    if "example_tag" in options or tag:
        checked = Options.from_mapping({**checked.as_dict(), "example_tag": tag})
    RECORD["parse_options"].append(checked.as_dict())
    return checked


@hookimpl
def tritonplug_compile(job: CompileJob) -> Binary:
    # Runs in a compile worker or in-process; returns plain data only (JSON metadata, bytes images).
    manifest = {"kernel": job.kernel_name, "options": [[k, repr(v)] for k, v in job.options.values]}
    RECORD["compile"].append(job.kernel_name)
    return Binary(job.kernel_name, BINARY_FORMAT, {"manifest": json.dumps(manifest).encode()},
                  {"tag": job.options.get("example_tag", "")})


@hookimpl
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> HostKernel:
    if binary.format != BINARY_FORMAT:
        raise RuntimeError(f"the example backend cannot run a {binary.format!r} binary")
    RECORD["make_kernel"].append((binary.format, launch.kernel_name, launch.grid))
    inner = runner.prepare(launch)  # Triton's interpreter on host buffers, as the interpret backend's fallback

    def run(operands: list, results: list) -> None:
        RECORD["run"].append((launch.kernel_name, binary.metadata.get("tag", "")))
        inner.run(operands, results)

    return HostKernel(launch.kernel_name, run, launch)
