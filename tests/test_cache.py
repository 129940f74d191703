"""The disk cache: format, damage, eviction, degradation, safety and several processes at once."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import stat
import time
import warnings
from pathlib import Path

import pytest

from tritonplug.cache.disk import MAGIC, DiskCache
from tritonplug.records import Binary

SPAWN = multiprocessing.get_context("spawn")


def key(tag: object) -> str:
    return hashlib.sha256(str(tag).encode()).hexdigest()


def make_binary(tag: int, size: int) -> Binary:
    """A binary whose contents can be checked against its own metadata (so torn writes show)."""
    return Binary(kernel_name=f"kernel_{tag:03d}", format="cubin",
                  images={"cubin": bytes([tag % 256]) * size, "ptx": f"// ptx {tag:03d}\n".encode()},
                  metadata={"tag": tag, "size": size, "num_warps": 4, "cluster": [1, 1, 1]})


def is_consistent(binary: Binary) -> bool:
    tag, size = binary.metadata["tag"], binary.metadata["size"]
    return binary == make_binary(tag, size)


def entry_path(cache: DiskCache, k: str) -> Path:
    return cache.directory / "entries" / k[:2] / f"{k}.bin"


def temp_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.tmp"))


def set_age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.fixture
def cache(tmp_path: Path) -> DiskCache:
    return DiskCache(tmp_path / "cache")


# --- format and round trip ------------------------------------------------------------------------

def test_roundtrip(cache: DiskCache, caplog: pytest.LogCaptureFixture) -> None:
    k = key("roundtrip")
    binary = Binary(kernel_name="añadir_kernel", format="hsaco",
                    images={"hsaco": bytes(range(256)) * 40, "empty": b"", "asm": b"s_endpgm\n"},
                    metadata={"shared": 1024, "name": "ünïcode", "nested": {"a": [1, 2.5, None, True]}})
    with caplog.at_level(logging.DEBUG, logger="tritonplug.cache.disk"):
        assert cache.get(k) is None
        assert cache.put(k, binary) is True
        got = cache.get(k)
    assert got == binary
    assert isinstance(got.images["hsaco"], bytes)
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "miss" in messages and "put" in messages and "hit" in messages
    assert cache.stats().entries == 1
    assert cache.stats().total_bytes == entry_path(cache, k).stat().st_size


def test_file_format_is_magic_json_images_checksum(cache: DiskCache) -> None:
    k = key("format")
    cache.put(k, make_binary(7, 100))
    data = entry_path(cache, k).read_bytes()
    assert data.startswith(MAGIC)
    assert hashlib.sha256(data[:-32]).digest() == data[-32:]
    line_end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC):line_end])
    assert header["kernel_name"] == "kernel_007" and header["format"] == "cubin" and header["key"] == k
    payload = data[line_end + 1:-32]
    cubin = next(i for i in header["images"] if i["name"] == "cubin")
    assert payload[cubin["offset"]:cubin["offset"] + cubin["size"]] == bytes([7]) * 100


def test_miss(cache: DiskCache) -> None:
    assert cache.get(key("absent")) is None
    assert cache.stats().entries == 0


def test_modes_of_created_directories_and_files(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "a" / "b" / "c")
    for path in (tmp_path / "a", tmp_path / "a" / "b", cache.directory):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    k = key("modes")
    cache.put(k, make_binary(1, 10))
    assert stat.S_IMODE(entry_path(cache, k).parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(entry_path(cache, k).stat().st_mode) == 0o600


# --- damaged entries ------------------------------------------------------------------------------

@pytest.mark.parametrize("keep", [0, 10, 0.5, -1])
def test_truncated_entry_is_a_miss_and_is_rewritten(cache: DiskCache, keep: float) -> None:
    k, binary = key("truncated"), make_binary(3, 5000)
    cache.put(k, binary)
    path = entry_path(cache, k)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep) if isinstance(keep, float) else keep])
    assert cache.get(k) is None
    assert not path.exists()
    assert cache.put(k, binary)
    assert cache.get(k) == binary


@pytest.mark.parametrize("where", ["magic", "header", "payload", "checksum"])
def test_flipped_byte_is_a_miss(cache: DiskCache, where: str) -> None:
    k = key("flipped")
    cache.put(k, make_binary(5, 3000))
    path = entry_path(cache, k)
    data = bytearray(path.read_bytes())
    positions = {"magic": 3, "header": len(MAGIC) + 9, "payload": len(data) - 999, "checksum": len(data) - 1}
    position = positions[where]
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    assert cache.get(k) is None
    assert not path.exists()


@pytest.mark.parametrize("header", [b"{not json", b"[1, 2]", b'"text"',
                                    b'{"key": "%s", "payload_size": 4, "kernel_name": "k", "format": "f", '
                                    b'"metadata": {}, "images": [{"name": "x", "offset": 2, "size": 9}]}'])
def test_unparsable_entry_with_a_valid_checksum_is_a_miss(cache: DiskCache, header: bytes) -> None:
    k = key("unparsable")
    path = entry_path(cache, k)
    path.parent.mkdir(parents=True)
    body = MAGIC + header.replace(b"%s", k.encode()) + b"\nabcd"
    path.write_bytes(body + hashlib.sha256(body).digest())
    assert cache.get(k) is None
    assert not path.exists()


def test_entry_stored_under_another_key_is_a_miss(cache: DiskCache) -> None:
    a, b = key("a"), key("b")
    cache.put(a, make_binary(1, 100))
    entry_path(cache, b).parent.mkdir(parents=True, exist_ok=True)
    entry_path(cache, b).write_bytes(entry_path(cache, a).read_bytes())
    assert cache.get(b) is None
    assert cache.get(a) == make_binary(1, 100)


def test_orphaned_temp_file_is_ignored_by_get_and_removed_by_prune(cache: DiskCache) -> None:
    k = key("orphan")
    bucket = entry_path(cache, k).parent
    bucket.mkdir(parents=True)
    old = bucket / f".{k}.{os.getpid()}.deadbeef.tmp"
    fresh = bucket / f".{key('other')}.{os.getpid()}.cafebabe.tmp"
    dead_writer = bucket / f".{key('dead')}.{exited_pid()}.0badf00d.tmp"
    old.write_bytes(MAGIC + b"half an entry")
    fresh.write_bytes(b"a put in progress")
    dead_writer.write_bytes(b"a put whose process died")
    set_age(old, 11 * 60)
    assert cache.get(k) is None
    assert old.exists(), "get must not scan or clean up"
    assert cache.stats().entries == 0
    assert cache.prune() == 0
    assert not old.exists(), "a temp file older than 10 minutes is an orphan, whatever its name says"
    assert not dead_writer.exists(), "the process named in its name is gone"
    assert fresh.exists(), "a young temp file of a running process may be a put in progress"


def exited_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


# --- keys -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["", "abc", "A" * 64, "g" * 64, "a" * 15, "a" * 129, "../" + "a" * 32,
                                 "a" * 32 + "\n", "a" * 16 + "/x", 1234567890123456789])
@pytest.mark.parametrize("method", ["get", "put", "key_lock"])
def test_key_validation(cache: DiskCache, bad: object, method: str) -> None:
    args = (bad, make_binary(1, 1)) if method == "put" else (bad,)
    with pytest.raises(ValueError, match="key"):
        getattr(cache, method)(*args)
    assert not (cache.directory / "entries").exists()


@pytest.mark.parametrize("good", ["0123456789abcdef", "f" * 128, key("sha")])
def test_good_keys(cache: DiskCache, good: str) -> None:
    assert cache.put(good, make_binary(2, 2))
    assert cache.get(good) == make_binary(2, 2)


# --- eviction -------------------------------------------------------------------------------------

def _three_entries(cache: DiskCache, ages: tuple[int, int, int]) -> tuple[list[str], int]:
    keys = [key(f"lru-{i}") for i in range(5)]
    for i, k in enumerate(keys[:3]):
        assert cache.put(k, make_binary(i, 1000))
    for k, age in zip(keys[:3], ages, strict=True):
        set_age(entry_path(cache, k), age)
    sizes = {entry_path(cache, k).stat().st_size for k in keys[:3]}
    assert len(sizes) == 1
    return keys, sizes.pop()


def present(cache: DiskCache, keys: list[str]) -> list[bool]:
    return [entry_path(cache, k).exists() for k in keys]


def test_over_the_bound_evicts_least_recently_used_first(cache: DiskCache) -> None:
    keys, size = _three_entries(cache, ages=(300, 100, 200))
    cache.max_bytes = 3 * size + size // 2
    assert cache.put(keys[3], make_binary(3, 1000))
    assert present(cache, keys) == [False, True, True, True, False]
    assert cache.put(keys[4], make_binary(4, 1000))
    assert present(cache, keys) == [False, True, False, True, True]
    assert cache.stats().total_bytes <= cache.max_bytes


def test_a_get_refreshes_an_entry(cache: DiskCache) -> None:
    keys, size = _three_entries(cache, ages=(300, 200, 100))
    assert cache.get(keys[0]) is not None
    assert entry_path(cache, keys[0]).stat().st_mtime > time.time() - 60
    cache.max_bytes = 3 * size + size // 2
    assert cache.put(keys[3], make_binary(3, 1000))
    assert present(cache, keys) == [True, False, True, True, False]


def test_prune_and_clear(cache: DiskCache) -> None:
    keys, size = _three_entries(cache, ages=(300, 100, 200))
    assert cache.prune() == 0
    assert cache.prune(max_bytes=size) == 2
    assert present(cache, keys) == [False, True, False, False, False]
    assert cache.clear() == 1
    assert cache.stats().entries == 0 and cache.stats().total_bytes == 0


def test_bound_holds_across_instances_sharing_a_directory(tmp_path: Path) -> None:
    sizer = DiskCache(tmp_path / "sizer")
    sizer.put(key("size"), make_binary(0, 1000))
    size = entry_path(sizer, key("size")).stat().st_size
    first, second = (DiskCache(tmp_path / "shared", max_bytes=3 * size + size // 2) for _ in range(2))
    for i in range(12):
        if i == 6:
            (first.directory / "size").write_text("garbled")  # a bad ledger only forces a scan
        assert (first if i % 2 else second).put(key(f"shared-{i}"), make_binary(i, 1000))
        assert first.stats().total_bytes <= first.max_bytes
    assert first.stats().entries == 3
    assert [k for k in map(key, (f"shared-{i}" for i in range(12))) if first.get(k)] == \
        [key(f"shared-{i}") for i in (9, 10, 11)]


def test_entry_bigger_than_the_bound_is_not_stored(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "small", max_bytes=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.put(key("big"), make_binary(1, 5000)) is False
        assert cache.put(key("fits"), make_binary(1, 500)) is True
    assert cache.get(key("big")) is None
    assert cache.stats().entries == 1


# --- degradation ----------------------------------------------------------------------------------

def test_unwritable_entries_directory_degrades_with_one_warning(cache: DiskCache) -> None:
    readable = key("readable")
    assert cache.put(readable, make_binary(1, 100))
    blocked = [k for k in (key(f"blocked-{i}") for i in range(64)) if k[:2] != readable[:2]][:2]
    for k in blocked:  # a regular file where the bucket directory belongs: mkdir fails with an OSError
        entry_path(cache, k).parent.write_bytes(b"")
    with pytest.warns(RuntimeWarning, match=str(cache.directory)) as caught:
        assert cache.put(blocked[0], make_binary(2, 100)) is False
        assert cache.put(blocked[1], make_binary(3, 100)) is False
        assert cache.put(blocked[0], make_binary(2, 100)) is False
    assert len([w for w in caught if w.category is RuntimeWarning]) == 1
    assert cache.get(readable) == make_binary(1, 100)
    assert cache.get(blocked[0]) is None
    assert temp_files(cache.directory) == []


def test_entries_path_is_a_file(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o700)
    (directory / "entries").write_bytes(b"not a directory")
    cache = DiskCache(directory)
    with pytest.warns(RuntimeWarning, match="cannot write") as caught:
        assert cache.put(key(1), make_binary(1, 10)) is False
        assert cache.put(key(2), make_binary(2, 10)) is False
    assert len(caught) == 1
    assert cache.get(key(1)) is None
    assert cache.stats().entries == 0


def _put_under_file_size_limit(directory: str, limit: int) -> tuple[bool, bool, bool, list[str]]:
    """In a child: writes past ``limit`` bytes fail (EFBIG) like a full disk, midway through the temp file."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    cache = DiskCache(directory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = cache.put(key("too-big-1"), make_binary(9, 10 * limit))
        second = cache.put(key("too-big-2"), make_binary(9, 10 * limit))
        hit = cache.get(key("small")) == make_binary(1, 10)
    return first, second, hit, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_failed_write_midway_leaves_no_temp_file(cache: DiskCache) -> None:
    cache.put(key("small"), make_binary(1, 10))
    with SPAWN.Pool(1) as pool:
        first, second, hit, messages = pool.apply(_put_under_file_size_limit, (str(cache.directory), 4096))
    assert (first, second, hit) == (False, False, True)
    assert len(messages) == 1 and str(cache.directory) in messages[0]
    assert temp_files(cache.directory) == []
    assert cache.get(key("too-big-1")) is None and cache.stats().entries == 1


def test_metadata_must_be_json(cache: DiskCache) -> None:
    binary = Binary(kernel_name="k", format="cubin", images={}, metadata={"bad": object()})
    with pytest.raises(TypeError, match="JSON"):
        cache.put(key("json"), binary)
    assert temp_files(cache.directory) == [] and cache.stats().entries == 0
