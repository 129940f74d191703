"""The on-disk cache of compiled kernels, shared by every process of the user on the machine.

One file per entry, ``<dir>/entries/<key[:2]>/<key>.bin``, published with ``os.replace`` so a
reader sees either nothing or a whole entry; its bytes are :mod:`tritonplug.cache.entries`' (checksummed, signed
when a fleet key is set, never pickled). An entry that is damaged is removed and counts as a miss; one the fleet
key refuses (unsigned, signed by an unknown key, a bad signature) is never returned: it is warned about once per
key, naming its file and why, removed, and the kernel is compiled again and written over it.

A file's mtime is its LRU clock: a hit bumps it, and eviction removes the oldest first. Beside
``entries/`` live ``lock`` (the cache-wide lock for eviction), ``size`` (the running total that spares
most puts a scan) and ``locks/<key[:2]>/<key>.lock`` (per-key locks for single-flight compiles). A writer
first writes ``entries/<key[:2]>/.<key>.<pid>.<random>.tmp``.

Healing: only regular files count as entries. A non-file at an entry or lock path (a directory, a
fifo, a symlink...) is removed when a ``get``, ``put`` or lock meets it, and every scan (eviction,
``prune``, ``clear``) removes such damage, unknown names and the temp files of dead writers, skips what
it cannot remove and keeps evicting until the total is within the bound. ``clear`` also removes the
per-key lock files nobody holds. The directory, ``entries/``, ``locks/`` and their buckets must be the
user's own and not writable by group or others, and no parent may be world-writable without the sticky
bit (:class:`UnsafeCacheDir`). ``entries/`` and its buckets are opened without following links: a link there is
refused (warned once, removed, a miss), never followed. File-system details live in :mod:`tritonplug.cache.files`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import filelock

from tritonplug import settings
from tritonplug.cache import files as cache_fs
from tritonplug.cache import signing
from tritonplug.cache.entries import MAGIC, EntryRefused, decode_entry, encode_entry
from tritonplug.cache.files import CacheDirError, UnsafeCacheDir
from tritonplug.cache.refusals import Refusals
from tritonplug.calls.user_warnings import warn
from tritonplug.records import Binary

log = logging.getLogger("tritonplug.cache.disk")

_LOW_WATER = 0.9  # a put that finds the cache full evicts down to 90%, so the next puts need no scan
_EVICT_LOCK_TIMEOUT_S = 30.0  # a put gives up evicting (the next put retries) rather than hang


__all__ = ["MAGIC", "CacheDirError", "CacheStats", "DiskCache", "UnsafeCacheDir", "cache_from_env",
           "default_directory", "open_cache_from_env"]


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
        self.refusals = Refusals()
        #: What happens after an entry is refused, for its warning (the tuning store's records are tuned, not compiled).
        self.remade = "the kernel is compiled again and written over it"
        self._first_put = True
        #: Called with (path, error) for a damaged entry ``get`` removes (the tuning store warns: a lost record
        #: means tuning again, where a lost kernel is only compiled again).
        self.on_damaged: Callable[[Path, Exception], None] | None = None
        # One lock object per cache: re-entrant in a thread, exclusive between threads and processes.
        self._lock = filelock.FileLock(self.directory / "lock", mode=0o600)
        cache_fs.check_ancestors(self.directory)
        try:
            cache_fs.makedirs(self.directory)
        except OSError as exc:
            why = cache_fs.dangling(self.directory) or exc
            raise CacheDirError(f"cannot create the cache directory {self.directory}: {why}") from exc
        cache_fs.check_safe(self.directory)

    def _path(self, key: str) -> Path:
        if not isinstance(key, str) or not cache_fs.KEY.fullmatch(key):
            raise ValueError(f"key must be a lower-case hex digest of 16 to 128 characters, got {key!r}")
        return self.directory / "entries" / key[:2] / f"{key}.bin"

    def get(self, key: str) -> Binary | None:
        """The entry for ``key``, or ``None``; a damaged or refused entry is removed and counts as a miss."""
        return (self.get_entry(key) or (None,))[0]

    def get_entry(self, key: str) -> tuple[Binary, bytes] | None:
        """The entry for ``key`` and its bytes as stored (signature included), or ``None`` (see :meth:`get`)."""
        path = self._path(key)
        keys = signing.fleet_keys()  # a bad key file raises here, naming its variable, before anything is read
        try:
            fd = cache_fs.open_entry_dir(self.directory, key[:2], create=False)
        except cache_fs.Linked as exc:
            self._refuse_link(exc)
            return None
        except OSError as exc:
            log.debug("cannot open the bucket of %s: %s", key[:12], exc)
            return None
        found = None if fd is None else self._read(path, fd)
        if fd is None or found is None:
            log.debug("miss %s", key[:12])
            if fd is not None:
                os.close(fd)
            return None
        try:
            data, inode = found
            try:
                binary = decode_entry(key, data, keys)
            except (ValueError, KeyError, TypeError) as exc:
                self._drop(path, fd, inode, exc, keys)
                return None
            with contextlib.suppress(OSError):
                os.utime(path.name, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)
        log.debug("hit %s (%s, %d bytes)", key[:12], binary.kernel_name, len(data))
        return binary, data

    def _read(self, path: Path, fd: int) -> tuple[bytes, int] | None:
        """An entry file's bytes and inode (``fd``: its bucket). A non-file there is removed; a link to something is
        also named (:meth:`_refuse_link`), a dangling one is damage like the rest."""
        try:
            return cache_fs.read_regular_file(path.name, fd, refuse_links=True)
        except cache_fs.Linked:
            try:
                os.stat(path.name, dir_fd=fd)  # where the link leads (never opened)
            except OSError:
                cache_fs.remove_non_file(path.name, fd)  # dangling: damage, healed as the rest
                return None
            self._refuse_link(cache_fs.Linked(path, "an entry file"))
            return None

    def _drop(self, path: Path, fd: int, inode: int, exc: Exception, keys: signing.FleetKeys) -> None:
        """Remove an entry that did not decode (unless another process just published a good one there): damage is
        logged (and reported to ``on_damaged``); with a fleet key set, any entry refused is warned once per key."""
        if isinstance(exc, EntryRefused) or keys.signing:
            self.refusals.entry(path.stem, str(path), exc if isinstance(exc, EntryRefused) else f"damaged ({exc})",
                                self.remade)
        else:
            log.info("removing damaged cache entry %s: %s", path, exc)
            if self.on_damaged is not None:
                self.on_damaged(path, exc)
        with contextlib.suppress(OSError):
            if os.stat(path.name, dir_fd=fd, follow_symlinks=False).st_ino == inode:
                os.unlink(path.name, dir_fd=fd)

    def _refuse_link(self, exc: cache_fs.Linked) -> None:
        """A link where ``entries/``, a bucket or an entry file belongs: never followed; named once, removed (the link
        itself), and the next put makes a directory (or an entry) there."""
        self.refusals.link(str(exc), str(self.directory))
        cache_fs.remove_non_file(exc.path)

    def put(self, key: str, binary: Binary) -> bool:
        """Store ``binary`` under ``key`` (signed if a fleet key is set); ``False`` if not written (too big...)."""
        return self.put_entry(key, encode_entry(key, binary), checked=True)

    def put_entry(self, key: str, blob: bytes, checked: bool = False) -> bool:
        """Store an entry's bytes as they are (a remote hit keeps its signature), checked again first unless
        ``checked``; ``False`` if not written (refused, damaged, too big, or the disk refused)."""
        path = self._path(key)
        if not checked:
            try:
                decode_entry(key, blob)
            except (ValueError, KeyError, TypeError) as exc:
                log.info("not caching %s: %s", key[:12], exc)
                return False
        if len(blob) > self.max_bytes:
            log.info("not caching %s: %d bytes exceed the bound of %d", key[:12], len(blob), self.max_bytes)
            return False
        try:
            self._publish(path, key, blob)
        except cache_fs.Linked as exc:
            self._refuse_link(exc)
            return False
        except OSError as exc:
            self._warn_once(f"cannot write to the kernel cache at {self.directory} ({exc}); "
                            f"compiled kernels will not be cached")
            return False
        log.debug("put %s (%d bytes)", key[:12], len(blob))
        try:
            self._account(len(blob), path)
        except OSError as exc:  # includes filelock.Timeout: the next put evicts instead
            log.info("skipped eviction after put: %s", exc)
        return True

    def _publish(self, path: Path, key: str, blob: bytes) -> None:
        """Write ``blob`` to a temp file in the entry's bucket and rename it over the entry, all relative to the
        bucket's descriptor (opened without following links)."""
        fd = cache_fs.open_entry_dir(self.directory, key[:2], create=True)
        if fd is None:
            raise OSError(errno.ENOENT, "cannot create the bucket", str(path.parent))
        tmp, published = cache_fs.temp_name(key), False
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | cache_fs.NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                          0o600, dir_fd=fd)
            with os.fdopen(out, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
            except IsADirectoryError:  # a directory where the entry belongs: remove it, publish again
                if not cache_fs.remove_non_file(path.name, fd):
                    raise
                os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
            published = True
        finally:
            if not published:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
            os.close(fd)

    def _account(self, size: int, written: Path) -> None:
        """Add a new entry to the ledger (``<dir>/size``); scan and evict only when it says we may be over, never
        the entry just ``written`` (one over the low-water mark would go at once, after ``put`` said written).
        The ledger, read and written under the cache-wide lock, may only overstate the total (a key written
        twice counts twice), which just brings the next scan forward. A writer that died between publishing
        and accounting leaves it short; each DiskCache scans on its first put to correct that."""
        with self._cache_lock():
            total = None if self._first_put else _read_int(self.directory / "size")
            self._first_put = False
            if total is None or total + size > self.max_bytes:
                self._evict(int(self.max_bytes * _LOW_WATER), keep=str(written))
            else:
                cache_fs.write_small_file(self.directory / "size", str(total + size))

    @contextlib.contextmanager
    def _cache_lock(self) -> Iterator[None]:
        """The cache-wide lock; a non-file at its path (damage since we started) is removed first."""
        cache_fs.remove_non_file(self.directory / "lock")
        with self._lock.acquire(timeout=_EVICT_LOCK_TIMEOUT_S):
            yield

    def key_lock(self, key: str) -> contextlib.AbstractContextManager:
        """An inter-process lock for ``key``: hold it while compiling so one process compiles, others wait.

        A lock that cannot be created (read-only cache) degrades to no lock, with the once-only warning.
        """
        self._path(key)  # validates the key
        return self._key_lock(self.directory / "locks" / key[:2] / f"{key}.lock")

    @contextlib.contextmanager
    def _key_lock(self, path: Path) -> Iterator[None]:
        lock, held = filelock.FileLock(path, mode=0o600), True
        try:
            cache_fs.makedirs(path.parent)
            cache_fs.remove_non_file(path)  # a directory, fifo or symlink there is damage (one lstat per miss)
            lock.acquire()
        except OSError as exc:
            self._warn_once(f"cannot lock {path} in the kernel cache at {self.directory} ({exc})")
            held = False
        try:
            yield
        finally:
            if held:
                lock.release()

    def stats(self) -> CacheStats:
        entries = cache_fs.scan(self.directory).entries
        return CacheStats(str(self.directory), len(entries), sum(size for _, size, _ in entries), self.max_bytes)

    def clear(self) -> int:
        """Remove every entry, every damaged or unknown item, the temp files of dead writers and the per-key
        lock files nobody holds; the number of entries removed. Raises :class:`CacheDirError` (after
        removing what it could) if something could not be removed, e.g. in a read-only cache."""
        result = self._locked_evict(-1, "clear")  # below 0, so an empty (damaged) entry file goes too
        if result.failed:
            raise CacheDirError(f"could not clear the kernel cache at {self.directory}: {result.describe_failures()}")
        return result.removed

    def prune(self, max_bytes: int | None = None) -> int:
        """Evict least-recently-used entries until they total ``<= max_bytes`` (default: the bound), and remove
        damage and dead writers' temp files; the number of entries removed. Raises :class:`CacheDirError`
        if the entries could not be brought within ``max_bytes``."""
        bound = self.max_bytes if max_bytes is None else max_bytes
        result = self._locked_evict(bound, "prune")
        if result.total > bound:
            raise CacheDirError(f"could not prune the kernel cache at {self.directory} to {bound} bytes "
                                f"({result.total} remain): {result.describe_failures()}")
        return result.removed

    def _locked_evict(self, max_bytes: int, action: str) -> _Eviction:
        """``_evict`` for ``clear`` and ``prune``, which need a writable cache even when there is nothing to do."""
        try:
            with self._cache_lock():
                cache_fs.probe_writable(self.directory / "entries")
                return self._evict(max_bytes, locks=action == "clear")
        except filelock.Timeout as exc:
            raise CacheDirError(f"cannot {action} the kernel cache at {self.directory}: another process has "
                                f"held its lock for {_EVICT_LOCK_TIMEOUT_S:.0f} s") from exc
        except OSError as exc:
            read_only = " it is read-only" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else ""
            raise CacheDirError(f"cannot {action} the kernel cache at {self.directory}:{read_only} ({exc})") from exc

    def _evict(self, max_bytes: int, locks: bool = False, keep: str | None = None) -> _Eviction:
        """Remove damage and dead writers' temp files, then the oldest entries but ``keep`` until the rest fit in
        ``max_bytes``, skipping what cannot be removed; with ``locks``, also unheld lock files. Needs the lock."""
        found = cache_fs.scan(self.directory)
        result = _Eviction(total=sum(size for _, size, _ in found.entries))
        for path in found.junk:
            result.note(path, cache_fs.remove_any(path))
        now = time.time()
        for path, mtime in found.temps:  # a live writer's temp file is left to it
            if cache_fs.is_orphaned_temp(path, mtime, now):
                result.note(path, cache_fs.remove_any(path))
        result.failures.extend(found.unreadable)
        for path, size, _ in sorted(found.entries, key=lambda e: e[2]):
            if result.total <= max_bytes:
                break
            if path == keep:
                continue
            try:
                os.unlink(path)
                result.removed += 1
            except FileNotFoundError:
                pass  # another process evicted it
            except OSError as exc:
                log.info("cannot evict %s: %s", path, exc)
                result.failures.append(path)
                continue
            result.total -= size
        if locks:
            found_locks = cache_fs.scan(self.directory, locks=True)
            for path in found_locks.junk:
                result.note(path, cache_fs.remove_any(path))
            for path in found_locks.locks:
                result.note(path, cache_fs.remove_unheld_lock(path) != "failed")
        if result.removed:
            log.info("evicted %d entries from %s; %d bytes remain", result.removed, self.directory, result.total)
        with contextlib.suppress(OSError):
            cache_fs.write_small_file(self.directory / "size", str(result.total))
        return result

    def _warn_once(self, message: str) -> None:
        log.info("%s", message)
        if not self._warned:
            self._warned = True
            warn(f"tritonplug: {message}")


@dataclass
class _Eviction:
    total: int  # bytes of entries left
    removed: int = 0  # entries removed
    failures: list[str] = field(default_factory=list)  # paths that could not be removed (or listed)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def note(self, path: str, gone: bool) -> None:
        if not gone:
            self.failures.append(path)

    def describe_failures(self) -> str:
        if not self.failures:
            return "nothing failed"
        shown = ", ".join(self.failures[:3]) + (f" and {len(self.failures) - 3} more" if len(self.failures) > 3 else "")
        return f"{len(self.failures)} item(s) could not be removed (is it read-only?): {shown}"


def _read_int(path: Path) -> int | None:
    found = cache_fs.read_regular_file(path)
    try:
        return None if found is None else int(found[0])
    except ValueError:
        return None


def default_directory() -> Path:
    """``$TRITONPLUG_CACHE_DIR``, else ``$XDG_CACHE_HOME/tritonplug``, else ``~/.cache/tritonplug``."""
    return settings.CACHE_DIR.get()


def open_cache_from_env() -> DiskCache | None:
    """The cache the environment asks for; ``None`` when disabled, :class:`CacheDirError` when unusable."""
    if not settings.CACHE.get():
        return None
    return DiskCache(default_directory(), settings.CACHE_MAX_BYTES.get())


def cache_from_env() -> DiskCache | None:
    """The cache the environment asks for, or ``None`` when disabled or unusable (with a RuntimeWarning)."""
    try:
        return open_cache_from_env()
    except CacheDirError as exc:
        warn(f"tritonplug: not using the kernel cache: {exc}")
        return None
