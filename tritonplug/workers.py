"""The pool of compile-worker subprocesses.

A kernel's back end (TTIR → PTX/cubin or HSACO) is 0.3–0.7 s of native code (LLVM, ptxas) that
can crash or hang, so each job runs in a warm worker started from a clean interpreter
(``python -m tritonplug._worker_main``, never a fork of a process that may hold a GPU context).
A worker that dies mid-job is replaced and the job retried once on the fresh worker; a job over
the timeout is killed with the worker's whole process group. ``_worker_main`` describes the wire
protocol. POSIX only.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import logging
import math
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle

from tritonplug.errors import CompileError, WorkerError

log = logging.getLogger("tritonplug.workers")

SIZE_ENV = "TRITONPLUG_COMPILE_WORKERS"
TIMEOUT_ENV = "TRITONPLUG_COMPILE_TIMEOUT"
_HEADER = struct.Struct(">Q")
_MIN_STARTUP_TIMEOUT = 60.0  # importing jax and triton on a busy machine must not fail a short job timeout


@dataclass(frozen=True)
class Task:
    """One call to run in a worker; ``func`` must be importable there (it is pickled by reference)."""

    func: Callable[..., Any]
    args: tuple = ()
    description: str = ""


class _Died(Exception):
    """The worker's stdout reached end of file: it exited or was killed."""


class _TimedOut(Exception):
    """No reply before the deadline."""


class _Worker:
    """One worker process, used by one thread at a time (the pool hands it out)."""

    def __init__(self, proc: subprocess.Popen, log_path: str) -> None:
        self.proc, self.pid, self.log_path, self.ready = proc, proc.pid, log_path, False
        self._lock = threading.Lock()  # orders killpg before reaping: a reaped pid may be reused
        self._poll = select.poll()
        self._poll.register(proc.stdout.fileno(), select.POLLIN)

    def alive(self) -> bool:
        with self._lock:
            return self.proc.poll() is None

    def wait_ready(self, timeout: float) -> None:
        if not self.ready:
            self._receive(time.monotonic() + timeout)  # ("ready", pid, preload failures)
            self.ready = True

    def call(self, payload: bytes, timeout: float, startup_timeout: float) -> tuple:
        self.wait_ready(startup_timeout)
        view = memoryview(_HEADER.pack(len(payload)) + payload)
        try:
            while view:
                view = view[os.write(self.proc.stdin.fileno(), view):]
        except BrokenPipeError:
            raise _Died() from None
        return self._receive(time.monotonic() + timeout)

    def _receive(self, deadline: float) -> Any:
        size = _HEADER.unpack(self._read(_HEADER.size, deadline))[0]
        return cloudpickle.loads(self._read(size, deadline))

    def _read(self, size: int, deadline: float) -> bytes:
        chunks = []
        while size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _TimedOut()
            if self._poll.poll(math.ceil(remaining * 1000)):
                chunk = os.read(self.proc.stdout.fileno(), min(size, 1 << 20))
                if not chunk:
                    raise _Died()
                chunks.append(chunk)
                size -= len(chunk)
        return b"".join(chunks)

    def kill(self) -> str:
        """SIGKILL the worker's process group (ptxas children too), reap it, say how it ended."""
        with self._lock:
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait()
        code = self.proc.returncode
        if code >= 0:
            return f"exited with code {code}"
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"


