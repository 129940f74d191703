"""The disk cache heals damage: non-files at entry, lock and ledger paths, unknown items, stale temps and
locks; eviction, prune and clear never crash on them and keep the bound; unsafe permissions are refused."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from cache_helpers import (
    NON_FILES,
    entry_bytes,
    entry_path,
    key,
    lock_path,
    make_binary,
    make_read_only,
    make_writable,
    plant,
)

from tritonplug.cache import files as cache_fs
from tritonplug.cache.disk import DiskCache, UnsafeCacheDir, cache_from_env


@pytest.fixture
def cache(tmp_path: Path) -> DiskCache:
    return DiskCache(tmp_path / "cache")


def get_within(cache: DiskCache, k: str, seconds: float = 10.0):
    """``cache.get(k)``, failing the test (instead of hanging it) if it blocks, as an open of a fifo would."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(cache.get(k)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"get blocked for {seconds} s"
    return result[0]


# --- a non-file at an entry path ------------------------------------------------------------------

@pytest.mark.parametrize("kind", NON_FILES)
def test_a_non_file_at_an_entry_path_is_a_miss_is_never_counted_and_is_rewritten(cache: DiskCache, tmp_path: Path,
                                                                                 kind: str) -> None:
    k = key(kind)
    outside = tmp_path / "outside.bin"  # a well-formed entry for k, but not in the cache: never trusted via a link
    DiskCache(tmp_path / "other").put(k, make_binary(7, 100))
    outside.write_bytes(entry_path(tmp_path / "other", k).read_bytes())
    plant(entry_path(cache, k), kind, elsewhere=outside)

    assert cache.stats().entries == 0 and cache.stats().total_bytes == 0
    assert get_within(cache, k) is None
    assert not os.path.lexists(entry_path(cache, k)), "the get removed the non-file"
    assert cache.put(k, make_binary(1, 100)) is True
    assert entry_path(cache, k).is_file() and not entry_path(cache, k).is_symlink()
    assert cache.get(k) == make_binary(1, 100)
    assert cache.stats().entries == 1
    assert outside.exists(), "the symlink's target outside the cache is left alone"


