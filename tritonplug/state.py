"""Everything tritonplug keeps between calls in this process, owned in one place with one ``reset``.

The plugin host (loaded from entry points on first use), the compile service (its in-memory
binaries and its handle on the disk cache), the kernel-facts cache and the eager call memo live
on one :class:`ProcessState`, ``state``. Modules reach them through it; tests and embedders that
change the environment call ``state.reset()``.
"""

from __future__ import annotations

import threading

from tritonplug.call_memo import CallMemo
from tritonplug.compiler import CompileService
from tritonplug.host import Host
from tritonplug.records import BackendInfo
from tritonplug.triton_compat import KernelFactsCache


class ProcessState:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._host: Host | None = None
        self.compiler = CompileService()
        self.kernels = KernelFactsCache()
        self.memo = CallMemo()

    def host(self) -> Host:
        """The plugin host, loading the entry points on first use."""
        with self._lock:
            if self._host is None:
                host = Host()
                host.load_entry_points()
                self._host = host
            return self._host

    def reset(self, plugins: bool = False) -> None:
        """Forget what was learnt from the environment: compiled binaries in memory, the cache handle,
        memoised calls and kernel facts; with ``plugins``, the loaded plugins too (reloaded on next use)."""
        self.compiler.reset()
        self.kernels.clear()
        self.memo.clear()
        if plugins:
            with self._lock:
                self._host = None


state = ProcessState()


def register_plugin(plugin: object, name: str | None = None) -> BackendInfo:
    """Register a backend plugin object at run time; returns its description."""
    backend = state.host().register(plugin, name=name)
    assert backend is not None
    return backend.info


def backends() -> list[BackendInfo]:
    """The loaded backends and the platforms each serves."""
    return [b.info for b in state.host().backends.values()]


def backend_for(platform: str) -> BackendInfo:
    """The backend that lowers calls for a JAX platform (``PluginError`` naming the fix if none or several)."""
    return state.host().backend_for(platform).info


def compile_stats() -> dict[str, float]:
    """This process's counters: ``compiled``, ``disk_hits``, ``memory_hits``, ``compile_seconds``."""
    return dict(state.compiler.stats)
