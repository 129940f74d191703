"""How the compile-worker pool is configured from the environment.

``TRITONPLUG_COMPILE_WORKERS`` workers (0 compiles in-process), ``TRITONPLUG_COMPILE_TIMEOUT``
seconds per job. The process-wide pool is owned by :mod:`tritonplug.process.state`; the pool itself is
:class:`tritonplug.compile.worker_pool.WorkerPool`, and it and :class:`Task` are importable from here.
"""

from __future__ import annotations

import os

from tritonplug import settings
from tritonplug.calls import user_warnings
from tritonplug.compile.worker_pool import TIMEOUT_ENV, Task, WorkerPool

__all__ = ["SIZE_ENV", "TIMEOUT_ENV", "WORKER_PRELOAD", "Task", "WorkerPool", "pool_from_env", "pool_size",
           "pool_timeout"]

SIZE_ENV = settings.COMPILE_WORKERS.name
#: What the process-wide pool's workers import (``module:function`` is also called) before their first job.
WORKER_PRELOAD = ("tritonplug.process.worker_jobs:prepare_worker",)


def pool_size() -> int:
    """Workers ``get_pool`` starts: ``TRITONPLUG_COMPILE_WORKERS``, default min(CPU count, 8)."""
    return settings.COMPILE_WORKERS.get()


def pool_timeout() -> float:
    """Seconds one compile job may take: ``TRITONPLUG_COMPILE_TIMEOUT``, default 600."""
    return settings.COMPILE_TIMEOUT.get()


def pool_from_env() -> WorkerPool:
    """A pool configured from the environment, its workers preloading the backend plugins. A size above the
    CPU count is a warning: compiles are CPU-bound, so the extra workers only cost memory (about 1 GB each)."""
    size, cpus = pool_size(), os.cpu_count() or 1
    if size > cpus:
        user_warnings.warn(f"tritonplug: {SIZE_ENV}={size} is more than the {cpus} CPU cores of this machine: "
                           f"compiles are CPU-bound, so more workers than cores only cost memory (about 1 GB "
                           f"each); at most one worker per compile job is started", RuntimeWarning)
    return WorkerPool(size, pool_timeout(), preload=WORKER_PRELOAD)
