"""Entry point of a compile worker: ``python -m tritonplug.compile.worker_main PARENT_PID [MODULE ...]``.

The worker imports the preload modules (and calls ``module:function`` entries), announces itself,
then serves one request at a time over its stdin/stdout until stdin reaches end of file. Every
message is an 8-byte big-endian length followed by that many bytes of cloudpickle:

- worker → parent, once at start-up: ``("ready", pid, [preload failures])``
- parent → worker: ``(task_id, func, args, stderr_path)``
- worker → parent: ``(task_id, "ok", result)`` or
  ``(task_id, "error", exception_type_name, message, formatted_traceback)``

While a request runs, file descriptors 1 and 2 point at ``stderr_path`` (``os.dup2``, so the
output of C++ compiler passes and of ``ptxas`` children lands there too); between requests they
point at the worker's log, which the parent created. The protocol uses private duplicates of
the original stdin/stdout, so a task that prints or reads cannot corrupt it.

``-m`` imports the ``tritonplug`` package before this module (not JAX: the package loads its API
lazily, and nothing a worker imports needs JAX); the module itself needs only the standard library and
cloudpickle, since ``tritonplug.compile.worker_process`` imports its framing.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import signal
import struct
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import cloudpickle

HEADER = struct.Struct(">Q")  # the length of the cloudpickle payload that follows
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this worker when the parent goes away, even mid-job."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int) -> bytes | None:
    """The next request's bytes, or None at end of file (the parent closed the pipe or died)."""
    header = _read_exact(fd, HEADER.size)
    if header is None:
        return None
    return _read_exact(fd, HEADER.unpack(header)[0])


def send(fd: int, payload: bytes) -> None:
    """Write one message (also used by the parent)."""
    view = memoryview(HEADER.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view):]


@contextlib.contextmanager
def _output_to(path: str) -> Iterator[None]:
    """Point fds 1 and 2 at ``path`` for one job, then back at the worker's log."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:  # the pool's directory is gone: run the job with the worker's log as output
        yield
        return
    saved = os.dup(2)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved, 1)
        os.dup2(saved, 2)
        os.close(target)
        os.close(saved)


def _error(task_id: Any, exc: BaseException) -> tuple:
    try:
        message = str(exc)
    except Exception:
        message = f"<unprintable {type(exc).__name__}>"
    return (task_id, "error", type(exc).__name__, message, traceback.format_exc())


def _serve(data: bytes) -> bytes:
    try:
        task_id, func, args, stderr_path = cloudpickle.loads(data)
    except BaseException as exc:  # e.g. the function's module cannot be imported here
        return cloudpickle.dumps(_error(None, exc))
    with _output_to(stderr_path):
        try:
            reply = (task_id, "ok", resolve(func)(*args))
        except BaseException as exc:  # SystemExit too: the job failed, the worker carries on
            reply = _error(task_id, exc)
    try:
        return cloudpickle.dumps(reply)
    except BaseException as exc:
        return cloudpickle.dumps(_error(task_id, exc))


def resolve(func: Any) -> Any:
    """A task's function: itself, or the function a ``"module:function"`` name refers to."""
    if isinstance(func, str):
        module_name, _, name = func.partition(":")
        return getattr(importlib.import_module(module_name), name)
    return func


def _preload(modules: list[str]) -> list[str]:
    """Import the preload modules (``module:function`` also calls the function, without arguments).

    A failure is reported, not fatal (the job will say more).
    """
    failures = []
    for name in modules:
        try:
            module_name, _, function = name.partition(":")
            module = importlib.import_module(module_name)
            if function:
                getattr(module, function)()
        except BaseException as exc:
            traceback.print_exc()
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    return failures


def main(argv: list[str]) -> int:
    _die_with_parent(int(argv[0]))
    requests, replies = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    send(replies, cloudpickle.dumps(("ready", os.getpid(), _preload(argv[1:]))))
    while (data := _receive(requests)) is not None:
        send(replies, _serve(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
