"""The on-disk cache of compiled kernels, shared by every process of the user on the machine.

One file per entry, ``<dir>/entries/<key[:2]>/<key>.bin``, published with ``os.replace`` so a
reader sees either nothing or a whole entry. Entry format (no pickle)::

    b"tritonplug-cache 1\\n"                   magic line
    {"key", "kernel_name", "format", "metadata", "payload_size",
     "images": [{"name", "offset", "size"}]}\\n   one line of JSON
    <images back to back><sha256 of all the bytes before it, 32 raw bytes>

A file's mtime is its LRU clock: a hit bumps it, and eviction removes the oldest first. Beside
``entries/`` live ``lock`` (the cache-wide lock for eviction), ``size`` (the running total that spares
most puts a scan) and ``locks/`` (per-key locks for single-flight compiles).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import stat
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import filelock

from tritonplug.errors import TritonplugError
from tritonplug.records import Binary

log = logging.getLogger("tritonplug.cache")

MAGIC = b"tritonplug-cache 1\n"
_DIGEST = 32
_KEY = re.compile(r"[0-9a-f]{16,128}")
_ORPHAN_AGE_S = 600.0  # a temp file this old belongs to a writer that died
_LOW_WATER = 0.9  # a put that finds the cache full evicts down to 90%, so the next puts need no scan
_EVICT_LOCK_TIMEOUT_S = 30.0  # a put gives up evicting (the next put retries) rather than hang
_DISABLED = {"0", "off", "false", "no"}


class CacheDirError(TritonplugError):
    """The cache directory cannot be created or used."""


class UnsafeCacheDir(CacheDirError):
    """The cache directory could be written by someone else, who could then plant kernels."""


@dataclass(frozen=True)
class CacheStats:
    directory: str
    entries: int
    total_bytes: int
    max_bytes: int


class DiskCache:
    """A file-locked LRU cache of :class:`Binary` records, bounded by ``max_bytes`` of entry files."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int = 1 << 30) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.directory = Path(directory).expanduser().absolute()
        self.max_bytes = int(max_bytes)
        self._warned = False
        self._first_put = True
        # One lock object per cache: re-entrant in a thread, exclusive between threads and processes.
        self._lock = filelock.FileLock(self.directory / "lock", mode=0o600)
        try:
            _makedirs(self.directory)
            st = self.directory.stat()
        except OSError as exc:
            raise CacheDirError(f"cannot create the cache directory {self.directory}: {exc}") from exc
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise UnsafeCacheDir(f"cache directory {self.directory} is owned by uid {st.st_uid}, not by the "
                                 f"current user (uid {os.getuid()})")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UnsafeCacheDir(f"cache directory {self.directory} is writable by group or others "
                                 f"(mode {stat.S_IMODE(st.st_mode):#o}); `chmod 700` it to use it")

    def _path(self, key: str) -> Path:
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"key must be a lower-case hex digest of 16 to 128 characters, got {key!r}")
        return self.directory / "entries" / key[:2] / f"{key}.bin"

    def get(self, key: str) -> Binary | None:
        """The entry for ``key``, or ``None``; a damaged entry is removed and counts as a miss."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                inode = os.fstat(f.fileno()).st_ino
                data = f.read()
        except OSError as exc:  # absent, or unreadable
            log.debug("miss %s (%s)", key[:12], exc.strerror)
            return None
        try:
            binary = decode_entry(key, data)
        except (ValueError, KeyError, TypeError) as exc:
            log.info("removing damaged cache entry %s: %s", path, exc)
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino == inode:  # not a good entry another process just published
                    os.unlink(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        log.debug("hit %s (%s, %d bytes)", key[:12], binary.kernel_name, len(data))
        return binary

    def put(self, key: str, binary: Binary) -> bool:
        """Store ``binary`` under ``key``; ``False`` if it was not written (too big, or the disk refused)."""
        path = self._path(key)
        blob = encode_entry(key, binary)
        if len(blob) > self.max_bytes:
            log.info("not caching %s: %d bytes exceed the bound of %d", key[:12], len(blob), self.max_bytes)
            return False
        tmp: Path | None = None
        try:
            _makedirs(path.parent)
            tmp = path.with_name(f".{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            tmp = None
        except OSError as exc:
            self._warn_once(f"cannot write to the kernel cache at {self.directory} ({exc}); "
                            f"compiled kernels will not be cached")
            return False
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        log.debug("put %s (%s, %d bytes)", key[:12], binary.kernel_name, len(blob))
        try:
            self._account(len(blob))
        except OSError as exc:  # includes filelock.Timeout: the next put evicts instead
            log.info("skipped eviction after put: %s", exc)
        return True

    def _account(self, size: int) -> None:
        """Add a new entry to the ledger (``<dir>/size``); scan and evict only when it says we may be over.

        The ledger, read and written under the cache-wide lock, may only overstate the total (a key written
        twice counts twice), which just brings the next scan forward. A writer that died between publishing
        and accounting leaves it short; each DiskCache scans on its first put to correct that.
        """
        with self._lock.acquire(timeout=_EVICT_LOCK_TIMEOUT_S):
            total = None if self._first_put else _read_int(self.directory / "size")
            self._first_put = False
            if total is None or total + size > self.max_bytes:
                self._evict(int(self.max_bytes * _LOW_WATER))
            else:
                (self.directory / "size").write_text(str(total + size))

    def key_lock(self, key: str) -> contextlib.AbstractContextManager:
        """An inter-process lock for ``key``: hold it while compiling so one process compiles, others wait.

        A lock that cannot be created (read-only cache) degrades to no lock, with the once-only warning.
        """
        self._path(key)  # validates the key
        return self._key_lock(self.directory / "locks" / key[:2] / f"{key}.lock")

    @contextlib.contextmanager
    def _key_lock(self, path: Path) -> Iterator[None]:
        lock: filelock.FileLock | None = filelock.FileLock(path, mode=0o600)
        try:
            _makedirs(path.parent)
            lock.acquire()
        except OSError as exc:
            self._warn_once(f"cannot lock {path} in the kernel cache at {self.directory} ({exc})")
            lock = None
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

    def stats(self) -> CacheStats:
        entries, _ = self._scan()
        total = sum(size for _, size, _ in entries)
        return CacheStats(str(self.directory), len(entries), total, self.max_bytes)

    def clear(self) -> int:
        """Remove every entry (and stale temp files); returns the number of entries removed."""
        with self._lock:
            return self._evict(0)

    def prune(self, max_bytes: int | None = None) -> int:
        """Evict least-recently-used entries until they total ``<= max_bytes``; remove stale temp files."""
        with self._lock:
            return self._evict(self.max_bytes if max_bytes is None else max_bytes)

    def _evict(self, max_bytes: int) -> int:
        """Scan; remove stale temp files, and the oldest entries down to ``max_bytes``. Needs the lock."""
        entries, temps = self._scan()
        now = time.time()
        for path, mtime in temps:
            if now - mtime > _ORPHAN_AGE_S:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                    log.info("removed orphaned temp file %s", path)
        total = sum(size for _, size, _ in entries)
        removed = 0
        for path, size, _ in sorted(entries, key=lambda e: e[2]):
            if total <= max_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed += 1
            total -= size
        if removed:
            log.info("evicted %d entries from %s; %d bytes remain", removed, self.directory, total)
        with contextlib.suppress(OSError):
            (self.directory / "size").write_text(str(total))
        return removed

    def _scan(self) -> tuple[list[tuple[str, int, float]], list[tuple[str, float]]]:
        """Entry files as (path, size, mtime) and temp files as (path, mtime)."""
        entries, temps = [], []
        with contextlib.suppress(OSError), os.scandir(self.directory / "entries") as top:
            for bucket in top:
                if not bucket.is_dir(follow_symlinks=False):
                    continue
                with contextlib.suppress(OSError), os.scandir(bucket.path) as files:
                    for item in files:
                        with contextlib.suppress(OSError):
                            st = item.stat(follow_symlinks=False)
                            if item.name.endswith(".bin") and _KEY.fullmatch(item.name[:-4]):
                                entries.append((item.path, st.st_size, st.st_mtime))
                            elif item.name.endswith(".tmp"):
                                temps.append((item.path, st.st_mtime))
        return entries, temps

    def _warn_once(self, message: str) -> None:
        log.info("%s", message)
        if not self._warned:
            self._warned = True
            warnings.warn(f"tritonplug: {message}", RuntimeWarning, stacklevel=3)


def encode_entry(key: str, binary: Binary) -> bytes:
    """One entry's bytes (the format above); the remote tier stores exactly these."""
    blobs = {str(name): bytes(image) for name, image in binary.images.items()}
    images, offset = [], 0
    for name, image in blobs.items():
        images.append({"name": name, "offset": offset, "size": len(image)})
        offset += len(image)
    header = {"key": key, "kernel_name": binary.kernel_name, "format": binary.format,
              "metadata": dict(binary.metadata), "images": images, "payload_size": offset}
    try:
        line = json.dumps(header, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the metadata of kernel {binary.kernel_name!r} is not JSON-serialisable, so it "
                        f"cannot be cached: {exc}") from exc
    body = b"".join([MAGIC, line, b"\n", *blobs.values()])
    return body + hashlib.sha256(body).digest()


