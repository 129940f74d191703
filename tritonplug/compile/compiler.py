"""Per configuration: memory → disk cache → compile workers → binary, with single-flight.

A key is compiled at most once per machine at a time: threads of this process wait on an
in-memory future, other processes on the cache's per-key file lock, and both then read
the binary the first compiler published.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tritonplug.cache import disk as disk_cache
from tritonplug.cache import signing
from tritonplug.cache.remote import RemoteCaches
from tritonplug.compile import fd_capture, ir_rules
from tritonplug.compile.backends import USER_ERRORS, Backend
from tritonplug.compile.worker_pool import Task
from tritonplug.errors import CompileError, KernelSourceError
from tritonplug.records import Binary, CompileJob, Target

log = logging.getLogger("tritonplug.compile.compiler")

#: Errors that say the call itself is wrong (raised by the front end, before any back end ran): the kernel's
#: source, or the errors a hook raises about the user's call.
CALL_ERRORS = (KernelSourceError, *USER_ERRORS)

#: The worker-side entry point of a compile job (see ``process/worker_jobs.py``), referenced by name so
#: this module does not import the process state the worker uses.
WORKER_COMPILE = "tritonplug.process.worker_jobs:compile_in_worker"


@dataclass(frozen=True)
class CompileRequest:
    """One configuration to compile; ``make_job`` runs the front end, only on a miss."""

    key: str
    make_job: Callable[[], CompileJob]
    description: str


class CompileService:
    """Compiles requests through memory → disk cache → remote tier → ``run_tasks`` (the process's worker pool)."""

    def __init__(self, run_tasks: Callable[..., list[Any]], lanes: Callable[[], int] = lambda: 0) -> None:
        """``run_tasks(tasks)`` runs compile tasks on the process's worker pool, ``lanes()`` of them at once
        (0: in this process, one at a time)."""
        self._run_tasks = run_tasks
        self._lanes = lanes  # how many tasks run_tasks runs at once (0: in this process, one at a time)
        self._memory: dict[str, Binary] = {}
        self._inflight: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._cache: Any = None
        self._cache_ready = False
        self.stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0, "compile_seconds": 0.0, "runtime_autotuned": 0}
        self.remote = RemoteCaches()  # the tier behind the disk cache (cache/remote.py, cache/remote_tier.py)

    @property
    def cache(self) -> disk_cache.DiskCache | None:
        with self._lock:
            if not self._cache_ready:
                self._cache = disk_cache.cache_from_env()
                self._cache_ready = True
            return self._cache

    def reset(self) -> None:
        """Forget the in-memory layer and the cache handle (tests change the environment)."""
        with self._lock:
            self._memory.clear()
            self._cache_ready = False
            self._cache = None
        self.remote.reset()

    def note_runtime_autotuned(self) -> None:
        """A call was lowered with several configurations: jaxlib will time them on the device."""
        with self._lock:
            self.stats["runtime_autotuned"] += 1

    def compile(self, backend: Backend, target: Target, requests: Sequence[CompileRequest]) -> list[Binary]:
        found: dict[str, Binary] = {}
        waits: dict[str, Future] = {}
        mine: list[CompileRequest] = []
        with self._lock:
            for r in requests:
                if r.key in found or r.key in waits or any(m.key == r.key for m in mine):
                    continue
                if r.key in self._memory:
                    found[r.key] = self._memory[r.key]
                    self.stats["memory_hits"] += 1
                    log.info("memory cache hit for %s (key %s)", r.description, r.key[:12])
                elif r.key in self._inflight:
                    waits[r.key] = self._inflight[r.key]
                else:
                    self._inflight[r.key] = Future()
                    mine.append(r)
        try:
            if mine:
                found.update(self._resolve(backend, target, mine))
        except BaseException as exc:
            partial = isinstance(exc, _PartialFailure)
            kept, error = (exc.found, exc.error) if isinstance(exc, _PartialFailure) else ({}, exc)
            with self._lock:
                for r in mine:
                    if r.key in kept:  # the configurations that finished stay compiled
                        self._memory[r.key] = kept[r.key]
                        self._inflight.pop(r.key).set_result(kept[r.key])
                    else:
                        self._inflight.pop(r.key).set_exception(error)
            if partial:
                raise error from error.__cause__
            raise
        with self._lock:
            for r in mine:
                self._memory[r.key] = found[r.key]
                self._inflight.pop(r.key).set_result(found[r.key])
        for key, future in waits.items():
            found[key] = future.result()
        return [found[r.key] for r in requests]

    def _resolve(self, backend: Backend, target: Target, requests: list[CompileRequest]) -> dict[str, Binary]:
        if backend.info.cache_binaries:
            signing.fleet_keys()  # a bad TRITONPLUG_FLEET_KEY is the call's error, before anything is read or compiled
        cache = self.cache if backend.info.cache_binaries else None
        found = self._from_disk(cache, requests)
        missing = [r for r in requests if r.key not in found]
        if not missing:
            return found
        with contextlib.ExitStack() as locks:
            if cache is not None:
                for key in sorted({r.key for r in missing}):
                    locks.enter_context(cache.key_lock(key))
                found.update(self._from_disk(cache, missing))  # another process may have finished meanwhile
                missing = [r for r in missing if r.key not in found]
            remote = self.remote.current() if missing and backend.info.cache_binaries else None
            if remote is not None:  # remote → claim → compile here or wait for the host that claimed it
                found.update(remote.resolve(missing, lambda rs: self._compile(backend, target, rs, cache), cache))
            elif missing:
                found.update(self._compile(backend, target, missing, cache))
        return found

    def _compile(self, backend: Backend, target: Target, missing: list[CompileRequest],
                 cache: Any) -> dict[str, Binary]:
        """Compile ``missing``; the configurations that finish are cached even when another one fails or
        times out, and a failure then raises ``_PartialFailure`` carrying them (``compile`` keeps them).
        A configuration the front end refuses makes the whole call wrong: then nothing is kept."""
        found: dict[str, Binary] = {}
        start = time.perf_counter()
        outcomes = self._run(backend, target, missing)
        elapsed = time.perf_counter() - start
        call_error = next((e for e in outcomes if isinstance(e, CALL_ERRORS)), None)
        if call_error is not None:  # the call is wrong (a front end refused it): nothing of it is cached
            raise call_error
        done = [(r, b) for r, b in zip(missing, outcomes, strict=True) if isinstance(b, Binary)]
        with self._lock:
            self.stats["compiled"] += len(done)
            self.stats["compile_seconds"] += elapsed
        for r, binary in done:
            log.info("compiled %s for %s (key %s)", r.description, target.describe(), r.key[:12])
            if cache is not None and cache.put(r.key, binary):
                log.info("cached %s in %s", r.description, cache.directory)
            found[r.key] = binary
        log.info("compiled %d configuration(s) in %.3f s", len(done), elapsed)
        failures = [e for e in outcomes if not isinstance(e, Binary)]
        if failures:
            if done:
                failures[0].add_note(f"tritonplug: the other {len(done)} configuration(s) of this call "
                                     f"compiled and are kept (in memory and in the cache)")
            raise _PartialFailure(found, failures[0])
        return found

    def _from_disk(self, cache: Any, requests: list[CompileRequest]) -> dict[str, Binary]:
        """The disk's entries for ``requests``; each hit is offered to the remote tier, which publishes it in the
        background where the store lacks it (so peers need not compile what this process had on disk)."""
        found: dict[str, Binary] = {}
        if cache is None:
            return found
        remote = None
        for r in requests:
            entry = cache.get_entry(r.key)
            if entry is not None:
                log.info("disk cache hit for %s (key %s)", r.description, r.key[:12])
                found[r.key] = entry[0]
                with self._lock:
                    self.stats["disk_hits"] += 1
                remote = remote or self.remote.current()
                if remote is not None:
                    remote.offer(r.key, entry[1])
        return found

    def _run(self, backend: Backend, target: Target, requests: list[CompileRequest]) -> list[Binary | Exception]:
        """Each request's binary, or the exception its compile raised. With compile workers, each
        configuration goes to a worker as soon as its front end has run, so front ends (serialised by the
        lowering's front-end lock) overlap the back ends already running."""
        if not backend.compiles_in_worker:
            return [_settled(functools.partial(_compile_request_here, backend, r)) for r in requests]

        def one(r: CompileRequest) -> Binary:
            return self._run_tasks([Task(WORKER_COMPILE, (r.make_job(),), r.description)])[0]

        lanes = self._lanes()
        if lanes == 0 or len(requests) == 1:
            return [_settled(functools.partial(one, r)) for r in requests]
        with ThreadPoolExecutor(min(len(requests), lanes), thread_name_prefix="tritonplug-compile") as threads:
            futures = [threads.submit(one, r) for r in requests]
        return [f.exception() or f.result() for f in futures]  # type: ignore[misc]


class _PartialFailure(Exception):
    """Some configurations failed to compile; ``found`` holds the binaries of all the others."""

    def __init__(self, found: dict[str, Binary], error: BaseException) -> None:
        super().__init__(str(error))
        self.found, self.error = found, error


def _settled(compile_one: Callable[[], Binary | Exception]) -> Binary | Exception:
    try:
        return compile_one()
    except Exception as exc:
        return exc


def _compile_request_here(backend: Backend, request: CompileRequest) -> Binary | Exception:
    return _compile_here(backend, request.make_job(), request.description)


def _compile_here(backend: Backend, job: CompileJob, description: str) -> Binary | Exception:
    """Compile in this process; a failure leads with the first MLIR diagnostic the compiler printed (the kernel's
    file and line), as a worker's does."""
    with fd_capture.Captured() as output:
        try:
            return backend.compile(job)
        except Exception as exc:
            output.drop()
            caught = exc
    where = ir_rules.first_diagnostic(output.stderr)
    if isinstance(caught, CompileError) and not where:
        return caught
    failure = CompileError(f"compiling {description} failed{where}" + ("\n" if where else ": ")
                           + f"{type(caught).__name__}: {caught}")
    failure.__cause__ = caught
    return failure