class WorkerPool:
    """Up to ``size`` warm worker processes shared by every thread; ``size=0`` runs tasks in-process."""

    def __init__(self, size: int, timeout: float = 600.0, preload: Sequence[str] = ("triton",)) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"a worker pool's size must be a non-negative integer, got {size!r}")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"a worker pool's timeout must be a positive number of seconds, got {timeout!r}")
        self.size, self.timeout, self.preload = size, float(timeout), tuple(preload)
        self._startup_timeout = max(self.timeout, _MIN_STARTUP_TIMEOUT)
        self.closed = False
        self._cond = threading.Condition()
        self._workers: dict[_Worker, None] = {}  # live workers, in start order
        self._idle: list[_Worker] = []
        self._slots = 0  # live workers plus those being started; at most size
        self._ids = itertools.count(1)
        self._dir = tempfile.mkdtemp(prefix="tritonplug-workers-") if size else ""
        if size:
            weakref.finalize(self, shutil.rmtree, self._dir, True)

    def warm(self) -> None:
        """Start the missing workers now and wait until each has imported its preload modules."""
        started: list[_Worker] = []
        try:
            while True:
                with self._cond:
                    self._ensure_open()
                    if self._slots >= self.size:
                        break
                    self._slots += 1
                started.append(self._start())
            for worker in started:
                try:
                    worker.wait_ready(self._startup_timeout)
                except (_Died, _TimedOut):
                    fate = worker.kill()
                    raise WorkerError(_compose(f"compile worker pid {worker.pid} {fate} before it was ready",
                                               worker_log=_take_text(worker.log_path))) from None
        finally:
            for worker in started:
                self._release(worker)

    def run(self, tasks: Sequence[Task]) -> list[Any]:
        """Run the tasks on up to ``size`` workers; results in task order.

        Every task runs to its end even when another fails; then the first failure in task order
        is raised: a CompileError, or a WorkerError when a worker died or timed out.
        """
        tasks = list(tasks)
        if self.size == 0:
            return [_run_here(task) for task in tasks]
        results: list[Any] = [None] * len(tasks)
        failures: list[Exception | None] = [None] * len(tasks)
        pending = collections.deque(enumerate(tasks))

        def lane() -> None:
            while pending:
                try:
                    index, task = pending.popleft()
                except IndexError:
                    return
                try:
                    results[index] = self._run_one(task)
                except Exception as exc:
                    failures[index] = exc

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
        for failure in failures:
            if failure is not None:
                raise failure
        return results

    def worker_pids(self) -> list[int]:
        with self._cond:
            return [worker.pid for worker in self._workers]

    def shutdown(self) -> None:
        """Kill every worker (a busy one's thread then reports a WorkerError). Idempotent."""
        with self._cond:
            if self.closed:
                return
            self.closed = True
            workers, idle, self._idle = list(self._workers), self._idle, []
            for worker in idle:
                self._forget(worker)
            self._cond.notify_all()
        for worker in workers:
            worker.kill()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
        log.info("shut down %d compile workers", len(workers))

    def _ensure_open(self) -> None:
        if self.closed:
            raise WorkerError("the compile worker pool has been shut down")

    def _start(self) -> _Worker:
        """Start a worker in a slot the caller holds (freed again if that fails)."""
        log_path = os.path.join(self._dir, f"worker-{next(self._ids)}.log")
        command = [sys.executable, "-m", "tritonplug._worker_main", str(os.getpid()), *self.preload]

        def popen() -> subprocess.Popen:
            with open(log_path, "wb") as log_file:
                return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=log_file, close_fds=True, start_new_session=True,
                                        env=_child_env(), bufsize=0)
        try:
            worker = _Worker(_spawner.submit(popen).result(), log_path)
        except BaseException:
            with self._cond:
                self._slots -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._workers[worker] = None
        log.info("started compile worker pid %d (%d of %d)", worker.pid, len(self._workers), self.size)
        return worker

    def _checkout(self) -> _Worker:
        """An idle live worker, else a new one if there is room, else wait for either."""
        with self._cond:
            while True:
                self._ensure_open()
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        return worker
                    log.warning("compile worker pid %d %s while idle", worker.pid, worker.kill())
                    self._forget(worker)
                if self._slots < self.size:
                    self._slots += 1
                    break
                self._cond.wait()
        return self._start()

    def _release(self, worker: _Worker) -> None:
        with self._cond:
            if not self.closed and worker.alive():
                self._idle.append(worker)
                self._cond.notify()
                return
            worker.kill()
            self._forget(worker)

    def _forget(self, worker: _Worker, free_slot: bool = True) -> None:
        """Drop a killed worker; the caller holds the lock. Idempotent."""
        for pipe in (worker.proc.stdin, worker.proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        with contextlib.suppress(OSError):
            os.remove(worker.log_path)
        if worker in self._workers:
            del self._workers[worker]
            if free_slot:
                self._slots -= 1
                self._cond.notify()

    def _run_one(self, task: Task) -> Any:
        label = task.description or f"task {getattr(task.func, '__qualname__', task.func)!r}"
        worker: _Worker | None = None
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
                old, fate = worker, worker.kill()
                startup_log = "" if old.ready else _take_text(old.log_path)
                stderr = _take_text(stderr_path)
                with self._cond:
                    replace = not self.closed
                    self._forget(old, free_slot=not replace)
                worker = self._start() if replace else None  # the replacement takes over the slot
                if worker is not None:
                    log.warning("replaced compile worker pid %d (%s) by pid %d", old.pid, fate, worker.pid)
                if isinstance(exc, _Died) and not first_death and worker is not None:
                    first_death = f"pid {old.pid} {fate}"
                    log.warning("retrying %s on the fresh worker", label)
                    continue
                if worker is not None:
                    self._release(worker)
                if not isinstance(exc, Exception):
                    raise
                raise self._failure(exc, label, old, fate, first_death, stderr, startup_log) from (
                    None if isinstance(exc, (_Died, _TimedOut)) else exc)
            self._release(worker)
            stderr = _take_text(stderr_path)
            if reply[1] == "ok":
                return reply[2]
            _, _, type_name, message, formatted = reply
            raise CompileError(_compose(f"{label} failed in a compile worker: {type_name}: {message}",
                                        worker_traceback=formatted, stderr=stderr))

    def _failure(self, exc: Exception, label: str, old: _Worker, fate: str, first_death: str, stderr: str,
                 startup_log: str) -> Exception:
        if isinstance(exc, _TimedOut) and startup_log:
            return WorkerError(_compose(f"the compile worker for {label} (pid {old.pid}) did not start "
                                        f"within {self._startup_timeout:g} s and was killed",
                                        worker_log=startup_log))
        if isinstance(exc, _TimedOut):
            log.warning("%s exceeded the timeout of %g s; killed worker pid %d and its process group",
                        label, self.timeout, old.pid)
            return WorkerError(_compose(f"{label} exceeded the compile timeout of {self.timeout:g} s (set "
                                        f"{TIMEOUT_ENV} to change it); worker pid {old.pid} and its process "
                                        f"group were killed", stderr=stderr))
        if isinstance(exc, _Died):
            history = f"{first_death}, then the fresh worker " if first_death else ""
            return WorkerError(_compose(f"the compile worker died while running {label}: {history}"
                                        f"pid {old.pid} {fate}", stderr=stderr, worker_log=startup_log))
        return CompileError(f"{label}: bad reply from compile worker pid {old.pid}: {type(exc).__name__}: "
                            f"{exc}")


def _run_here(task: Task) -> Any:
    try:
        return task.func(*task.args)
    except CompileError:
        raise
    except Exception as exc:
        label = task.description or f"task {getattr(task.func, '__qualname__', task.func)!r}"
        raise CompileError(f"{label} failed: {type(exc).__name__}: {exc}") from exc


def _compose(headline: str, **sections: str) -> str:
    """The headline, then the last lines of each non-empty section (traceback, stderr, ...)."""
    parts = [headline]
    for name, text in sections.items():
        if lines := text.strip().splitlines()[-40:]:
            parts.append(f"{name.replace('_', ' ')} (last lines):\n" + "\n".join("  " + ln for ln in lines))
    return "\n".join(parts)


def _take_text(path: str) -> str:
    """The last 16 KiB of a file, which is then removed; "" when it does not exist."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - 16384))
            text = file.read().decode(errors="replace")
        os.remove(path)
        return text
    except OSError:
        return ""


def _child_env() -> dict[str, str]:
    """The parent's environment, with the directory holding this ``tritonplug`` first on PYTHONPATH."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    return env


def _env_number(name: str, default: float, parse: Callable[[str], float], ok: Callable[[float], bool],
                expected: str) -> Any:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise ValueError(f"{name} must be {expected}, got {raw!r}")
    return value


def pool_size() -> int:
    """Workers ``get_pool`` starts: ``TRITONPLUG_COMPILE_WORKERS``, default min(CPU count, 8)."""
    return _env_number(SIZE_ENV, min(os.cpu_count() or 1, 8), int, lambda n: n >= 0,
                       "a non-negative integer (0 compiles in-process)")


def pool_timeout() -> float:
    """Seconds one compile job may take: ``TRITONPLUG_COMPILE_TIMEOUT``, default 600."""
    return _env_number(TIMEOUT_ENV, 600.0, float, lambda t: math.isfinite(t) and t > 0,
                       "a positive number of seconds")


def _new_spawner() -> ThreadPoolExecutor:
    """One long-lived thread starts every worker.

    Linux sends PR_SET_PDEATHSIG when the *thread* that started the child exits, not the process:
    workers started from a lane of ``run`` or from a user's short-lived thread would die with it.
    (An idle executor thread lives until interpreter exit.)
    """
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="tritonplug-worker-spawner")


_spawner = _new_spawner()
_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def get_pool() -> WorkerPool:
    """The process-wide pool, created on first use from the environment."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.closed:
            _pool = WorkerPool(pool_size(), pool_timeout())
        return _pool


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
    """A forked child must not share its parent's workers, nor a lock or thread that stayed behind."""
    global _pool, _pool_lock, _spawner
    _pool, _pool_lock, _spawner = None, threading.Lock(), _new_spawner()


atexit.register(shutdown_pool)
os.register_at_fork(after_in_child=_after_fork_in_child)
