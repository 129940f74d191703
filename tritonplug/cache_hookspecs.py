"""The hooks a tritonplug remote-cache plugin implements (entry-point group ``tritonplug.caches``).

The remote tier sits behind the local disk cache: memory → disk → remote → compile. A remote-cache plugin
(a module, registered under ``tritonplug.caches``) implements both hooks below with this module's
``hookimpl``. It imports nothing from the host except this module and :mod:`tritonplug.cache_records`.

The user chooses a store with ``TRITONPLUG_REMOTE_CACHE=<url>``; the host asks the plugin whose
``schemes`` contain the URL's scheme to open it. A plugin that fails to import, does not match these
specs or raises is reported by name (a ``RuntimeWarning`` and ``tritonplug info``), never fatal: the
kernels are then compiled locally.
"""

from __future__ import annotations

import pluggy

from tritonplug.cache_records import RemoteCacheInfo, RemoteStore

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