def decode_entry(key: str, data: bytes) -> Binary:
    """Parse and check one entry (a file, or a remote value); any damage, or an entry made for another key,
    raises ValueError (or KeyError/TypeError)."""
    if len(data) < len(MAGIC) + _DIGEST or not data.startswith(MAGIC):
        raise ValueError("bad magic or truncated")
    body = data[:-_DIGEST]
    if hashlib.sha256(body).digest() != data[-_DIGEST:]:
        raise ValueError("checksum mismatch")
    end = body.index(b"\n", len(MAGIC))
    header = json.loads(body[len(MAGIC):end])
    payload = body[end + 1:]
    if header["key"] != key or header["payload_size"] != len(payload):
        raise ValueError("header does not match the file")
    images = {}
    for image in header["images"]:
        start, size = int(image["offset"]), int(image["size"])
        if start < 0 or size < 0 or start + size > len(payload):
            raise ValueError(f"image {image['name']!r} lies outside the payload")
        images[str(image["name"])] = payload[start:start + size]
    return Binary(kernel_name=str(header["kernel_name"]), format=str(header["format"]), images=images,
                  metadata=dict(header["metadata"]))


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _makedirs(path: Path) -> None:
    """``os.makedirs`` whose created parents also get mode 0700 (``os.makedirs`` gives them the umask's)."""
    if path.is_dir():
        return
    _makedirs(path.parent)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        if not path.is_dir():
            raise


def default_directory() -> Path:
    """``$TRITONPLUG_CACHE_DIR``, else ``$XDG_CACHE_HOME/tritonplug``, else ``~/.cache/tritonplug``."""
    if os.environ.get("TRITONPLUG_CACHE_DIR"):
        return Path(os.environ["TRITONPLUG_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # XDG: ignore a relative path
    return base / "tritonplug"


def cache_from_env() -> DiskCache | None:
    """The cache the environment asks for, or ``None`` when disabled or unusable (with a RuntimeWarning)."""
    if os.environ.get("TRITONPLUG_CACHE", "1").strip().lower() in _DISABLED:
        return None
    raw = os.environ.get("TRITONPLUG_CACHE_MAX_BYTES", "").strip()
    try:
        max_bytes = int(raw) if raw else 1 << 30
    except ValueError:
        max_bytes = -1
    if max_bytes < 0:
        raise ValueError(f"TRITONPLUG_CACHE_MAX_BYTES must be a non-negative integer, got {raw!r}")
    try:
        return DiskCache(default_directory(), max_bytes)
    except CacheDirError as exc:
        warnings.warn(f"tritonplug: not using the kernel cache: {exc}", RuntimeWarning, stacklevel=2)
        return None
