"""The disk cache's file-system layer at its edges (``tritonplug/cache/files.py``), each test written against a mutant
that the cache's own tests let through (issue 37): temp files a scan may remove, links never followed by a scan, the
safety checks' other branches. A real cache directory (``tmp_path``), real files and processes, no mocks."""

from __future__ import annotations

import logging
import multiprocessing
import os
import stat
import subprocess
from pathlib import Path

import pytest
from cache_helpers import entry_path, key, lock_path, make_binary, obey_file_modes

from tritonplug.cache import files as cache_fs
from tritonplug.cache.disk import CacheDirError, DiskCache, UnsafeCacheDir

SPAWN = multiprocessing.get_context("spawn")
K = key("temp")
NO_SUCH_PID = 1 << 30  # above any pid_max: never a running process


# --- whose temp file is it ------------------------------------------------------------------------

def test_asking_whether_a_writer_is_alive_never_signals_it() -> None:
    writer = subprocess.Popen(["sleep", "60"])
    try:
        assert cache_fs.is_orphaned_temp(f"/somewhere/.{K}.{writer.pid}.abcd.tmp", 1000.0, now=1000.0) is False
        with pytest.raises(subprocess.TimeoutExpired):  # the writer is still running
            writer.wait(timeout=0.5)
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.parametrize(("name", "orphaned"), [  # {k}: a key, {me}: this process (alive); ids the same in each worker
    (".{k}.{me}.abcd.tmp", False),
    (f".{{k}}.{NO_SUCH_PID}.abcd.tmp", True),
    (".{k}.0.abcd.tmp", True),  # pid 0 is no writer (os.kill(0, ...) would mean our own process group)
    (".{k}.12a.abcd.tmp", True),
    ("x{k}.{me}.abcd.tmp", True),  # no leading dot: not a writer's name
    (".{k}.{me}.tmp", True),
    (".{k}.{me}.ab.cd.tmp", True),
])
def test_a_temp_file_is_orphaned_unless_named_by_a_live_writer(name: str, orphaned: bool) -> None:
    path = f"/somewhere/{name.format(k=K, me=os.getpid())}"
    assert cache_fs.is_orphaned_temp(path, 1000.0, now=1000.0) is orphaned


def test_a_temp_file_is_orphaned_once_older_than_ten_minutes_whatever_its_name() -> None:
    live = f"/somewhere/.{K}.{os.getpid()}.abcd.tmp"
    assert cache_fs.is_orphaned_temp(live, 1000.0, now=1000.0 + 600) is False
    assert cache_fs.is_orphaned_temp(live, 1000.0, now=1000.0 + 600.5) is True
    assert cache_fs.is_orphaned_temp(live, 1000.0, now=1000.0 - 700) is False  # a clock that went back
    assert cache_fs.is_orphaned_temp(live, 0.0) is True  # now: the clock's


def _orphaned_as_nobody(name: str) -> bool:
    """In a child that is not root (nor may signal root's processes): is a temp file named by pid 1 orphaned?"""
    if os.getuid() == 0:
        os.setuid(65534)
    return cache_fs.is_orphaned_temp(name, 1000.0, now=1000.0)


def test_a_temp_file_named_by_another_users_live_process_is_left_alone() -> None:
    with SPAWN.Pool(1) as pool:
        assert pool.apply(_orphaned_as_nobody, (f"/somewhere/.{K}.1.abcd.tmp",)) is False