@pytest.mark.parametrize("kind", ["empty directory", "directory tree"])
def test_a_put_replaces_a_directory_without_a_get_first(cache: DiskCache, kind: str) -> None:
    k = key(kind)
    plant(entry_path(cache, k), kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.put(k, make_binary(2, 100)) is True
    assert cache.get(k) == make_binary(2, 100)


@pytest.mark.parametrize("kind", ["empty directory", "fifo", "dangling symlink"])
def test_a_non_file_at_a_lock_path_is_replaced_by_a_working_lock(cache: DiskCache, kind: str) -> None:
    k = key(kind)
    plant(lock_path(cache, k), kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the lock works: no "cannot lock" warning
        with cache.key_lock(k):
            assert lock_path(cache, k).is_file() and not lock_path(cache, k).is_symlink()
            assert cache_fs.remove_unheld_lock(str(lock_path(cache, k))) == "held"


@pytest.mark.parametrize("name", ["lock", "size"])
@pytest.mark.parametrize("kind", ["empty directory", "directory tree", "fifo"])
def test_a_non_file_at_the_cache_lock_or_ledger_is_healed(tmp_path: Path, name: str, kind: str) -> None:
    directory = tmp_path / "cache"
    plant(directory / name, kind)
    directory.chmod(0o700)
    cache = DiskCache(directory, max_bytes=1500)
    for tag in range(6):
        assert cache.put(key(tag), make_binary(tag, 400)) is True
    assert (directory / name).is_file()
    assert entry_bytes(directory) <= 1500 and cache.stats().entries >= 2
    cache.clear()
    assert cache.stats().entries == 0


# --- eviction, prune and clear over damage --------------------------------------------------------

def plant_damage(directory: Path, tags: range) -> list[Path]:
    """Every kind of non-file at entry paths, plus unknown names and a file where a bucket belongs."""
    planted = []
    for i, tag in enumerate(tags):
        path = entry_path(directory, key(f"damage-{tag}"))
        plant(path, NON_FILES[i % 4])  # directories, fifos and sockets
        planted.append(path)
    stray = directory / "entries" / "zz"
    stray.write_bytes(b"not a bucket")
    unknown = entry_path(directory, key("x")).with_name("notes.txt")
    unknown.parent.mkdir(parents=True, exist_ok=True)
    unknown.write_bytes(b"?")
    return [*planted, stray, unknown]


def test_in_process_eviction_keeps_a_300kb_bound_over_damaged_entries(tmp_path: Path) -> None:
    bound = 300_000
    directory = tmp_path / "cache"
    cache = DiskCache(directory, max_bytes=bound)
    planted = plant_damage(directory, range(24))
    for tag in range(120):  # ~1.2 MB offered
        assert cache.put(key(tag), make_binary(tag, 10_000)) is True
        assert entry_bytes(directory) <= bound + 10_500  # at most the entry just published is over, until accounted
    assert entry_bytes(directory) <= bound
    assert cache.stats().total_bytes <= bound
    assert cache.get(key(119)) == make_binary(119, 10_000)
    assert not any(os.path.lexists(p) for p in planted), "eviction scans removed the damage"


@pytest.mark.parametrize("action", ["prune", "clear"])
def test_prune_and_clear_remove_damage_instead_of_crashing(cache: DiskCache, action: str) -> None:
    for tag in range(5):
        cache.put(key(tag), make_binary(tag, 1000))
    planted = plant_damage(cache.directory, range(8))
    two_entries = 2 * entry_path(cache, key(0)).stat().st_size
    removed = cache.prune(two_entries) if action == "prune" else cache.clear()
    assert removed == (3 if action == "prune" else 5)
    assert not any(os.path.lexists(p) for p in planted)
    assert cache.stats().entries == (2 if action == "prune" else 0)
    assert cache.put(key("after"), make_binary(9, 100)) and cache.get(key("after")) == make_binary(9, 100)


def exited_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_clear_removes_unheld_lock_files_and_dead_writers_temp_files(cache: DiskCache) -> None:
    keys = [key(f"lock-{i}") for i in range(4)]
    for k in keys:
        with cache.key_lock(k):
            cache.put(k, make_binary(1, 100))
    bucket = entry_path(cache, keys[0]).parent
    dead = bucket / f".{keys[0]}.{exited_pid()}.0badf00d.tmp"
    unnamed = bucket / "leftover.tmp"
    live = bucket / f".{keys[1]}.{os.getpid()}.cafebabe.tmp"
    for path in (dead, unnamed, live):
        path.write_bytes(b"partial")
    plant(lock_path(cache, key("odd")), "empty directory")
    assert len(list((cache.directory / "locks").rglob("*.lock"))) == 5

    held = keys[2]
    with cache.key_lock(held):
        assert cache.clear() == 4
        assert [p.name for p in (cache.directory / "locks").rglob("*.lock")] == [f"{held}.lock"], \
            "a lock held by a compile in progress stays"
    assert not dead.exists() and not unnamed.exists()
    assert live.exists(), "a young temp file of a running process may be a put in progress"
    cache.clear()
    assert list((cache.directory / "locks").rglob("*.lock")) == []


def test_a_lock_removed_by_clear_still_serialises_processes_that_opened_it(cache: DiskCache) -> None:
    """clear unlinks a lock file only while holding it; whoever opened the old file retries on a new one."""
    k = key("serial")
    with cache.key_lock(k):
        pass
    assert cache.clear() == 0 and not lock_path(cache, k).exists()
    with cache.key_lock(k):
        assert cache_fs.remove_unheld_lock(str(lock_path(cache, k))) == "held"
        assert lock_path(cache, k).exists()


def run_obeying_file_modes(code: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a Python child that has dropped its capabilities (so root too obeys file modes)."""
    prologue = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                "from cache_helpers import obey_file_modes; obey_file_modes()\n")
    return subprocess.run([sys.executable, "-c", prologue + code, *args], capture_output=True, text=True, timeout=120)


def test_an_unlistable_bucket_of_ours_is_given_its_mode_back(cache: DiskCache) -> None:
    k = key("hidden")
    cache.put(k, make_binary(3, 100))
    bucket = entry_path(cache, k).parent
    bucket.chmod(0o000)
    done = run_obeying_file_modes("from tritonplug.cache.disk import DiskCache; c = DiskCache(sys.argv[1]); "
                                  "print(c.prune(0), c.stats().entries)", str(cache.directory))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0"]
    assert oct(bucket.stat().st_mode & 0o777) == "0o700" and not entry_path(cache, k).exists()


# --- unsafe permissions ---------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["entries", "locks", "entries/ab", "locks/cd"])
@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o720])
def test_a_subdirectory_writable_by_group_or_others_is_refused_with_the_fix(tmp_path: Path, where: str,
                                                                            mode: int) -> None:
    directory = tmp_path / "cache"
    DiskCache(directory)
    sub = directory / where
    sub.mkdir(parents=True, exist_ok=True)
    sub.chmod(mode)
    with pytest.raises(UnsafeCacheDir, match=rf"{sub} in the cache directory .* writable by group or others "
                                             rf"\(mode {mode:#o}\); `chmod go-w {sub}`"):
        DiskCache(directory)
    sub.chmod(0o700)
    DiskCache(directory).put(key(1), make_binary(1, 10))


@pytest.mark.parametrize("depth", [1, 2])
def test_a_world_writable_parent_without_the_sticky_bit_is_refused(tmp_path: Path, depth: int) -> None:
    parent = tmp_path / "shared"
    directory = parent / "sub" / "cache" if depth == 2 else parent / "cache"
    parent.mkdir()
    parent.chmod(0o777)
    with pytest.raises(UnsafeCacheDir, match=rf"{parent}, a parent of the cache directory {directory}, is writable "
                                             rf"by everyone and has no sticky bit.*`chmod \+t {parent}`"):
        DiskCache(directory)
    assert not (parent / "cache").exists() and not (parent / "sub").exists(), "nothing created in it"
    parent.chmod(0o1777)  # sticky, like /tmp: others cannot rename what is ours
    DiskCache(directory).put(key(1), make_binary(1, 10))


def test_an_unsafe_subdirectory_makes_cache_from_env_warn_at_the_callers_line(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "cache"
    DiskCache(directory)
    (directory / "entries").mkdir(mode=0o777)
    (directory / "entries").chmod(0o777)
    monkeypatch.setenv("TRITONPLUG_CACHE_DIR", str(directory))
    monkeypatch.delenv("TRITONPLUG_CACHE", raising=False)
    with pytest.warns(RuntimeWarning, match="not using the kernel cache: .*chmod go-w") as caught:
        assert cache_from_env() is None
    assert [w.filename for w in caught] == [__file__]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a directory away needs root")
def test_a_bucket_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    DiskCache(directory).put(key(1), make_binary(1, 10))
    bucket = entry_path(directory, key(1)).parent
    os.chown(bucket, 65534, 65534)
    with pytest.raises(UnsafeCacheDir, match=rf"{bucket} .* is owned by uid 65534.*`chown -R"):
        DiskCache(directory)


# --- warnings name the user's line ----------------------------------------------------------------

def test_a_cache_warning_names_the_callers_line(cache: DiskCache) -> None:
    k = key("blocked")
    entry_path(cache, k).parent.parent.mkdir(parents=True, exist_ok=True)
    entry_path(cache, k).parent.write_bytes(b"")  # a file where the bucket belongs: the write fails
    with pytest.warns(RuntimeWarning, match="cannot write to the kernel cache") as caught:
        line = sys._getframe().f_lineno + 1
        assert cache.put(k, make_binary(1, 10)) is False
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def test_prune_that_cannot_reach_the_bound_raises_a_clear_error(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    cache = DiskCache(directory)
    cache.put(key(1), make_binary(1, 1000))
    cache.put(key(2), make_binary(2, 1000))
    stuck = entry_path(cache, key(1)).parent
    stuck.chmod(0o500)  # one bucket read-only: its entry cannot be evicted, the other can
    try:
        done = run_obeying_file_modes("from tritonplug.cache.disk import DiskCache, CacheDirError\n"
                                      "try:\n    DiskCache(sys.argv[1]).prune(10)\n"
                                      "except CacheDirError as e:\n    print(e)", str(directory))
    finally:
        stuck.chmod(0o700)
    assert done.returncode == 0, done.stderr
    assert f"could not prune the kernel cache at {directory} to 10 bytes" in done.stdout
    assert f"1 item(s) could not be removed (is it read-only?): {entry_path(cache, key(1))}" in done.stdout
    assert cache.get(key(2)) is None and cache.get(key(1)) == make_binary(1, 1000), "it evicted what it could"
    assert cache.prune(10) == 1 and cache.stats().entries == 0


def test_clear_and_prune_of_a_read_only_cache_raise_even_with_nothing_to_remove(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    DiskCache(directory).put(key(1), make_binary(1, 1000))
    make_read_only(directory)
    try:
        done = run_obeying_file_modes("from tritonplug.cache.disk import DiskCache, CacheDirError\n"
                                      "for action in ('clear', 'prune'):\n"
                                      "    try:\n        getattr(DiskCache(sys.argv[1]), action)()\n"
                                      "    except CacheDirError as e:\n        print(e)", str(directory))
    finally:
        make_writable(directory)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"cannot clear the kernel cache at {directory}",
                                                      f"cannot prune the kernel cache at {directory}"]
    assert all("it is read-only" in line for line in lines)
