"""The process-wide compile-worker pool the compile service uses, configured from the environment.

:func:`get_pool` makes it on first use (``TRITONPLUG_COMPILE_WORKERS`` workers, 0 compiling
in-process; ``TRITONPLUG_COMPILE_TIMEOUT`` seconds per job); :func:`run_tasks` runs tasks on it.
The pool itself is :class:`tritonplug.worker_pool.WorkerPool`; it and :class:`Task` are
importable from here for callers of this module.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tritonplug.worker_pool import TIMEOUT_ENV, Task, WorkerPool

__all__ = ["SIZE_ENV", "TIMEOUT_ENV", "WORKER_PRELOAD", "Task", "WorkerPool", "get_pool", "pool_size",
           "pool_timeout", "run_tasks", "set_pool", "shutdown_pool"]

SIZE_ENV = "TRITONPLUG_COMPILE_WORKERS"
#: What the process-wide pool's workers import (``module:function`` is also called) before their first job.
WORKER_PRELOAD = ("tritonplug.compiler:prepare_worker",)


def _from_env(name: str, default: float, parse: Callable[[str], float], ok: Callable[[float], bool],
              expected: str) -> Any:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    with contextlib.suppress(ValueError):
        if ok(value := parse(raw)):
            return value
    raise ValueError(f"{name} must be {expected}, got {raw!r}")


def pool_size() -> int:
    """Workers ``get_pool`` starts: ``TRITONPLUG_COMPILE_WORKERS``, default min(CPU count, 8)."""
    return _from_env(SIZE_ENV, min(os.cpu_count() or 1, 8), int, lambda n: n >= 0,
                     "a non-negative integer (0 compiles in-process)")


def pool_timeout() -> float:
    """Seconds one compile job may take: ``TRITONPLUG_COMPILE_TIMEOUT``, default 600."""
    return _from_env(TIMEOUT_ENV, 600.0, float, lambda t: math.isfinite(t) and t > 0,
                     "a positive number of seconds")


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def get_pool() -> WorkerPool:
    """The process-wide pool, created on first use from the environment."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.closed:
            _pool = WorkerPool(pool_size(), pool_timeout(), preload=WORKER_PRELOAD)
        return _pool


def set_pool(pool: WorkerPool | None) -> WorkerPool | None:
    """Make ``pool`` the process-wide pool and return the previous one, which keeps running.

    With ``None``, the next ``get_pool`` makes a pool from the environment. For benchmarks and
    embedders that keep pools of several sizes warm side by side.
    """
    global _pool
    with _pool_lock:
        previous, _pool = _pool, pool
    return previous


def shutdown_pool() -> None:
    """Shut the process-wide pool down; the next ``get_pool`` reads the environment again."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown()


def run_tasks(tasks: Sequence[Task]) -> list[Any]:
    """Run tasks on the process-wide pool (in this process when TRITONPLUG_COMPILE_WORKERS=0)."""
    return get_pool().run(tasks)


def _after_fork_in_child() -> None:
    """A forked child must not share its parent's workers, nor a lock left behind."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