def test_prune_removes_a_directory_named_like_a_live_writers_temp_file(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache")
    cache.put(K, make_binary(1, 10))
    fake = entry_path(cache, K).parent / cache_fs.temp_name(K)  # this process's name, but not a regular file
    fake.mkdir()
    live = entry_path(cache, K).parent / cache_fs.temp_name(K)
    live.write_bytes(b"being written")
    cache.prune()
    assert not fake.exists() and live.exists()


# --- what a scan counts and removes ---------------------------------------------------------------

def test_a_scan_counts_only_entry_files_in_buckets_and_removes_the_rest(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache")
    assert cache.put(K, make_binary(1, 10))
    with cache.key_lock(K):  # makes locks/<bucket>/<key>.lock
        pass
    bucket, locks = entry_path(cache, K).parent, lock_path(cache, K).parent
    strays = [bucket / f"{K}.lock", locks / f"{K}.bin", bucket / "not-a-key.bin", bucket / f"{K}.bin.old"]
    for stray in strays:
        stray.write_bytes(b"x" * 100)
    found = cache_fs.scan(cache.directory)
    assert [p for p, _, _ in found.entries] == [str(entry_path(cache, K))]
    assert sorted(found.junk) == sorted(str(p) for p in strays if p.parent == bucket)
    assert cache_fs.scan(cache.directory, locks=True).junk == [str(locks / f"{K}.bin")]
    cache.clear()
    assert not any(p.exists() for p in strays)


def test_a_bucket_linked_elsewhere_is_removed_by_a_scan_never_followed(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{K}.bin").write_bytes(b"not the cache's")
    (cache.directory / "entries").mkdir(mode=0o700)
    entry_path(cache, K).parent.symlink_to(outside, target_is_directory=True)
    assert cache.stats().entries == 0
    assert cache.clear() == 0
    assert (outside / f"{K}.bin").read_bytes() == b"not the cache's"
    assert not os.path.lexists(entry_path(cache, K).parent)


# --- the safety checks ----------------------------------------------------------------------------

def test_a_group_writable_cache_directory_is_refused_with_chmod_700(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    directory.mkdir()
    directory.chmod(0o770)
    with pytest.raises(UnsafeCacheDir, match=rf"^cache directory {directory} is writable by group or others "
                                             rf"\(mode 0o770\); `chmod 700 {directory}` it to use it$"):
        DiskCache(directory)


def test_locks_are_checked_even_without_an_entries_directory(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    (directory / "locks").mkdir(parents=True, mode=0o700)
    (directory / "locks").chmod(0o777)
    with pytest.raises(UnsafeCacheDir, match="locks in the cache directory"):
        DiskCache(directory)


def test_a_stray_file_writable_by_others_in_entries_is_not_a_bucket(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    (directory / "entries").mkdir(parents=True, mode=0o700)
    (directory / "entries" / "ab").write_bytes(b"")
    (directory / "entries" / "ab").chmod(0o666)
    DiskCache(directory).clear()  # not refused: damage, which the scan removes
    assert not (directory / "entries" / "ab").exists()


def test_a_world_writable_grandparent_is_checked_when_the_parent_is_missing(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeCacheDir, match=f"{shared}, a parent"):
        DiskCache(shared / "missing" / "cache")


def test_a_cache_directory_that_is_a_file_or_a_link_to_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    for path in (tmp_path / "file", tmp_path / "link"):
        with pytest.raises(CacheDirError, match=rf"cannot create the cache directory {path}: \[Errno 17\]"):
            DiskCache(path)


def test_the_ledger_is_private(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache")
    cache.put(K, make_binary(1, 10))
    assert stat.S_IMODE((cache.directory / "size").stat().st_mode) == 0o600


def test_a_plain_miss_logs_only_the_miss(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = DiskCache(tmp_path / "cache")
    cache.put(K, make_binary(1, 10))
    other = next(k for k in map(key, range(1000)) if k[:2] == K[:2] and k != K)  # same bucket, no entry
    with caplog.at_level(logging.DEBUG, logger="tritonplug.cache.disk"):
        assert cache.get(other) is None
    assert caplog.messages == [f"miss {other[:12]}"]


# --- removing a lock file -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["missing", "unheld", "directory", "fifo"])
def test_a_lock_path_nobody_holds_is_removed_whatever_is_there(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"{K}.lock"
    if kind == "unheld":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    assert cache_fs.remove_unheld_lock(str(path)) == "removed"
    assert not os.path.lexists(path)


def test_a_held_lock_file_is_left_to_its_holder(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache")
    with cache.key_lock(K):
        assert cache_fs.remove_unheld_lock(str(lock_path(cache, K))) == "held"
        assert lock_path(cache, K).is_file()
    assert cache_fs.remove_unheld_lock(str(lock_path(cache, K))) == "removed"


def _remove_locks_obeying_file_modes(paths: list[str]) -> list[str]:
    """In a child that obeys file modes (even as root): ``remove_unheld_lock`` of each path."""
    obey_file_modes()
    return [cache_fs.remove_unheld_lock(path) for path in paths]


def test_a_lock_path_that_cannot_be_removed_or_examined_is_a_failure(tmp_path: Path) -> None:
    ro, dark = tmp_path / "ro", tmp_path / "dark"
    paths = [ro / f"{K}.lock", ro / f"{key('file')}.lock", dark / f"{K}.lock"]
    paths[0].mkdir(parents=True)  # a non-file whose removal the parent's mode refuses
    paths[1].write_bytes(b"")  # an unheld lock file, the same
    ro.chmod(0o500)
    dark.mkdir()
    paths[2].write_bytes(b"")
    dark.chmod(0o600)  # listable, but no lstat or open inside
    try:
        with SPAWN.Pool(1) as pool:
            assert pool.apply(_remove_locks_obeying_file_modes, ([str(p) for p in paths],)) == ["failed"] * 3
    finally:
        ro.chmod(0o700)
        dark.chmod(0o700)
    assert paths[0].is_dir() and paths[1].is_file() and paths[2].is_file()


@pytest.mark.parametrize("kind", ["dir", "symlink"])
def test_a_path_gone_before_its_removal_counts_as_removed(tmp_path: Path, kind: str) -> None:
    """Another process healed it between our ``lstat`` and our removal (the race ``files``' docstring names): it is
    gone, as the caller wanted, so ``remove_any`` answers True (the heal and the lock sweep then go on)."""
    path = tmp_path / "damage"
    path.mkdir() if kind == "dir" else path.symlink_to(tmp_path / "elsewhere")
    seen = os.lstat(path)
    path.rmdir() if kind == "dir" else path.unlink()
    assert cache_fs.remove_any(path, seen) is True


def _scan_obeying_file_modes(directory: str) -> tuple[list[str], int]:
    obey_file_modes()
    found = cache_fs.scan(Path(directory))
    return found.unreadable, len(found.entries)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a bucket another owner (whose mode we cannot restore) "
                                                "needs root")
def test_a_bucket_that_cannot_be_listed_or_given_back_its_modes_is_unreadable_and_the_scan_goes_on(
        tmp_path: Path) -> None:
    """Another user's bucket of mode 000 in our cache: neither listed nor chmod-ed by us, so a scan reports it
    unreadable and still counts the entries of the other buckets (a listing error must not end the walk)."""
    locked, fine = tmp_path / "entries" / "0a", tmp_path / "entries" / "0b"
    locked.mkdir(parents=True)
    fine.mkdir()
    (fine / f"{key('fine')}.bin").write_bytes(b"x")
    os.chown(locked, 65534, 65534)
    locked.chmod(0)
    with SPAWN.Pool(1) as pool:
        assert pool.apply(_scan_obeying_file_modes, (str(tmp_path),)) == ([str(locked)], 1)


@pytest.mark.parametrize("before", ["missing", "directory"])
def test_a_ledger_written_afresh_is_private(tmp_path: Path, before: str) -> None:
    """The ledger ``size`` gone (or a directory in its place, damage) when a put accounts: the file written anew
    is ``0o600`` whatever the umask lets through."""
    cache = DiskCache(tmp_path / "cache")
    cache.put(K, make_binary(1, 10))
    ledger = cache.directory / "size"
    ledger.unlink()
    if before == "directory":
        ledger.mkdir()
    old = os.umask(0)
    try:
        cache.put(key("second"), make_binary(2, 10))
    finally:
        os.umask(old)
    assert stat.S_IMODE(ledger.stat().st_mode) == 0o600


def test_an_item_removed_between_the_listing_and_its_stat_is_skipped_not_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket's first listed file removed by another process before the scan ``lstat`` s it: the scan passes over
    it and still counts the bucket's other entries (the race, made certain by removing it right after listing)."""
    bucket = tmp_path / "entries" / "0c"
    bucket.mkdir(parents=True)
    for name in ("a", "b", "c"):
        (bucket / f"{key(name)}.bin").write_bytes(b"x")
    real = os.scandir

    class Listing:
        def __init__(self, path):
            self.items = list(real(path))
            os.unlink(self.items[0].path)  # the other process, between our listing and our lstat

        def __enter__(self):
            return iter(self.items)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(cache_fs.os, "scandir", lambda path: Listing(path) if str(path) == str(bucket) else real(path))
    assert len(cache_fs.scan(tmp_path).entries) == 2


def test_a_small_file_written_over_a_non_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "size"
    path.mkdir()  # damage in its place: removed, then the file created
    old = os.umask(0)
    try:
        cache_fs.write_small_file(path, "12")
    finally:
        os.umask(old)
    assert path.read_text() == "12" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_ledger_that_is_a_link_is_healed_not_followed_or_raised(tmp_path: Path) -> None:
    """A symlink where the ledger ``size`` belongs (damage, or planted): a put neither reads through it nor fails;
    the link is removed and a regular ledger written, the linked file untouched."""
    cache = DiskCache(tmp_path / "cache")
    cache.put(K, make_binary(1, 10))
    target = tmp_path / "elsewhere"
    target.write_text("5")
    ledger = cache.directory / "size"
    ledger.unlink()
    ledger.symlink_to(target)
    assert cache.put(key("second"), make_binary(2, 10))
    assert not ledger.is_symlink() and ledger.is_file() and target.read_text() == "5"


def test_a_cache_directory_not_there_yet_is_safe_to_create(tmp_path: Path) -> None:
    """The checks run before the cache directory exists (a first use): nothing to refuse, it will be made 0700."""
    cache_fs.check_safe(tmp_path / "not-yet")
    assert not (tmp_path / "not-yet").exists()


def test_removing_the_non_file_at_a_path_where_nothing_is_removes_nothing(tmp_path: Path) -> None:
    assert cache_fs.remove_non_file(tmp_path / "nothing") is False
    (tmp_path / "file").write_bytes(b"x")
    assert cache_fs.remove_non_file(tmp_path / "file") is False and (tmp_path / "file").exists()
    (tmp_path / "dir").mkdir()
    assert cache_fs.remove_non_file(tmp_path / "dir") is True and not (tmp_path / "dir").exists()


def test_a_bucket_removed_before_the_scan_lists_it_is_unreadable_and_the_scan_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process removed a bucket between the scan's listing of ``entries/`` and its listing of the bucket
    (made certain by removing it at that moment): reported unreadable, the other buckets still counted."""
    gone, fine = tmp_path / "entries" / "0d", tmp_path / "entries" / "0e"
    gone.mkdir(parents=True)
    fine.mkdir()
    (fine / f"{key('kept')}.bin").write_bytes(b"x")
    real = os.scandir

    def scandir(path):
        if str(path) == str(gone):
            gone.rmdir()  # the other process
        return real(path)

    monkeypatch.setattr(cache_fs.os, "scandir", scandir)
    found = cache_fs.scan(tmp_path)
    assert found.unreadable == [str(gone)] and len(found.entries) == 1
