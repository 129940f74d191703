"""A pool of compile-worker subprocesses, and the tasks it runs.

A kernel's back end (TTIR → PTX/cubin or HSACO) is 0.3–0.7 s of native code (LLVM, ptxas) that
can crash or hang, so each job runs in a warm worker started from a clean interpreter
(``python -m tritonplug.compile.worker_main``, never a fork of a process that may hold a GPU context).
A worker that dies mid-job is replaced and the job retried once on the fresh worker; a job over
the timeout is killed with the worker's whole process group. ``_worker_main`` describes the wire
protocol, :mod:`tritonplug.compile.worker_process` the handle on one worker. POSIX only.

Every pool made in this process is shut down at exit; :mod:`tritonplug.compile.workers` holds the one
the compile service uses.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import logging
import math
import os
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle

from tritonplug import settings
from tritonplug.compile import fd_capture, ir_rules
from tritonplug.compile.worker_main import resolve
from tritonplug.compile.worker_process import Died, TimedOut, WorkerProcess, start_worker, take_text
from tritonplug.errors import CompileError, WorkerError

log = logging.getLogger("tritonplug.compile.workers")

TIMEOUT_ENV = settings.COMPILE_TIMEOUT.name  # sets the process-wide pool's timeout; a timed-out task's error names it
_MIN_STARTUP_TIMEOUT = 60.0  # importing jax and triton on a busy machine must not fail a short job timeout


@dataclass(frozen=True)
class Task:
    """One call to run in a worker: ``func`` is a function importable there (pickled by reference) or
    its ``"module:function"`` name, which spares the caller importing it."""

    func: Callable[..., Any] | str
    args: tuple = ()
    description: str = ""


class WorkerPool:
    """Up to ``size`` warm worker processes shared by every thread; ``size=0`` runs tasks in-process.

    The pool has ``size`` slots, each empty or holding one worker. ``run`` first starts a worker in
    every empty slot (they import in the background, so the pool is warm after its first use), then
    drives up to ``size`` tasks at a time from threads of its own; each takes a free slot for one
    task, so the tasks of concurrent ``run`` calls queue for free workers.
    """

    def __init__(self, size: int, timeout: float = 600.0, preload: Sequence[str] = ("triton",)) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"a worker pool's size must be a non-negative integer, got {size!r}")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"a worker pool's timeout must be a positive number of seconds, got {timeout!r}")
        self.size, self.timeout, self.preload = size, float(timeout), tuple(preload)
        self.closed = False
        self._startup_timeout = max(self.timeout, _MIN_STARTUP_TIMEOUT)
        self._cond = threading.Condition()
        self._free: list[WorkerProcess | None] = [None] * size  # free slots; the last one is handed out first
        self._workers: dict[WorkerProcess, None] = {}  # live workers, in start order
        self._ids = itertools.count(1)
        self._dir = tempfile.mkdtemp(prefix="tritonplug-workers-") if size else ""
        if size:  # a pool dropped unclosed still ends its workers (no "subprocess is still running")
            weakref.finalize(self, _release, self._workers, self._dir, os.getpid())
            _pools.add(self)

    def warm(self) -> None:
        """Start the missing workers now and wait until each idle one has imported its preload modules."""
        with self._cond:
            self._ensure_open()
            started: list[WorkerProcess | None] = [w for w in self._free if w is None or not w.ready]
            self._free = [w for w in self._free if w is not None and w.ready]
        try:
            for i, worker in enumerate(started):
                started[i] = worker or self._start()
            for worker in filter(None, started):
                try:
                    worker.wait_ready(self._startup_timeout)
                except (Died, TimedOut):
                    fate = worker.kill()
                    raise WorkerError(_compose(f"compile worker pid {worker.pid} {fate} before it was ready",
                                               worker_log=take_text(worker.log_path))) from None
        finally:
            for worker in started:
                self._put_back(worker)

    def start(self) -> None:
        """Start a worker in every empty slot, without waiting: they import in the background, so the
        first compile finds them ready (or nearly). Does nothing for a pool of size 0."""
        self._ensure_open()
        if self.size:
            self._fill()

    def run(self, tasks: Sequence[Task], return_exceptions: bool = False) -> list[Any]:
        """Run the tasks on up to ``size`` workers; results in task order.

        Every task runs to its end even when another fails; then the first failure in task order
        is raised: a CompileError, or a WorkerError when a worker died or timed out. With
        ``return_exceptions`` a failure takes its task's place in the results instead, so the
        caller keeps what finished.
        """
        tasks = list(tasks)
        if self.size == 0:
            return [_run_here(task, return_exceptions) for task in tasks]
        self._ensure_open()
        if tasks:
            self._fill(len(tasks))  # never more workers than this run's tasks: a worker costs ~1 GB
        results: list[Any] = [None] * len(tasks)
        failures: list[Exception | None] = [None] * len(tasks)
        pending = collections.deque(enumerate(tasks))

        def lane() -> None:
            while True:
                try:
                    index, task = pending.popleft()
                except IndexError:
                    return
                try:
                    results[index] = self._run_one(task)
                except Exception as exc:
                    failures[index] = exc

        # Daemon threads: a task hung until its timeout must not hold up interpreter exit.
        helpers = [threading.Thread(target=lane, name="tritonplug-compile-lane", daemon=True)
                   for _ in range(min(self.size, len(tasks)) - 1)]
        for thread in helpers:
            thread.start()
        try:
            lane()
        except BaseException:  # KeyboardInterrupt: the helpers finish their current task, nothing more
            pending.clear()
            raise
        for thread in helpers:
            thread.join()
        for index, failure in enumerate(failures):
            if failure is not None and not return_exceptions:
                raise failure
            if failure is not None:
                results[index] = failure
        return results

    def worker_pids(self) -> list[int]:
        with self._cond:
            return [worker.pid for worker in self._workers]

    def busy_worker_pids(self) -> list[int]:
        """The workers running a task right now (it has been sent, its reply has not come)."""
        with self._cond:
            return [worker.pid for worker in self._workers if worker.busy]

    def shutdown(self) -> None:
        """Kill every worker (a busy one's task then fails with a WorkerError). Idempotent."""
        if count := self._close():
            log.info("shut down %d compile workers", count)

    def _close(self) -> int:
        """``shutdown`` without logging, for interpreter exit (log streams may be closed by then)."""
        with self._cond:
            if self.closed:
                return 0
            idle = [worker for worker in self._free if worker is not None]
            busy = [worker for worker in self._workers if worker not in idle]
            self.closed, self._free = True, []
            self._cond.notify_all()
        for worker in busy:  # only kill: the thread using it reads its pipe, and cleans up
            worker.kill()
        for worker in idle:
            self._drop(worker)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
        return len(idle) + len(busy)

    def _fill(self, limit: int | None = None) -> None:
        """Start a worker in every empty free slot (until ``limit`` workers live), without waiting for it to be
        ready: a fork and exec, the imports then run while this run's first tasks wait. A worker that cannot
        start leaves its slot empty: the task that takes the slot retries the start and reports the failure."""
        with self._cond:
            empty = self._free.count(None)
            if limit is not None:
                empty = min(empty, max(0, limit - len(self._workers)))
            if not empty or self.closed:
                return
            kept = [worker for worker in self._free if worker is not None]
            self._free = [None] * (len(self._free) - len(kept) - empty) + kept  # slots left empty start on demand
        for _ in range(empty):
            worker = None
            try:
                worker = self._start()
            except Exception as exc:
                if _shutting_down(exc) or self.closed:  # Ctrl-C or exit mid-compile: nothing to start, or to report
                    with self._cond:
                        self._free.insert(0, None)
                    continue
                log.warning("could not start a compile worker: %s", exc)
            with self._cond:  # behind the ready workers (handed out first), ahead of the empty slots
                if not self.closed:
                    ahead = next((i for i, w in enumerate(self._free) if w is not None), len(self._free))
                    self._free.insert(ahead if worker is not None else 0, worker)
                    self._cond.notify()
            if self.closed and worker is not None:
                self._drop(worker)

    def _ensure_open(self) -> None:
        if self.closed:
            raise WorkerError("the compile worker pool has been shut down")

    def _start(self) -> WorkerProcess:
        worker = start_worker(os.path.join(self._dir, f"worker-{next(self._ids)}.log"), self.preload)
        with self._cond:
            self._workers[worker] = None
        log.info("started compile worker pid %d (%d of %d)", worker.pid, len(self._workers), self.size)
        return worker

    def _drop(self, worker: WorkerProcess) -> str:
        """Kill a worker and forget it; returns how it ended."""
        fate = worker.kill()
        for pipe in (worker.stdin, worker.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        with contextlib.suppress(OSError):
            os.remove(worker.log_path)
        with self._cond:
            self._workers.pop(worker, None)
        return fate

    def _checkout(self) -> WorkerProcess:
        """Take a free slot (waiting for one) and return its live worker, started if need be."""
        with self._cond:
            while True:
                self._ensure_open()
                if self._free:
                    break
                self._cond.wait()
            worker = self._free.pop()
        if worker is not None and worker.alive():
            return worker
        if worker is not None:
            log.warning("compile worker pid %d %s while idle", worker.pid, self._drop(worker))
        try:
            return self._start()
        except BaseException:
            self._put_back(None)
            raise

    def _put_back(self, worker: WorkerProcess | None) -> None:
        """Free a slot; a dead worker, or any worker once the pool is shut down, is dropped."""
        alive = worker is not None and worker.alive()
        with self._cond:
            if not self.closed:
                if alive:
                    self._free.append(worker)
                else:
                    self._free.insert(0, None)  # live workers are handed out first
                self._cond.notify()
        if worker is not None and (self.closed or not alive):
            self._drop(worker)

    def _run_one(self, task: Task) -> Any:
        label = _label(task)
        worker: WorkerProcess | None = None
        first_death = ""
        while True:
            stderr_path = os.path.join(self._dir, f"job-{next(self._ids)}.stderr")
            try:
                payload = cloudpickle.dumps((id(task), task.func, task.args, stderr_path))
            except Exception as exc:
                raise CompileError(f"{label}: cannot send the task to a compile worker: {exc}") from exc
            worker = worker or self._checkout()
            try:
                reply = worker.call(payload, self.timeout, self._startup_timeout)
            except BaseException as exc:
                old, startup_log = worker, "" if worker.ready else take_text(worker.log_path)
                fate, stderr = self._drop(old), take_text(stderr_path)
                if isinstance(exc, TimedOut):
                    log.warning("%s timed out; killed worker pid %d and its process group", label, old.pid)
                worker = None
                if not self.closed:  # replace the worker in the slot this thread holds
                    try:
                        worker = self._start()
                    except BaseException:
                        self._put_back(None)
                        raise
                    log.warning("replaced compile worker pid %d (%s) by pid %d", old.pid, fate, worker.pid)
                stuck = isinstance(exc, TimedOut) and not old.ready  # stopped or stuck while it imported
                if (isinstance(exc, Died) or stuck) and not first_death and worker is not None:
                    first_death = f"pid {old.pid} {'did not start' if stuck else fate}"
                    log.warning("retrying %s on the fresh worker", label)
                    continue
                self._put_back(worker)
                if not isinstance(exc, Exception):
                    raise
                failure = self._failure(exc, label, old, fate, first_death, stderr, startup_log)
                raise failure from (None if isinstance(failure, WorkerError) else exc)
            self._put_back(worker)
            stderr = take_text(stderr_path)
            if reply[1] == "ok":
                return reply[2]
            _, _, type_name, message, formatted = reply
            where = ir_rules.first_diagnostic(stderr)  # the kernel's line, from the compiler's MLIR diagnostics
            raise CompileError(_compose(f"{label} failed in a compile worker{where}" + ("\n" if where else ": ")
                                        + f"{type_name}: {message}",
                                        worker_traceback=formatted, stderr=stderr))

    def _failure(self, exc: Exception, label: str, old: WorkerProcess, fate: str, first_death: str, stderr: str,
                 startup_log: str) -> Exception:
        if isinstance(exc, TimedOut) and not old.ready:
            earlier = f"{first_death}, then " if first_death else ""
            message = f"compile worker for {label}: {earlier}pid {old.pid} did not start in {self._startup_timeout:g} s"
        elif isinstance(exc, TimedOut):
            message = (f"{label} exceeded the compile timeout of {self.timeout:g} s (set {TIMEOUT_ENV} to "
                       f"change it); worker pid {old.pid} and its process group were killed")
        elif isinstance(exc, Died):
            history = f"{first_death}, then the fresh worker " if first_death else ""
            message = f"the compile worker died while running {label}: {history}pid {old.pid} {fate}"
        else:
            return CompileError(f"{label}: bad reply from compile worker pid {old.pid}: {exc!r}")
        return WorkerError(_compose(message, stderr=stderr, worker_log=startup_log))


def _run_here(task: Task, return_exceptions: bool = False) -> Any:
    """A task in this process (size 0); a failure leads with the compiler's first MLIR diagnostic."""
    try:
        with fd_capture.Captured() as output:
            try:
                return resolve(task.func)(*task.args)
            except Exception:
                output.drop()
                failure = sys.exc_info()[1]
        where = ir_rules.first_diagnostic(output.stderr)
        if isinstance(failure, CompileError) and not where:
            raise failure
        headline = f"{_label(task)} failed{where}" + ("\n" if where else ": ")
        raise CompileError(f"{headline}{type(failure).__name__}: {failure}") from failure
    except CompileError as failure:
        if return_exceptions:
            return failure
        raise


def _shutting_down(exc: BaseException) -> bool:
    """``exc`` says only that the interpreter exits (``cannot schedule new futures``, after a Ctrl-C)."""
    return sys.is_finalizing() or (isinstance(exc, RuntimeError) and "interpreter shutdown" in str(exc))


def _label(task: Task) -> str:
    return task.description or f"task {getattr(task.func, '__qualname__', task.func)!r}"


def _compose(headline: str, **sections: str) -> str:
    """The headline, then the last lines of each non-empty section (traceback, stderr, ...)."""
    parts = [headline]
    for name, text in sections.items():
        if lines := text.strip().splitlines()[-40:]:
            parts.append(f"{name.replace('_', ' ')} (last lines):\n" + "\n".join("  " + ln for ln in lines))
    return "\n".join(parts)


def _release(workers: dict[WorkerProcess, None], path: str, owner: int) -> None:
    """A pool's finalizer: kill the workers it still has, close their pipes, remove its directory."""
    if os.getpid() != owner:  # not in a forked child, which inherits the finalizer
        return
    for worker in list(workers):
        worker.kill()
        if not worker.busy:  # a busy worker's pipes belong to the thread reading them (at exit)
            for pipe in (worker.stdin, worker.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
    shutil.rmtree(path, ignore_errors=True)


def _close_all() -> None:
    for pool in list(_pools):
        pool._close()


def _after_fork_in_child() -> None:
    """A forked child must not shut its parent's pools down at exit."""
    global _pools
    _pools = weakref.WeakSet()


_pools: weakref.WeakSet[WorkerPool] = weakref.WeakSet()  # shut down at exit: kills busy workers' children
atexit.register(_close_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
