"""The hooks a tritonplug remote-cache plugin implements (entry-point group ``tritonplug.caches``).

The remote tier sits behind the local disk cache: memory → disk → remote → compile. A remote-cache plugin
(a module, registered under ``tritonplug.caches``) implements the two required hooks below with this module's
``hookimpl`` (and ``tritonplug_declare_settings`` if it reads ``TRITONPLUG_*`` variables of its own). It imports
nothing from the host except this module and :mod:`tritonplug.cache_records`.

The user chooses a store with ``TRITONPLUG_REMOTE_CACHE=<url>``; the host asks the plugin whose
``schemes`` contain the URL's scheme to open it. A plugin that fails to import, does not match these
specs or raises is reported by name (a ``RuntimeWarning`` and ``tritonplug info``), never fatal: the
kernels are then compiled locally.
"""

from __future__ import annotations

from collections.abc import Sequence

import pluggy

from tritonplug.cache_records import RemoteCacheInfo, RemoteStore, Setting

PROJECT_NAME = "tritonplug-cache"
ENTRY_POINT_GROUP = "tritonplug.caches"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def tritonplug_cache_info() -> RemoteCacheInfo:
    """Describe the plugin: its name and the URL schemes it serves (e.g. ``("redis", "rediss")``).

    Called once when the plugin is loaded, before any store is opened. Must not do I/O. Two plugins
    serving one scheme: the first loaded wins and the other is reported.
    """


@hookspec(firstresult=True)
def tritonplug_cache_open(url: str) -> RemoteStore | None:
    """Open the store ``url`` names, or return ``None`` if its scheme is not this plugin's.

    Called once per process, lazily, on the first compile that misses the local disk cache. Parse and
    validate the URL here: a malformed URL or an unknown option raises ``ValueError`` naming it (reported
    as a warning; the process goes on without a remote tier). Do not connect here if connecting can block:
    the host calls ``ping`` when it wants to know whether the store answers. The returned object implements
    :class:`tritonplug.cache_records.RemoteStore`; the host calls it from several threads, so it must be
    thread-safe.
    """


@hookspec(firstresult=True)
def tritonplug_declare_settings() -> Sequence[Setting]:
    """The ``TRITONPLUG_*`` variables this plugin reads, as :class:`~tritonplug.settings.Setting` records (made with
    the constructors :mod:`tritonplug.cache_records` re-exports; ``owner`` the plugin's name or left to the host).
    Optional. Called once when the plugin is loaded, after ``tritonplug_cache_info``; must not read the environment
    or do I/O. The settings are then listed by ``tritonplug info`` and never reported as typos; a value one refuses
    is warned of once the plugins are loaded. A malformed record, a host setting's name or one another loaded plugin
    declares makes the plugin fail to load, reported naming both plugins; an exception raised here likewise.
    """
