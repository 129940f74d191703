"""The hooks a tritonplug backend implements.

A backend is a plugin object (usually a module) registered under the entry-point group
``tritonplug.backends``. It implements the six hooks below with ``@hookimpl``: the first five always, the
sixth, ``tritonplug_declare_settings``, if it reads ``TRITONPLUG_*`` variables of its own. The host
calls the hooks of exactly one backend per JAX platform, so each hook is ``firstresult``.
A plugin imports nothing from the host except this module, :mod:`tritonplug.records` and the
JAX-free :mod:`tritonplug.plugin_kit`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pluggy

from tritonplug.records import BackendInfo, Binary, CompileJob, KernelObject, Launch, Options, Target
from tritonplug.settings import Setting

PROJECT_NAME = "tritonplug"
ENTRY_POINT_GROUP = "tritonplug.backends"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def tritonplug_backend_info() -> BackendInfo:
    """Describe the backend: its name, the JAX platforms (``"cuda"``, ``"cpu"``, ``"tpu"`` …) it
    serves, and its capabilities (which IR it compiles, whether its binaries are cached, whether
    it compiles in a worker, how it treats autotune configurations, its specialisation policy).

    Called once when the plugin is loaded; the host validates the record and reports a plugin
    whose record is malformed by name. The host registers JAX lowering rules for every declared
    platform. Two backends claiming one platform is an error unless the user picks one with
    ``TRITONPLUG_BACKENDS=platform:name``.
    """


@hookspec(firstresult=True)
def tritonplug_detect_target(
    platform: str, device: Any | None, requested: Mapping[str, Any]
) -> Target | None:
    """Return the target to compile for on ``platform``, or ``None`` if not served.

    Runs at lowering, once per call. ``device`` is the ``jax.Device`` the computation runs on,
    or ``None`` when lowering for a platform this machine lacks. ``requested`` holds the call's
    target hints (``compute_capability``; ``None`` where unset): a hint the backend understands
    wins over the device, then its own environment variables; with neither a device nor a hint
    it raises ``ValueError`` naming both ways to set one. Hints for other backends are ignored.
    The target's ``max_shared_mem`` (bytes a block may use; ``None``: unknown) makes the host skip the
    configurations whose binary's ``metadata["shared"]`` exceeds it, as Triton's autotuner does.
    """


@hookspec(firstresult=True)
def tritonplug_parse_options(target: Target, call_options: Mapping[str, Any]) -> Options:
    """Validate one configuration's options and return them as a hashable record.

    Runs at lowering, once per configuration, before anything is compiled or cached.
    ``call_options`` holds ``num_warps``, ``num_stages``, ``num_ctas``, ``enable_fp_fusion``,
    ``debug`` and the entries of ``backend_options`` (``None`` where unset). An unknown or
    invalid option raises ``ValueError`` or ``TypeError`` naming it.
    """


@hookspec(firstresult=True)
def tritonplug_compile(job: CompileJob) -> Binary:
    """Compile ``job.ir`` (at stage ``job.ir_stage``) for ``job.target`` with ``job.options``.

    Runs only on a cache miss: in a compile worker process when the backend declares
    ``compile_in_worker`` (possibly many jobs in parallel), else in the calling process. It must
    not touch JAX, and its result must be plain data (it is cached as images + JSON). Any
    exception becomes a ``CompileError`` naming the configuration. Backends that declare no
    ``ir_stages`` receive ``job.ir == ""``.
    """


@hookspec(firstresult=True)
def tritonplug_make_kernel(target: Target, binary: Binary, launch: Launch) -> KernelObject:
    """Turn a binary and one launch description into what the JAX lowering emits.

    Runs in the lowering process (never in a compile worker), once per configuration the lowering
    keeps (every surviving ``triton.autotune`` config with ``autotune="runtime"``, the first with
    ``"first"``, the one a tuning record names; each only if its binary fits the target's
    ``max_shared_mem``), after the binary came from memory, a cache or the compile hook. Return a
    :class:`~tritonplug.records.GpuKernel` for jaxlib's GPU kernel-call runtime (the host writes its
    proto), a :class:`~tritonplug.records.JaxKernel` (a function of JAX arrays the host inlines into
    the program, so XLA compiles it) or a
    :class:`~tritonplug.records.HostKernel` (a function the host runs on host buffers, through an
    XLA FFI call on the CPU). Only ``GpuKernel`` objects may be several for one call (jaxlib's
    runtime times them): a backend returning another kind declares ``autotune="first"``, or a call
    with several configurations is refused at lowering. ``ValueError``/``TypeError``/
    ``NotImplementedError`` describe the user's call and reach the user as they are; any other
    exception, or a result of another type, is a ``PluginError`` naming the backend and the hook.
    """


@hookspec(firstresult=True)
def tritonplug_declare_settings() -> Sequence[Setting]:
    """The ``TRITONPLUG_*`` variables this backend reads, as :class:`~tritonplug.settings.Setting` records (made
    with :mod:`tritonplug.plugin_kit`'s ``boolean``, ``choice``, ``integer``, ``seconds`` or ``Setting`` itself;
    ``owner`` the backend's name or left to the host). Optional: a backend that reads none leaves it out.

    Called once when the plugin is loaded, right after ``tritonplug_backend_info``; must not read the
    environment. The host then lists the settings in ``tritonplug info`` and ``tritonplug settings``, leaves them
    out of the undeclared (typo) variables, and warns once, at first use, of a value one of them refuses; the
    plugin reads each with ``setting.get()``. A record that is not a ``Setting``, a name outside
    ``TRITONPLUG_[A-Z0-9_]+``, a host setting's name, or a name another loaded plugin declares makes the plugin
    fail to load, reported (naming both plugins) like any broken plugin; an exception raised here likewise.
    """
