"""The HSACO files jaxlib's ROCm runtime reads: one path per binary, the same in every process.

jaxlib's ROCm runtime takes the *path* of an HSACO file in the kernel's ``ptx`` field, reads the file
at the kernel's first launch in a process and deletes it. The path is part of the lowered module, so
for JAX's persistent compilation cache to serve a program to another process it must be the same in
every process; and a file one process's runtime deletes must never be one another process still needs.

Both hold with ``/proc/self/fd/<FD>/<sha256 of the HSACO>.hsaco``: each process keeps a private
directory (``mkdtemp``, mode 0700, removed at exit) open under the fixed descriptor number ``FD``, so the
path is spelled alike everywhere but resolves to this process's own directory (``/proc/self`` is the
process reading it). The file is named by its content and written (atomically) whenever a lowering
needs it and it is missing: jaxlib reads a given path once per process (it caches the loaded module by
path), so the file needed for a launch always exists until that first read; an executable loaded from
the persistent cache is preceded by the lowering that computes its cache key, which writes the file.

Where descriptor ``FD`` cannot be taken (held by something else, or beyond the descriptor limit), the
path falls back to the private directory's real name: correct, but unique to the process, so JAX's
persistent cache then misses for programs calling ROCm kernels. A forked child opens its own directory.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import threading

log = logging.getLogger("tritonplug.rocm")

#: The descriptor number the private directory is kept open under (any fixed number works; this one is
#: high enough to be free in ordinary processes and below the common 1024 limit).
FD = 987

_lock = threading.Lock()
_directory: str | None = None  # this process's private directory
_prefix: str | None = None  # what paths start with: /proc/self/fd/FD, or the directory itself


def _open_directory() -> None:
    global _directory, _prefix
    directory = tempfile.mkdtemp(prefix="tritonplug-hsaco-")
    atexit.register(_remove, directory, os.getpid())
    _directory, _prefix = directory, directory
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(OSError):
            os.fstat(FD)  # taken by something else: keep the fallback
            log.info("descriptor %d is in use; HSACO paths fall back to %s (unique to this process)", FD, directory)
            return
        try:
            os.dup2(dir_fd, FD, inheritable=False)
        except OSError as exc:
            log.info("cannot keep the HSACO directory under descriptor %d (%s); paths fall back to %s",
                     FD, exc, directory)
            return
        _prefix = f"/proc/self/fd/{FD}" if os.path.isdir(f"/proc/self/fd/{FD}") else directory
    finally:
        os.close(dir_fd)


def hsaco_path(hsaco: bytes) -> str:
    """The path to put in the kernel's ``ptx`` field; the file exists when this returns."""
    with _lock:
        if _prefix is None:
            _open_directory()
        assert _directory is not None and _prefix is not None
        name = f"{hashlib.sha256(hsaco).hexdigest()}.hsaco"
        target = os.path.join(_directory, name)
        if not os.path.exists(target):
            fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=_directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(hsaco)
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        return os.path.join(_prefix, name)


def _remove(directory: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(directory, ignore_errors=True)


def _after_fork_in_child() -> None:
    """The child must not share (and delete from) its parent's directory: it opens its own on first use."""
    global _directory, _prefix, _lock
    _lock = threading.Lock()
    if _prefix is not None and _prefix.startswith("/proc/self/fd/"):
        with contextlib.suppress(OSError):
            os.close(FD)
    _directory = _prefix = None


os.register_at_fork(after_in_child=_after_fork_in_child)
