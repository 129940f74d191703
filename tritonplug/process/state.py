"""Everything tritonplug keeps between calls in this process, owned in one place with one ``reset``.

The plugin host (loaded from entry points on first use), the compile service (its in-memory
binaries and its handle on the disk cache), the compile-worker pool, the kernel-facts cache and the
eager call memo live on one :class:`ProcessState`, ``state``. Modules reach them through it; tests
and embedders that change the environment call ``state.reset()``.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Hashable, Sequence
from typing import Any

from tritonplug.adapters.triton_compat import KernelFactsCache
from tritonplug.compile.backends import Host
from tritonplug.compile.compiler import CompileService
from tritonplug.compile.worker_pool import Task, WorkerPool
from tritonplug.compile.workers import pool_from_env, pool_size, pool_timeout
from tritonplug.process import setting_checks
from tritonplug.records import BackendInfo
from tritonplug.tuning.store import TuningStore

_MEMO_LIMIT = 4096


class BoundedMemo:
    """A dict bounded by clearing it when full, for what repeats in few forms: lowering plans made ahead by early
    compiles, and (:class:`CallMemo`) memoised call specs. Plain data here, so compile workers import this module
    without JAX."""

    def __init__(self) -> None:
        self.entries: dict[Hashable, Any] = {}

    def lookup(self, key: Hashable | None) -> Any:
        return None if key is None else self.entries.get(key)

    def take(self, key: Hashable | None) -> Any:
        """The entry, removed: what serves one use only (an early compile's plan serves one lowering)."""
        return None if key is None else self.entries.pop(key, None)

    def store(self, key: Hashable | None, entry: Any) -> None:
        if key is None:
            return
        if len(self.entries) >= _MEMO_LIMIT:
            self.clear()
        self.entries[key] = entry

    def clear(self) -> None:
        self.entries.clear()


class CallMemo(BoundedMemo):
    """The eager calls' memo: call specs (``eager.memo.Entry`` by the call's keys, ``eager.keys``), and the recent
    calls of each kernel with their runners (``eager.runners``), forgotten with them."""

    def __init__(self) -> None:
        super().__init__()
        #: the recent eager calls of each kernel and its runner (``eager.runners.KernelRepeats`` by the kernel's
        #: id), what an eager call looks up first
        self.recent: dict[int, Any] = {}

    def clear(self) -> None:
        super().clear()
        self.clear_repeats()

    def clear_repeats(self) -> None:
        """Forget the recent calls and their runners (cleared in place, never replaced: ``api`` holds ``recent``)."""
        self.recent.clear()


class ProcessState:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._host: Host | None = None
        self._pool: WorkerPool | None = None
        self._pool_from_env = False
        self.compiler = CompileService(self.run_tasks, lambda: self.pool().size)
        self.kernels = KernelFactsCache()
        self.memo = CallMemo()
        #: ``lowering.LoweringPlan``s that early compiles made, by (call, backend, target, operands): the
        #: lowering of the same call takes its plan instead of planning again.
        self.plans = BoundedMemo()
        self.tuning = TuningStore()
        #: the latest partitioning decisions of partitioned launchers (``tritonplug.inspection.partitions``)
        self.partitions: collections.deque[Any] = collections.deque(maxlen=256)
        #: the latest lowerings' paths, launched or inlined, and why (``tritonplug.inspection.paths``)
        self.paths: collections.deque[Any] = collections.deque(maxlen=256)

    def host(self) -> Host:
        """The plugin host, loading the entry points on first use."""
        with self._lock:
            if self._host is None:
                host = Host()
                host.load_entry_points()
                self._host = host
                setting_checks.warn_about_settings(host.backends)
            return self._host

    def pool(self) -> WorkerPool:
        """The compile-worker pool, made from the environment on first use, after a shutdown, and when
        the environment asks for another size or timeout (a pool installed by ``set_pool`` is kept)."""
        stale = None
        with self._lock:
            pool = self._pool
            if pool is not None and self._pool_from_env and not pool.closed \
                    and (pool.size, pool.timeout) != (pool_size(), pool_timeout()):
                stale, pool = pool, None
            if pool is None or pool.closed:
                pool, self._pool_from_env = pool_from_env(), True
                self._pool = pool
        if stale is not None:
            stale.shutdown()
        return pool

    def run_tasks(self, tasks: Sequence[Task]) -> list[Any]:
        return self.pool().run(tasks)

    def set_pool(self, pool: WorkerPool | None) -> WorkerPool | None:
        """Make ``pool`` the process's pool and return the previous one, which keeps running.

        With ``None``, the next use makes a pool from the environment. For benchmarks and embedders
        that keep pools of several sizes warm side by side.
        """
        with self._lock:
            previous, self._pool, self._pool_from_env = self._pool, pool, False
        return previous

    def shutdown_pool(self) -> None:
        """Shut the pool down; the next use reads the environment again."""
        pool = self.set_pool(None)
        if pool is not None:
            pool.shutdown()

    def reset(self, plugins: bool = False) -> None:
        """Forget what was learnt from the environment, as a new process would: compiled binaries in
        memory, the cache handle, memoised calls and kernel facts; with ``plugins``, the loaded plugins
        too (reloaded on next use). Warm workers stay: they hold nothing but their imports, and the
        pool follows the environment by itself."""
        self.compiler.reset()
        self.tuning.reset()
        self.kernels.clear()
        self.memo.clear()
        self.plans.clear()
        self.partitions.clear()
        self.paths.clear()
        if plugins:
            with self._lock:
                self._host = None

    def _after_fork_in_child(self) -> None:
        """A forked child must not share its parent's workers, nor a lock left behind."""
        self._lock = threading.Lock()
        self._pool = None


state = ProcessState()
os.register_at_fork(after_in_child=state._after_fork_in_child)


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
    """This process's counters: ``compiled``, ``disk_hits``, ``memory_hits``, ``compile_seconds``,
    ``runtime_autotuned`` (calls lowered with several configurations, which jaxlib times on the device at
    their first execution), ``tuned_hits`` (autotuned calls lowered with their recorded configuration), and
    the remote tier's ``remote_hits``, ``remote_waits``, ``remote_published``, ``remote_errors``."""
    return {**state.compiler.stats, **state.tuning.stats, **state.compiler.remote.counters()}
