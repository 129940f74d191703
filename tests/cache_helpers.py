"""Shared by the cache fault tests: checkable binaries, damage to plant, and a process that obeys file modes."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import socket
from pathlib import Path

from tritonplug.cache.disk import DiskCache
from tritonplug.records import Binary


def key(tag: object) -> str:
    return hashlib.sha256(str(tag).encode()).hexdigest()


def make_binary(tag: int, size: int) -> Binary:
    """A binary whose contents can be checked against its own metadata (so torn writes show)."""
    return Binary(kernel_name=f"kernel_{tag:03d}", format="cubin",
                  images={"cubin": bytes([tag % 256]) * size, "ptx": f"// ptx {tag:03d}\n".encode()},
                  metadata={"tag": tag, "size": size})


def is_consistent(binary: Binary) -> bool:
    return binary == make_binary(binary.metadata["tag"], binary.metadata["size"])


def entry_path(cache: DiskCache | Path, k: str) -> Path:
    directory = cache.directory if isinstance(cache, DiskCache) else cache
    return directory / "entries" / k[:2] / f"{k}.bin"


def lock_path(cache: DiskCache | Path, k: str) -> Path:
    directory = cache.directory if isinstance(cache, DiskCache) else cache
    return directory / "locks" / k[:2] / f"{k}.lock"


def entry_bytes(directory: Path) -> int:
    """Bytes of the regular entry files, counted independently of the cache's own scan."""
    return sum(p.stat().st_size for p in (directory / "entries").glob("*/*.bin") if p.is_file() and not p.is_symlink())


def plant(path: Path, kind: str, elsewhere: Path | None = None) -> None:
    """Put a non-file of ``kind`` at ``path`` (its parent is created)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if kind == "empty directory":
        path.mkdir()
    elif kind == "directory tree":
        (path / "sub" / "deeper").mkdir(parents=True)
        (path / "sub" / "file.bin").write_bytes(b"x" * 5000)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as s, contextlib.chdir(path.parent):  # a short name: paths are long
            s.bind(path.name)
    elif kind == "dangling symlink":
        path.symlink_to(path.with_name("nowhere"))
    elif kind == "symlink to a valid entry":
        assert elsewhere is not None
        path.symlink_to(elsewhere)
    else:
        raise ValueError(kind)


NON_FILES = ["empty directory", "directory tree", "fifo", "socket", "dangling symlink", "symlink to a valid entry"]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def obey_file_modes() -> None:
    """Drop every capability of this process (Linux), so that even root obeys file modes: a directory of mode
    0500 is then read-only for it, as it is for any user. Call it only in a child process; for a process that
    is not root this changes nothing. Checks that it worked."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    if libc.capset(ctypes.byref(header), (_CapData * 2)()) != 0:
        raise OSError(ctypes.get_errno(), "capset failed: cannot drop capabilities")
    status = Path("/proc/self/status").read_text()
    assert "CapEff:\t0000000000000000" in status, status


def make_read_only(directory: Path) -> None:
    for path in [directory, *directory.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o500)


def make_writable(directory: Path) -> None:
    for path in [directory, *directory.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o700)


# --- processes for the fault suite (module-level, so multiprocessing's spawn can import them) -------

def hammer(directory: str, worker: int, rounds: int, max_bytes: int) -> list[str]:
    """Get and put 40 keys over and over; returns what went wrong (a torn read, an exception)."""
    from tritonplug.cache.disk import DiskCache

    problems: list[str] = []
    cache = DiskCache(directory, max_bytes)
    for i in range(rounds):
        tag = (i * 7 + worker) % 40
        try:
            found = cache.get(key(tag))
            if found is not None and not is_consistent(found):
                problems.append(f"torn entry for tag {tag}")
            cache.put(key(tag), make_binary(tag, 9_000 + 200 * worker))
        except Exception as exc:  # the point of the test: nothing may escape
            problems.append(f"{type(exc).__name__}: {exc}")
    return problems


def sabotage(directory: str, rounds: int) -> list[str]:
    """Plant non-files at the hammered keys' entry and lock paths, and clear or prune now and then."""
    from tritonplug.cache.disk import CacheDirError, DiskCache

    problems: list[str] = []
    kinds = ["empty directory", "directory tree", "fifo", "socket", "dangling symlink"]
    for i in range(rounds):
        tag = (i * 11) % 40
        path = (entry_path if i % 3 else lock_path)(Path(directory), key(tag))
        with contextlib.suppress(OSError):  # a writer published or healed it first
            if path.is_file() and not path.is_symlink():
                path.unlink()
            plant(path, kinds[i % len(kinds)])
        if i % 40 == 39:
            try:
                cache = DiskCache(directory, 300_000)
                cache.prune() if i % 80 == 79 else cache.clear()
            except CacheDirError:
                pass  # a race with a writer left something behind: reported, and fine here
            except Exception as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
    return problems


def put_on_a_full_disk(directory: str, max_bytes: int) -> dict:
    """Fill, then make every write fail with EFBIG as on a full disk (RLIMIT_FSIZE), then free the disk."""
    import resource
    import signal
    import warnings

    from tritonplug.cache.disk import DiskCache

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing us
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    cache = DiskCache(directory, max_bytes)
    before = [cache.put(key(tag), make_binary(tag, 10_000)) for tag in range(10)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))
        during = [cache.put(key(tag), make_binary(tag, 10_000)) for tag in range(10, 40)]
        hits_during = sum(cache.get(key(tag)) is not None for tag in range(10))
        pruned = cache.prune()
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    after = [cache.put(key(tag), make_binary(tag, 10_000)) for tag in range(40, 70)]
    return {"before": before, "during": during, "after": after, "hits_during": hits_during, "pruned": pruned,
            "warnings": [str(w.message) for w in caught], "got": cache.get(key(69)) == make_binary(69, 10_000)}


def put_until_killed(directory: str) -> None:
    from tritonplug.cache.disk import DiskCache

    cache = DiskCache(directory, 300_000)
    tag = 0
    while True:
        cache.put(key(1000 + tag % 50), make_binary(tag % 50, 200_000))
        tag += 1


def use_read_only_cache(directory: str, existing: str) -> dict:
    """In a child that obeys file modes: what puts, gets and locks do in a read-only cache."""
    import warnings

    from tritonplug.cache.disk import DiskCache

    obey_file_modes()
    cache = DiskCache(directory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        puts = [cache.put(key("new"), make_binary(2, 100)), cache.put(existing, make_binary(2, 100))]
        with cache.key_lock(key("new")):
            locked = True
        got = cache.get(existing)
    return {"puts": puts, "locked": locked, "got_existing": got == make_binary(1, 100),
            "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]}
