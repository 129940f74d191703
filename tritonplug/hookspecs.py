"""The hooks a tritonplug backend implements.

A backend is a plugin object (usually a module) registered under the entry-point group
``tritonplug.backends``. It implements all five hooks below with ``@hookimpl``. The host
calls the hooks of exactly one backend per JAX platform, so each hook is ``firstresult``.
A plugin imports nothing from the host except this module and :mod:`tritonplug.records`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pluggy

from tritonplug.records import BackendInfo, Binary, CompileJob, KernelObject, Launch, Options, Target

PROJECT_NAME = "tritonplug"
ENTRY_POINT_GROUP = "tritonplug.backends"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def tritonplug_backend_info() -> BackendInfo:
    """Describe the backend: its name and the JAX platforms (``"cuda"``, ``"cpu"`` …) it serves.

    Called once when the plugin is loaded. Two backends claiming one platform is an error
    unless the user picks one with ``TRITONPLUG_BACKENDS=platform:name``.
    """


@hookspec(firstresult=True)
def tritonplug_detect_target(
    platform: str, device: Any | None, call_options: Mapping[str, Any]
) -> Target | None:
    """Return the target to compile for on ``platform``, or ``None`` if not served.

    ``device`` is the ``jax.Device`` the computation runs on, or ``None`` when lowering
    for a platform this machine lacks; the backend then falls back to what the user
    asked for (``call_options`` holds the call's options, e.g. ``compute_capability``)
    or its environment variables, and raises ``ValueError`` naming them if neither is set.
    """


@hookspec(firstresult=True)
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    """Validate one configuration's options and return them as a hashable record.

    ``call_options`` holds ``num_warps``, ``num_stages``, ``num_ctas``, ``enable_fp_fusion``,
    ``debug`` and the entries of ``backend_options`` (``None`` where unset). An unknown or
    invalid option raises ``ValueError`` or ``TypeError`` naming it. Called before anything
    is compiled or cached.
    """


@hookspec(firstresult=True)
def tritonplug_compile(job: CompileJob) -> Binary:
    """Compile ``job.ttir`` for ``job.target`` with ``job.options`` into a binary.

    Runs in a compile worker process, possibly with many jobs in parallel: it must not
    touch JAX, and its result must be plain data (it is cached on disk as files + JSON).
    Backends that need no TTIR receive an empty ``job.ttir``.
    """


@hookspec(firstresult=True)
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> KernelObject:
    """Turn a binary and one launch description into what the JAX lowering emits.

    Return a :class:`~tritonplug.records.GpuKernel` for jaxlib's GPU kernel-call runtime
    or a :class:`~tritonplug.records.HostKernel` for a kernel run on host buffers.
    """
