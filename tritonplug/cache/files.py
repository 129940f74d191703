"""The disk cache's dealings with the file system: safety checks, healing, scanning and removal.

Written for a tree that other processes, crashes and damage may change at any moment. The safety
checks raise :class:`UnsafeCacheDir` for a tree someone else could write; ``makedirs``,
``probe_writable`` and ``write_small_file`` raise ``OSError`` for the caller to handle; everything else
reports what it could not do and carries on. Nothing here follows a symlink inside the cache, and
nothing opens a path in a way that could block (a fifo at an entry path must not hang a ``get``).

A *non-file* is whatever ``lstat`` says is not a regular file: a directory, a fifo, a socket, a
device, a symlink (dangling or not). The cache stores only regular files at entry and lock paths,
so a non-file there is damage, and :func:`remove_non_file` heals it. A process that heals races
with one publishing a good entry at the same path; the worst outcome is that the good entry is
lost again, which is a miss, never a wrong kernel.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from tritonplug.errors import TritonplugError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: per-key lock files are then left in place
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("tritonplug.cache.disk")

KEY = re.compile(r"[0-9a-f]{16,128}")
BUCKET = re.compile(r"[0-9a-f]{2}")
ORPHAN_AGE_S = 600.0  # a temp file this old belongs to a writer that died, whatever its name says
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_READ_FLAGS = os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


class CacheDirError(TritonplugError):
    """The cache directory cannot be created or used."""


class UnsafeCacheDir(CacheDirError):
    """The cache directory could be written by someone else, who could then plant kernels."""


# --- safety ---------------------------------------------------------------------------------------

def check_ancestors(directory: Path) -> None:
    """Refuse a cache below a world-writable directory without the sticky bit (anyone could swap ours)."""
    for parent in directory.parents:
        try:
            st = parent.stat()
        except OSError:
            continue  # not there yet: it will be created with mode 0700
        if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            raise UnsafeCacheDir(
                f"{parent}, a parent of the cache directory {directory}, is writable by everyone and has no "
                f"sticky bit, so anyone could replace the cache with their own; `chmod +t {parent}` (or "
                f"`chmod o-w {parent}`), or set TRITONPLUG_CACHE_DIR to a directory of your own")


def check_safe(directory: Path) -> None:
    """Refuse a cache directory, or an ``entries``/``locks`` directory or bucket in it, that another user
    owns or that group or others may write: they could plant kernels that this process would run."""
    _check_owned_private(directory, directory, top=True)
    for sub in ("entries", "locks"):
        path = directory / sub
        if not path.is_dir():
            continue
        _check_owned_private(path, directory)
        with contextlib.suppress(OSError), os.scandir(path) as buckets:
            for bucket in buckets:
                if BUCKET.fullmatch(bucket.name) and bucket.is_dir():
                    _check_owned_private(Path(bucket.path), directory)


def _check_owned_private(path: Path, directory: Path, top: bool = False) -> None:
    try:
        st = path.stat()
    except OSError:
        return  # vanished: it will be recreated with mode 0700
    what = f"cache directory {path}" if top else f"{path} in the cache directory {directory}"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise UnsafeCacheDir(f"{what} is owned by uid {st.st_uid}, not by the current user (uid {os.getuid()}); "
                             f"`chown -R {os.getuid()} {directory}` it, or use another TRITONPLUG_CACHE_DIR")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        fix = f"`chmod 700 {path}` it" if top else f"`chmod go-w {path}` (or `chmod -R go-w {directory}`)"
        raise UnsafeCacheDir(f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):#o}); "
                             f"{fix} to use it")


def dangling(directory: Path) -> str:
    """Why a path on the way to ``directory`` cannot be created when it is a symbolic link to nothing
    (``os.makedirs`` says only ``File exists``); "" otherwise."""
    for path in (directory, *directory.parents):
        if path.is_symlink() and not path.exists():
            return (f"{path} is a symbolic link to {os.readlink(path)}, which does not exist; create that directory "
                    f"or point TRITONPLUG_CACHE_DIR elsewhere")
    return ""


def makedirs(path: Path) -> None:
    """``os.makedirs`` whose created parents also get mode 0700 (``os.makedirs`` gives them the umask's)."""
    if path.is_dir():
        return
    makedirs(path.parent)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        if not path.is_dir():
            raise


# --- reading and healing --------------------------------------------------------------------------

def read_regular_file(path: str | Path, dir_fd: int | None = None,
                      refuse_links: bool = False) -> tuple[bytes, int] | None:
    """``(contents, inode)`` of the regular file at ``path`` (relative to ``dir_fd`` if given); ``None`` if absent or
    unreadable. Never follows a symlink and never blocks on a fifo; a non-file found at ``path`` is removed, except a
    symlink when ``refuse_links``: that raises :class:`Linked` (for the caller to name).
    """
    try:
        fd = os.open(path, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP (a symlink), ENXIO (a socket), EACCES (unreadable)...
        if refuse_links and exc.errno == errno.ELOOP:
            raise Linked(Path(path), "an entry file") from None
        log.debug("cannot open %s: %s", path, exc.strerror)
        remove_non_file(path, dir_fd)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            remove_non_file(path, dir_fd)
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks), st.st_ino
    except OSError as exc:
        log.debug("cannot read %s: %s", path, exc.strerror)
        return None
    finally:
        os.close(fd)


class Linked(Exception):
    """A symbolic link where the cache keeps a directory (``entries/``, a bucket) or an entry file: never followed,
    whoever made it."""

    def __init__(self, path: Path, what: str = "a directory") -> None:
        super().__init__(f"{path}, a symbolic link where the cache keeps {what}")
        self.path = path


def open_entry_dir(directory: Path, bucket: str, create: bool) -> int | None:
    """A descriptor of ``<directory>/entries/<bucket>``, ``entries`` and the bucket each opened without following a
    link (the cache directory itself may be reached through one: the user chose it); entries are then opened
    relative to it, so nothing swapped in meanwhile is followed either. ``None`` when absent and not ``create``;
    :class:`Linked` for a link there; ``OSError`` when it cannot be created."""
    top = os.open(directory, _DIR_FLAGS)
    try:
        entries = _open_dir("entries", top, directory / "entries", create)
    finally:
        os.close(top)
    if entries is None:
        return None
    try:
        return _open_dir(bucket, entries, directory / "entries" / bucket, create)
    finally:
        os.close(entries)


def _open_dir(name: str, dir_fd: int, shown: Path, create: bool) -> int | None:
    for attempt in range(2):
        try:
            return os.open(name, _DIR_FLAGS | NOFOLLOW, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create or attempt:
                return None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
                    raise Linked(shown) from None
            raise  # a file where the directory belongs: damage that scans remove, as ever
    return None


def probe_writable(directory: Path) -> None:
    """Raise OSError unless a file can be created (and so removed) in ``directory``, creating it if need be.

    The probe is named like a temp file of this process, so a crash leaves an orphan that scans remove.
    """
    makedirs(directory)
    probe = directory / f".probe.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(probe)


def write_small_file(path: Path, text: str) -> None:
    """Overwrite a small bookkeeping file in place, replacing a non-file at ``path``; raises OSError."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        if not remove_non_file(path):
            raise
        fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        f.write(text)


def remove_non_file(path: str | Path, dir_fd: int | None = None) -> bool:
    """Remove whatever is at ``path`` (relative to ``dir_fd`` if given) unless it is a regular file; whether something
    was removed."""
    try:
        st = os.lstat(path, dir_fd=dir_fd)
    except OSError:
        return False
    if stat.S_ISREG(st.st_mode):
        return False
    if not remove_any(path, st, dir_fd):
        return False
    log.info("removed %s at %s: the cache keeps only regular files there", _describe(st.st_mode), path)
    return True


def remove_any(path: str | Path, st: os.stat_result | None = None, dir_fd: int | None = None) -> bool:
    """Remove a file or a whole directory tree (never following symlinks); whether it is gone now."""
    try:
        st = st or os.lstat(path, dir_fd=dir_fd)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path, dir_fd=dir_fd)
        else:
            os.unlink(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.info("cannot remove %s: %s", path, exc)
        return False
    return True


def _describe(mode: int) -> str:
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a fifo"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
    return next((name for test, name in kinds if test(mode)), "a non-file")


# --- scanning -------------------------------------------------------------------------------------

@dataclass
class Scan:
    """What one walk of ``entries/`` (or ``locks/``) found."""

    entries: list[tuple[str, int, float]] = field(default_factory=list)  # regular entry files: path, size, mtime
    temps: list[tuple[str, float]] = field(default_factory=list)  # regular temp files: path, mtime
    locks: list[str] = field(default_factory=list)  # regular per-key lock files
    junk: list[str] = field(default_factory=list)  # anything else: damage to remove
    unreadable: list[str] = field(default_factory=list)  # buckets that could not be listed


def scan(directory: Path, locks: bool = False) -> Scan:
    """Classify everything under ``<directory>/entries`` (or ``<directory>/locks`` when ``locks``)."""
    found = Scan()
    top = directory / ("locks" if locks else "entries")
    with contextlib.suppress(OSError), os.scandir(top) as buckets:
        for bucket in buckets:
            if BUCKET.fullmatch(bucket.name) and bucket.is_dir(follow_symlinks=False):
                _scan_bucket(bucket.path, found, locks)
            else:
                found.junk.append(bucket.path)
    return found


def _scan_bucket(bucket: str, found: Scan, locks: bool) -> None:
    try:
        with os.scandir(bucket) as items:
            listed = list(items)
    except PermissionError:
        try:  # our own bucket with its permissions damaged: give them back, then list it
            os.chmod(bucket, 0o700)
            with os.scandir(bucket) as items:
                listed = list(items)
        except OSError as exc:
            log.info("cannot list %s: %s", bucket, exc)
            found.unreadable.append(bucket)
            return
    except OSError as exc:
        log.info("cannot list %s: %s", bucket, exc)
        found.unreadable.append(bucket)
        return
    for item in listed:
        try:
            st = item.stat(follow_symlinks=False)
        except OSError:
            continue  # removed meanwhile
        regular = stat.S_ISREG(st.st_mode)
        stem, _, suffix = item.name.rpartition(".")
        if regular and locks and suffix == "lock" and KEY.fullmatch(stem):
            found.locks.append(item.path)
        elif regular and not locks and suffix == "bin" and KEY.fullmatch(stem):
            found.entries.append((item.path, st.st_size, st.st_mtime))
        elif regular and suffix == "tmp":
            found.temps.append((item.path, st.st_mtime))
        else:
            found.junk.append(item.path)


# --- removal --------------------------------------------------------------------------------------

def temp_name(key: str) -> str:
    """A writer's temp file name: ``.<key>.<pid>.<random>.tmp`` (the pid tells if the writer is alive)."""
    return f".{key}.{os.getpid()}.{os.urandom(4).hex()}.tmp"


def is_orphaned_temp(path: str, mtime: float, now: float | None = None) -> bool:
    """A temp file whose writer is gone: old, not named by a writer, or named by a process that is not running."""
    if (now if now is not None else time.time()) - mtime > ORPHAN_AGE_S:
        return True
    parts = os.path.basename(path).split(".")
    if len(parts) != 5 or parts[0] or not parts[2].isdigit():
        return True
    return not _process_alive(int(parts[2]))


def _process_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def remove_unheld_lock(path: str) -> str:
    """Remove a per-key lock file that no process holds: ``"removed"``, ``"held"`` or ``"failed"``.

    The file is unlinked while we hold its lock, so a process that opened it just before sees it
    unlinked once it gets the lock (filelock checks ``st_nlink`` and retries on a fresh file).
    """
    if fcntl is None:
        return "held"
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return "removed"
    except OSError:
        return "removed" if remove_non_file(Path(path)) else "failed"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "removed" if remove_non_file(Path(path)) else "failed"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return "held"  # a process is compiling this key right now
            raise
        if os.lstat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
        return "removed"
    except FileNotFoundError:
        return "removed"
    except OSError as exc:
        log.info("cannot remove lock file %s: %s", path, exc)
        return "failed"
    finally:
        os.close(fd)
