"""Per configuration: memory → disk cache → compile workers → binary, with single-flight.

A key is compiled at most once per machine at a time: threads of this process wait on an
in-memory future, other processes on the cache's per-key file lock, and both then read
the binary the first compiler published.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from tritonplug import cache as disk_cache
from tritonplug import remote_cache, workers
from tritonplug.errors import CompileError
from tritonplug.host import Backend, get_host
from tritonplug.records import Binary, CompileJob, Target

log = logging.getLogger("tritonplug.compiler")


@dataclass(frozen=True)
class CompileRequest:
    """One configuration to compile; ``make_job`` runs the front end, only on a miss."""

    key: str
    make_job: Callable[[], CompileJob]
    description: str


class CompileService:
    def __init__(self) -> None:
        self._memory: dict[str, Binary] = {}
        self._inflight: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._cache: Any = None
        self._cache_ready = False
        self.stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0, "compile_seconds": 0.0}

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
        remote_cache.reset()

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
            with self._lock:
                for r in mine:
                    self._inflight.pop(r.key).set_exception(exc)
            raise
        with self._lock:
            for r in mine:
                self._memory[r.key] = found[r.key]
                self._inflight.pop(r.key).set_result(found[r.key])
        for key, future in waits.items():
            found[key] = future.result()
        return [found[r.key] for r in requests]

    def _resolve(self, backend: Backend, target: Target, requests: list[CompileRequest]) -> dict[str, Binary]:
        cache = self.cache if target.triton_backend is not None else None
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
            remote = remote_cache.current() if missing and target.triton_backend is not None else None
            if remote is not None:  # remote → claim → compile here or wait for the host that claimed it
                found.update(remote.resolve(missing, lambda rs: self._compile(backend, target, rs, cache), cache))
            elif missing:
                found.update(self._compile(backend, target, missing, cache))
        return found

    def _compile(self, backend: Backend, target: Target, missing: list[CompileRequest],
                 cache: Any) -> dict[str, Binary]:
        found = {}
        start = time.perf_counter()
        binaries = self._run(backend, target, missing)
        elapsed = time.perf_counter() - start
        with self._lock:
            self.stats["compiled"] += len(missing)
            self.stats["compile_seconds"] += elapsed
        for r, binary in zip(missing, binaries, strict=True):
            log.info("compiled %s for %s (key %s)", r.description, target.describe(), r.key[:12])
            if cache is not None and cache.put(r.key, binary):
                log.info("cached %s in %s", r.description, cache.directory)
            found[r.key] = binary
        log.info("compiled %d configuration(s) in %.3f s", len(missing), elapsed)
        return found

    def _from_disk(self, cache: Any, requests: list[CompileRequest]) -> dict[str, Binary]:
        found = {}
        if cache is None:
            return found
        for r in requests:
            binary = cache.get(r.key)
            if binary is not None:
                log.info("disk cache hit for %s (key %s)", r.description, r.key[:12])
                found[r.key] = binary
                with self._lock:
                    self.stats["disk_hits"] += 1
        return found

    def _run(self, backend: Backend, target: Target, requests: list[CompileRequest]) -> list[Binary]:
        jobs = [r.make_job() for r in requests]
        in_process = target.triton_backend is None or not backend.source.startswith("entry point")
        if in_process:
            return [_compile_here(backend, job, r.description) for job, r in zip(jobs, requests, strict=True)]
        tasks = [workers.Task(compile_in_worker, (job,), r.description) for job, r in zip(jobs, requests, strict=True)]
        return workers.run_tasks(tasks)


def _compile_here(backend: Backend, job: CompileJob, description: str) -> Binary:
    try:
        return backend.compile(job)
    except CompileError:
        raise
    except Exception as exc:
        raise CompileError(f"compiling {description} failed: {type(exc).__name__}: {exc}") from exc


def prepare_worker() -> None:
    """Runs once in each compile worker before its first job: load the backend plugins (and Triton)."""
    get_host()


def compile_in_worker(job: CompileJob) -> Binary:
    """Runs in a compile worker: find the job's backend by name and call its compile hook."""
    host = get_host()
    if job.backend not in host.backends:
        raise CompileError(f"backend {job.backend!r} is not installed in the compile worker's environment "
                           f"(loaded: {sorted(host.backends)})")
    return host.backends[job.backend].compile(job)


service = CompileService()


def compile_stats() -> dict[str, float]:
    """This process's counters: ``compiled``, ``disk_hits``, ``memory_hits``, ``compile_seconds``, and the remote
    tier's ``remote_hits``, ``remote_waits``, ``remote_published``, ``remote_errors``."""
    return {**service.stats, **remote_cache.counters()}
