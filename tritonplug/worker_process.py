"""The parent's handle on one compile-worker process: framed messages over its pipes, with
deadlines, and killing its whole process group. ``_worker_main`` is the other end."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import signal
import subprocess
import threading
import time
from typing import Any

import cloudpickle

from tritonplug._worker_main import HEADER, send

log = logging.getLogger("tritonplug.workers")


class Died(Exception):
    """The worker's stdout reached end of file: it exited or was killed."""


class TimedOut(Exception):
    """No reply before the deadline."""


class WorkerProcess:
    """One worker process, used by one thread at a time (the pool hands it out)."""

    def __init__(self, proc: subprocess.Popen, log_path: str) -> None:
        self.proc, self.pid, self.log_path, self.ready, self.busy = proc, proc.pid, log_path, False, False
        self._lock = threading.Lock()  # orders killpg before reaping: a reaped pid may be reused
        self._poll = select.poll()
        self._poll.register(proc.stdout.fileno(), select.POLLIN)

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
            send(self.proc.stdin.fileno(), payload)
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
                chunk = os.read(self.proc.stdout.fileno(), min(size, 1 << 20))
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
