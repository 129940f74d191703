"""Task functions for tests/test_workers.py; compile workers import this module by name."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time

if os.environ.get("WORKER_TASKS_EXIT_ON_IMPORT"):  # a worker whose start-up fails
    os.write(2, b"cannot import the compiler\n")
    os._exit(3)


def square(x: int) -> int:
    return x * x


def sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def getpid() -> int:
    return os.getpid()


def fail_loudly(message: str) -> None:
    os.write(2, b"ptxas says: register spill overflow\n")
    print("a print() on stdout lands in the captured output too")
    raise ValueError(message)


def kill_self(attempts_file: str) -> None:
    with open(attempts_file, "a") as file:
        file.write(f"{os.getpid()}\n")
    os.write(2, b"about to be killed\n")
    os.kill(os.getpid(), signal.SIGKILL)


def die_once(marker: str) -> str:
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


def hang_once_at_start() -> None:
    """A preload entry: the first worker to start while ``HANG_ONCE_MARKER`` names a missing file creates it and
    hangs (a worker stopped or stuck while importing); the others start at once."""
    marker = os.environ.get("HANG_ONCE_MARKER")
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(600)


def abort() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.abort()


def hang_with_child(pid_file: str) -> None:
    """Start a grandchild like ptxas would, then hang past any reasonable timeout."""
    child = subprocess.Popen(["sleep", "1000"])
    with open(pid_file, "w") as file:
        file.write(str(child.pid))
    time.sleep(1000)


def loaded_modules(*names: str) -> list[str]:
    """Which of ``names`` this process has imported."""
    import sys

    return [name for name in names if name in sys.modules]
