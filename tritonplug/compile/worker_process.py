"""The parent's side of one compile-worker process: starting it (:func:`start_worker`), framed
messages over its pipes with deadlines, killing its whole process group, and reading what it left
in its log and stderr files. ``_worker_main`` is the other end."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cloudpickle

from tritonplug.compile.worker_main import HEADER, send

log = logging.getLogger("tritonplug.compile.workers")


class Died(Exception):
    """The worker's stdout reached end of file: it exited or was killed."""


class TimedOut(Exception):
    """No reply before the deadline."""


class WorkerProcess:
    """One worker process, used by one thread at a time (the pool hands it out)."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: str) -> None:
        if proc.stdin is None or proc.stdout is None:
            raise ValueError("a compile worker is spoken to through pipes on its stdin and stdout")
        self.proc, self.pid, self.log_path, self.ready, self.busy = proc, proc.pid, log_path, False, False
        self.stdin, self.stdout = proc.stdin, proc.stdout
        self._lock = threading.Lock()  # orders killpg before reaping: a reaped pid may be reused
        self._poll = select.poll()
        self._poll.register(self.stdout.fileno(), select.POLLIN)

    def alive(self) -> bool:
        with self._lock:
            return self.proc.poll() is None

    def wait_ready(self, timeout: float) -> None:
        if not self.ready:
            _, _, failures = self._receive(time.monotonic() + timeout)  # ("ready", pid, preload failures)
            for failure in failures:
                log.warning("compile worker pid %d could not preload %s", self.pid, failure)
            self.ready = True

    def call(self, payload: bytes, timeout: float, startup_timeout: float) -> tuple:
        self.wait_ready(startup_timeout)
        self.busy = True
        try:
            send(self.stdin.fileno(), payload)
            return self._receive(time.monotonic() + timeout)
        except BrokenPipeError:
            raise Died() from None
        finally:
            self.busy = False

    def _receive(self, deadline: float) -> Any:
        return cloudpickle.loads(self._read(HEADER.unpack(self._read(HEADER.size, deadline))[0], deadline))

    def _read(self, size: int, deadline: float) -> bytes:
        chunks = []
        while size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimedOut()
            if self._poll.poll(math.ceil(remaining * 1000)):
                chunk = os.read(self.stdout.fileno(), min(size, 1 << 20))
                if not chunk:
                    raise Died()
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
        with contextlib.suppress(ValueError):
            return f"was killed by signal {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"


def start_worker(log_path: str, preload: Sequence[str]) -> WorkerProcess:
    """Start ``python -m tritonplug.compile.worker_main`` from a clean interpreter, its stderr in ``log_path``.

    It runs in a session (process group) of its own, so killing it takes its ptxas children too;
    it imports ``preload`` in the background while this returns.
    """
    command = [sys.executable, "-m", "tritonplug.compile.worker_main", str(os.getpid()), *preload]

    def popen() -> subprocess.Popen[bytes]:
        with open(log_path, "wb") as log_file:
            return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=log_file, close_fds=True, start_new_session=True,
                                    env=child_env(), bufsize=0)
    return WorkerProcess(_spawner.submit(popen).result(), log_path)


def child_env() -> dict[str, str]:
    """The parent's environment, with the directory holding this ``tritonplug`` first on PYTHONPATH."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    return env


def take_text(path: str) -> str:
    """The first 8 and the last 16 KiB of a file (a worker's log, a job's stderr: MLIR's first error comes
    before the module it dumps), which is then removed; "" when it does not exist."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            head = file.read(8192) if size > 8192 + 16384 else b""
            file.seek(max(0, size - 16384))
            text = (head + (b"\n[...]\n" if head else b"") + file.read()).decode(errors="replace")
        os.remove(path)
        return text
    except OSError:
        return ""


def _new_spawner() -> ThreadPoolExecutor:
    """The one long-lived thread that starts every worker.

    Linux sends PR_SET_PDEATHSIG when the *thread* that started the child exits, not the process:
    workers started from a user's short-lived thread would die with it. (An executor's thread
    lives until interpreter exit.)
    """
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="tritonplug-worker-spawner")


def _after_fork_in_child() -> None:
    """A forked child gets a spawner thread of its own: the parent's did not come along."""
    global _spawner
    _spawner = _new_spawner()


_spawner = _new_spawner()
os.register_at_fork(after_in_child=_after_fork_in_child)
