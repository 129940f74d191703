"""The disk cache's entry layer at its edges (``tritonplug/cache/disk.py``), each test written against a mutant that
the cache's own tests let through (issue 37, ``python tests/mutation.py disk_cache``, its fourth run). A real cache
directory (``tmp_path``), real files, no mocks."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

import pytest
from cache_helpers import entry_path, key, lock_path, make_binary

from tritonplug.cache import files as cache_fs
from tritonplug.cache.disk import DiskCache

K = key("disk-edges")


def test_a_put_refused_by_a_linked_bucket_says_it_was_not_written(tmp_path: Path) -> None:
    """The entry's bucket is a link to a directory elsewhere: never followed, so nothing is written there or here,
    and ``put`` answers False (its callers count what was cached); the link is removed for the next put."""
    cache = DiskCache(tmp_path / "cache")
    cache.put(key("first"), make_binary(1, 10))  # entries/ exists
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bucket = entry_path(cache, K).parent
    bucket.symlink_to(elsewhere, target_is_directory=True)
    with pytest.warns(RuntimeWarning, match="a symbolic link where the cache keeps a directory"):
        assert cache.put(K, make_binary(2, 10)) is False
    assert list(elsewhere.iterdir()) == [] and not bucket.is_symlink()
    assert cache.put(K, make_binary(2, 10)) is True and cache.get(K) == make_binary(2, 10)


def test_a_damaged_entry_is_reported_to_on_damaged_and_logged_not_warned_as_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Without a fleet key a damaged entry is damage, not a refusal: ``on_damaged`` hears of it (the health
    report counts it), it is logged at INFO and removed; no warning names it refused."""
    cache = DiskCache(tmp_path / "cache")
    cache.put(K, make_binary(3, 10))
    path = entry_path(cache, K)
    path.write_bytes(path.read_bytes()[:-5] + b"xxxxx")  # its checksum no longer holds
    heard: list[Path] = []
    cache.on_damaged = lambda where, exc: heard.append(where)
    with caplog.at_level(logging.INFO, logger="tritonplug"):
        assert cache.get(K) is None
    assert heard == [path] and not path.exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("removing damaged cache entry" in r.getMessage() for r in caplog.records)


def test_the_stats_a_caller_holds_cannot_be_changed(tmp_path: Path) -> None:
    stats = DiskCache(tmp_path / "cache").stats()
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.entries = 5  # type: ignore[misc]


def test_a_link_planted_at_the_writers_temp_name_is_never_written_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Someone who guessed a writer's temp name (made certain here: the name fixed) planted a link there to a file
    of theirs: the write is refused (``O_EXCL``, ``O_NOFOLLOW``), their file untouched, ``put`` False."""
    cache = DiskCache(tmp_path / "cache")
    cache.put(key("first"), make_binary(1, 10))  # entries/ exists
    bucket = entry_path(cache, K).parent
    bucket.mkdir(exist_ok=True)
    victim = tmp_path / "victim"
    victim.write_bytes(b"theirs")
    monkeypatch.setattr(cache_fs, "temp_name", lambda k: f".{k}.planted.tmp")
    (bucket / f".{K}.planted.tmp").symlink_to(victim)
    with pytest.warns(RuntimeWarning, match="cannot write to the kernel cache"):
        assert cache.put(K, make_binary(2, 10)) is False
    assert victim.read_bytes() == b"theirs" and cache.get(K) is None


def test_the_eviction_after_a_put_leaves_the_lock_files_alone(tmp_path: Path) -> None:
    """A put over the bound evicts entries, not the per-key lock files (only ``clear`` removes those nobody holds:
    a process about to take one would otherwise lock a file another then recreates)."""
    cache = DiskCache(tmp_path / "cache", max_bytes=2000)
    with cache.key_lock(key("compiling")):
        pass
    lock_file = lock_path(cache, key("compiling"))
    assert lock_file.exists()
    for tag in range(8):
        cache.put(key(tag), make_binary(tag, 300))
    assert cache.stats().total_bytes <= 2000  # evicted
    assert lock_file.exists()


def test_a_put_evicts_past_its_own_entry_when_others_look_newer(tmp_path: Path) -> None:
    """Entries whose mtimes lie after the new one (another host's clock on a shared cache, a touch): the eviction
    after the put passes over the entry just written, never evicted, and goes on to the others until the cache
    fits again."""
    probe = DiskCache(tmp_path / "probe")
    probe.put(K, make_binary(5, 300))
    size = entry_path(probe, K).stat().st_size  # every entry below: the same size
    bound = int(2.5 * size)
    cache = DiskCache(tmp_path / "cache", max_bytes=bound)
    for tag in ("a", "b"):
        cache.put(key(tag), make_binary(ord(tag), 300))
    future = time.time() + 3600
    for offset, tag in enumerate(("a", "b")):
        os.utime(entry_path(cache, key(tag)), (future + offset, future + offset))
    assert cache.put(K, make_binary(5, 300)) is True
    assert cache.stats().total_bytes <= bound
    assert entry_path(cache, K).exists() and not entry_path(cache, key("a")).exists()
