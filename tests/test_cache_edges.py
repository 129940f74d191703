"""The disk cache at its edges, each test written against a mutant that the cache's own tests let through (issue 37,
``python tests/mutation.py disk_cache``): bounds met exactly, the smallest and emptiest cases, the error messages a
user reads. A real cache directory (``tmp_path``), real files, no mocks."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import re
import stat
import time
from pathlib import Path

import filelock
import pytest
from cache_helpers import entry_path, key, make_binary, obey_file_modes

from tritonplug import settings
from tritonplug.cache import disk, signing
from tritonplug.cache.disk import CacheDirError, DiskCache, open_cache_from_env
from tritonplug.cache.entries import MAGIC, MAGIC_SIGNED, EntryRefused, decode_entry, encode_entry
from tritonplug.cache.signing import FleetKey, FleetKeys
from tritonplug.records import Binary

UNSIGNED = FleetKeys()


def set_age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def forged(key_: str, header: dict, payload: bytes) -> bytes:
    """An unsigned entry written by hand (checksum right), so a header can say what the encoder never writes."""
    body = MAGIC + json.dumps(header).encode() + b"\n" + payload
    return body + hashlib.sha256(body).digest()


def header_for(key_: str, images: list[dict], payload_size: int) -> dict:
    return {"key": key_, "kernel_name": "k", "format": "cubin", "metadata": {}, "images": images,
            "payload_size": payload_size}


# --- the cache directory --------------------------------------------------------------------------

def test_a_dangling_link_as_the_cache_directory_is_named_with_where_it_leads(tmp_path: Path) -> None:
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(CacheDirError, match=r"cache is a symbolic link to .*gone, which does not exist"):
        DiskCache(link)


def test_a_dangling_link_above_the_cache_directory_is_named_too(tmp_path: Path) -> None:
    (tmp_path / "parent").symlink_to(tmp_path / "gone")
    with pytest.raises(CacheDirError, match=r"parent is a symbolic link to .*gone, which does not exist"):
        DiskCache(tmp_path / "parent" / "cache")


# --- the bound, met exactly -----------------------------------------------------------------------

def test_a_bound_of_zero_is_a_cache_that_stores_nothing_and_a_negative_one_is_refused(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "zero", max_bytes=0)
    assert cache.put(key("zero"), make_binary(1, 10)) is False
    assert cache.get(key("zero")) is None
    with pytest.raises(ValueError, match="max_bytes must be >= 0, got -1"):
        DiskCache(tmp_path / "negative", max_bytes=-1)


def test_an_entry_exactly_as_big_as_the_bound_is_stored_and_kept(tmp_path: Path) -> None:
    k = key("exact")
    size = len(encode_entry(k, make_binary(1, 1000), UNSIGNED))
    cache = DiskCache(tmp_path / "cache", max_bytes=size)
    assert cache.put(key("first"), make_binary(2, 10)) is True  # the first put's scan, out of the way
    cache.clear()  # the ledger now says 0
    assert cache.put(k, make_binary(1, 1000)) is True
    assert cache.get(k) == make_binary(1, 1000), "0 + size is not over a bound of size"
    assert cache.stats().total_bytes == size
    assert cache.prune() == 0 and cache.get(k) == make_binary(1, 1000), "an entry exactly at the bound is within it"


def test_two_entries_filling_the_bound_exactly_are_both_kept(tmp_path: Path) -> None:
    a, b = key("a"), key("b")
    size = len(encode_entry(a, make_binary(1, 1000), UNSIGNED))
    cache = DiskCache(tmp_path / "cache", max_bytes=2 * size)
    assert cache.put(a, make_binary(1, 1000)) and cache.put(b, make_binary(1, 1000))
    assert cache.stats().entries == 2 and cache.get(a) is not None and cache.get(b) is not None
    assert (cache.directory / "size").read_text() == str(2 * size)


# --- what the log says ----------------------------------------------------------------------------

def test_the_log_names_each_key_by_its_first_12_characters_and_sizes_in_bytes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = DiskCache(tmp_path / "cache", max_bytes=5000)
    k, big, bad, blocked = key("logged"), key("big"), key("bad"), key("blocked")
    size = len(encode_entry(k, make_binary(1, 100), UNSIGNED))
    with caplog.at_level(logging.DEBUG, logger="tritonplug.cache.disk"):
        assert cache.get(k) is None
        assert cache.put(k, make_binary(1, 100)) is True
        assert cache.get(k) == make_binary(1, 100)
        assert cache.put(big, make_binary(2, 6000)) is False
        assert cache.put_entry(bad, b"not an entry") is False
        entry_path(cache, blocked).parent.write_bytes(b"")  # a file where a bucket belongs: a get cannot open it
        assert cache.get(blocked) is None
    messages = [r.getMessage() for r in caplog.records]
    assert f"miss {k[:12]}" in messages
    assert f"put {k[:12]} ({size} bytes)" in messages
    assert f"hit {k[:12]} (kernel_001, {size} bytes)" in messages
    too_big = len(encode_entry(big, make_binary(2, 6000), UNSIGNED))
    assert f"not caching {big[:12]}: {too_big} bytes exceed the bound of 5000" in messages
    assert f"not caching {bad[:12]}: bad magic or truncated" in messages
    assert any(m.startswith(f"cannot open the bucket of {blocked[:12]}: ") for m in messages), messages


# --- the entry format -----------------------------------------------------------------------------

PAYLOAD = b"0123456789"


@pytest.mark.parametrize(("images", "payload_size", "words"), [
    ([{"name": "a", "offset": -1, "size": 2}], len(PAYLOAD), "'a' lies outside the payload"),
    ([{"name": "a", "offset": 2, "size": -1}], len(PAYLOAD), "'a' lies outside the payload"),
    ([{"name": "a", "offset": 0, "size": len(PAYLOAD) + 1}], len(PAYLOAD), "'a' lies outside the payload"),
    ([{"name": "a", "offset": 4, "size": 7}], len(PAYLOAD), "'a' lies outside the payload"),
    ([{"name": "a", "offset": 0, "size": 10}], len(PAYLOAD) + 1, "header does not match the file"),
    ([{"name": "a", "offset": 0, "size": 10}], len(PAYLOAD) - 1, "header does not match the file"),
])
def test_an_entry_whose_header_does_not_fit_its_payload_is_refused(images: list, payload_size: int,
                                                                   words: str) -> None:
    k = key("header")
    with pytest.raises(ValueError, match=words):
        decode_entry(k, forged(k, header_for(k, images, payload_size), PAYLOAD), UNSIGNED)


def test_images_that_exactly_fill_the_payload_and_an_empty_one_are_read() -> None:
    k = key("fill")
    images = [{"name": "a", "offset": 0, "size": 4}, {"name": "empty", "offset": 4, "size": 0},
              {"name": "b", "offset": 4, "size": 6}]
    got = decode_entry(k, forged(k, header_for(k, images, len(PAYLOAD)), PAYLOAD), UNSIGNED)
    assert got.images == {"a": b"0123", "empty": b"", "b": b"456789"}


def test_an_entry_with_another_magic_line_is_refused_even_with_a_right_checksum() -> None:
    k = key("magic")
    good = forged(k, header_for(k, [{"name": "a", "offset": 0, "size": 10}], len(PAYLOAD)), PAYLOAD)
    assert decode_entry(k, good, UNSIGNED).images == {"a": PAYLOAD}
    body = b"tritonplug-cache 3\n" + good[len(MAGIC):-32]  # a format this version does not know
    with pytest.raises(ValueError, match="bad magic"):
        decode_entry(k, body + hashlib.sha256(body).digest(), UNSIGNED)


@pytest.mark.parametrize(("data", "words"), [
    (MAGIC + b"x" * 31, "bad magic or truncated"),  # shorter than a checksum
    (MAGIC + b"x" * 32, "checksum mismatch"),
    (MAGIC_SIGNED + b"x" * 63, "bad magic or truncated"),  # shorter than a signature and a checksum
    (MAGIC_SIGNED + b"x" * 64, "checksum mismatch"),
], ids=["unsigned-31", "unsigned-32", "signed-63", "signed-64"])
def test_an_entry_too_short_for_its_trailer_is_called_truncated(data: bytes, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        decode_entry(key("short"), data, UNSIGNED)


def test_metadata_with_a_cycle_is_refused_as_not_json() -> None:
    cycle: dict = {}
    cycle["self"] = cycle
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        encode_entry(key("cycle"), Binary("k", "cubin", {}, {"cycle": cycle}), UNSIGNED)


# --- the fleet key --------------------------------------------------------------------------------

def test_a_key_of_exactly_16_bytes_signs_and_one_of_15_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fleet.key"
    for secret, ok in ((b"k" * 16, True), (b"k" * 15, False)):
        path.write_bytes(secret)
        path.chmod(0o600)
        with settings.FLEET_KEY.overridden(str(path)):
            if ok:
                assert signing.fleet_keys().current.secret == secret
            else:
                with pytest.raises(settings.SettingError, match="holds 15 bytes; a fleet key must have at least 16"):
                    signing.fleet_keys()


def test_a_key_never_shows_its_secret_and_its_fingerprint_is_16_hex_digits() -> None:
    secret = b"a very secret fleet key"
    fleet_key = FleetKey(secret, signing.fingerprint(secret), "TEST")
    assert "secret" not in repr(fleet_key) and str(secret) not in repr(fleet_key)
    assert len(fleet_key.fingerprint) == 16 and int(fleet_key.fingerprint, 16) >= 0
    assert fleet_key.fingerprint == hashlib.sha256(b"tritonplug fleet key\0" + secret).hexdigest()[:16]


def signed_forgery(k: str, header_line: bytes) -> bytes:
    """A signed entry whose header line is ``header_line`` and whose signature is 32 bytes of nothing."""
    body = MAGIC_SIGNED + header_line + b"\n" + PAYLOAD + bytes(32)
    return body + hashlib.sha256(body).digest()


@pytest.mark.parametrize(("header_line", "named"), [
    (b"not json", "'None'"),
    (b"[1, 2]", "'None'"),
    (json.dumps({"signer": "f" * 50}).encode(), repr("f" * 40)),
])
def test_a_forged_signed_entry_is_refused_naming_the_signer_it_claims(header_line: bytes, named: str) -> None:
    secret = b"s" * 32
    keys = FleetKeys(FleetKey(secret, signing.fingerprint(secret), "TEST"))
    with pytest.raises(EntryRefused, match="signed by an unknown key") as caught:
        decode_entry(key("forged"), signed_forgery(key("forged"), header_line), keys)
    assert f"(fingerprint {named}, not {signing.fingerprint(secret)!r})" in str(caught.value)


# --- eviction and the ledger ----------------------------------------------------------------------

def same_size_entries(cache: DiskCache, tags: range) -> tuple[list[str], int]:
    """One entry per tag, all of one size, the first the oldest (an hour apart)."""
    keys = [key(f"lru-{t}") for t in tags]
    for k, t in zip(keys, tags, strict=True):
        assert cache.put(k, make_binary(t, 1000))
    for age, k in enumerate(reversed(keys)):
        set_age(entry_path(cache, k), 3600 * (age + 1))
    sizes = {entry_path(cache, k).stat().st_size for k in keys}
    assert len(sizes) == 1
    return keys, sizes.pop()


def test_a_put_over_the_bound_evicts_the_oldest_down_to_90_percent(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    size = len(encode_entry(key("lru-100"), make_binary(100, 1000), UNSIGNED))
    cache = DiskCache(tmp_path / "cache", max_bytes=10 * size)
    keys, _ = same_size_entries(cache, range(100, 110))  # exactly the bound: nothing evicted yet
    assert cache.stats().entries == 10
    with caplog.at_level(logging.INFO, logger="tritonplug.cache.disk"):
        assert cache.put(key("lru-110"), make_binary(110, 1000))
    assert [entry_path(cache, k).exists() for k in keys] == [False, False] + [True] * 8
    assert cache.stats().total_bytes == 9 * size
    assert f"evicted 2 entries from {cache.directory}; {9 * size} bytes remain" in caplog.messages


def test_a_put_larger_than_the_low_water_mark_keeps_its_entry_and_evicts_the_others(tmp_path: Path) -> None:
    """The put that overflows evicts down to 90% of the bound, oldest first: an entry larger than that would be
    the last to go, after its ``put`` said it was written (a get then missed it)."""
    small = len(encode_entry(key("small-0"), make_binary(0, 100), UNSIGNED))
    big = len(encode_entry(key("big"), make_binary(200, 20 * small), UNSIGNED))
    cache = DiskCache(tmp_path / "cache", max_bytes=big + big // 20)  # big is 95% of the bound
    for tag in range(3):
        assert cache.put(key(f"small-{tag}"), make_binary(tag, 100))
    assert cache.put(key("big"), make_binary(200, 20 * small))
    assert cache.get(key("big")) == make_binary(200, 20 * small)
    assert cache.stats().entries == 1 and cache.stats().total_bytes == big


def test_a_prune_with_nothing_to_evict_logs_no_eviction(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = DiskCache(tmp_path / "cache")
    same_size_entries(cache, range(100, 103))
    with caplog.at_level(logging.INFO, logger="tritonplug.cache.disk"):
        assert cache.prune() == 0
    assert not [m for m in caplog.messages if m.startswith("evicted")]


def test_a_new_caches_first_put_corrects_a_ledger_that_says_too_little(tmp_path: Path) -> None:
    size = len(encode_entry(key("lru-100"), make_binary(100, 1000), UNSIGNED))
    first = DiskCache(tmp_path / "cache", max_bytes=3 * size + size // 2)
    keys, _ = same_size_entries(first, range(100, 103))
    (first.directory / "size").write_text("0")  # as a writer that died before accounting leaves it
    second = DiskCache(first.directory, max_bytes=first.max_bytes)
    assert second.put(key("lru-103"), make_binary(103, 1000))
    assert second.stats().total_bytes <= second.max_bytes
    assert not entry_path(second, keys[0]).exists()
    assert (second.directory / "size").read_text() == str(second.stats().total_bytes)


def test_clear_removes_an_empty_entry_file_too(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache")
    empty = entry_path(cache, key("empty"))
    empty.parent.mkdir(parents=True, mode=0o700)
    empty.write_bytes(b"")  # a crash between create and write; 0 bytes of the bound
    assert cache.clear() == 1
    assert not empty.exists()


# --- what a get and a put leave behind ------------------------------------------------------------

def test_a_get_creates_nothing_and_locks_are_private(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache")
    assert cache.max_bytes == 1 << 30, "the default bound is TRITONPLUG_CACHE_MAX_BYTES' default, 1 GiB"
    assert cache.get(key("absent")) is None
    assert sorted(p.name for p in cache.directory.iterdir()) == []
    assert cache.put(key("present"), make_binary(1, 10))
    with cache.key_lock(key("present")):
        held = cache.directory / "locks" / key("present")[:2] / f"{key('present')}.lock"
        assert stat.S_IMODE(held.stat().st_mode) == 0o600
    assert stat.S_IMODE((cache.directory / "lock").stat().st_mode) == 0o600


@pytest.mark.parametrize(("header", "error"), [
    ({"kernel_name": "k", "format": "cubin", "metadata": {}, "images": [], "payload_size": 0}, KeyError),
    ({"key": None, "kernel_name": "k", "format": "cubin", "metadata": [1], "images": [], "payload_size": 0},
     TypeError),
    ({"key": None, "kernel_name": "k", "format": "cubin", "metadata": {}, "images": 5, "payload_size": 0},
     TypeError),
])
def test_an_intact_entry_with_a_header_missing_or_mistyped_is_damage(tmp_path: Path, header: dict,
                                                                      error: type[Exception]) -> None:
    cache, k = DiskCache(tmp_path / "cache"), key("header")
    header = {name: (k if value is None and name == "key" else value) for name, value in header.items()}
    blob = forged(k, header, b"")
    with pytest.raises(error):
        decode_entry(k, blob, UNSIGNED)
    assert cache.put_entry(k, blob) is False, "a remote entry is checked before it is stored"
    assert cache.stats().entries == 0
    path = entry_path(cache, k)
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_bytes(blob)
    assert cache.get(k) is None
    assert not path.exists(), "the damaged entry was removed"


def test_a_damaged_entry_under_a_fleet_key_is_named_once_as_damaged(tmp_path: Path) -> None:
    secret_file = tmp_path / "fleet.key"
    secret_file.write_bytes(b"f" * 32)
    secret_file.chmod(0o600)
    cache, k = DiskCache(tmp_path / "cache"), key("damaged")
    with settings.FLEET_KEY.overridden(str(secret_file)):
        assert cache.put(k, make_binary(1, 100))
        entry_path(cache, k).write_bytes(entry_path(cache, k).read_bytes()[:-1])
        with pytest.warns(RuntimeWarning, match=r"refused the cache entry .*: damaged \(checksum mismatch\)"):
            assert cache.get(k) is None
    assert not entry_path(cache, k).exists()


# --- a cache that cannot be cleaned, a lock held elsewhere, the environment -----------------------

def _clear_obeying_file_modes(directory: str) -> str:
    """In a child that obeys file modes (even as root): clear the cache, and say why it could not."""
    obey_file_modes()
    try:
        DiskCache(directory).clear()
    except CacheDirError as exc:
        return str(exc)
    return "cleared"


@pytest.mark.parametrize("stuck", [3, 4, 5])
def test_a_clear_that_cannot_remove_names_three_items_and_counts_the_rest(tmp_path: Path, stuck: int) -> None:
    cache = DiskCache(tmp_path / "cache")
    keys = list(map(key, range(100)))
    buckets = []
    for k in keys:
        if entry_path(cache, k).parent not in buckets and len(buckets) < stuck:
            assert cache.put(k, make_binary(1, 10))
            buckets.append(entry_path(cache, k).parent)
    for bucket in buckets:
        bucket.chmod(0o500)
    try:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            message = pool.apply(_clear_obeying_file_modes, (str(cache.directory),))
    finally:
        for bucket in buckets:
            bucket.chmod(0o700)
    more = f" and {stuck - 3} more" if stuck > 3 else ""
    assert re.fullmatch(rf"could not clear the kernel cache at {cache.directory}: {stuck} item\(s\) could not be "
                        rf"removed \(is it read-only\?\): [^,]+\.bin, [^,]+\.bin, [^,]+\.bin{more}", message), message


def test_a_cache_lock_held_elsewhere_skips_a_puts_eviction_and_fails_a_clear(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk, "_EVICT_LOCK_TIMEOUT_S", 0.2)  # the 30 s a put waits, shortened
    cache = DiskCache(tmp_path / "cache")
    elsewhere = filelock.FileLock(cache.directory / "lock")  # another holder: its own descriptor, as a process
    with elsewhere:
        assert cache.put(key("while held"), make_binary(1, 10)) is True, "written; its eviction skipped"
        with pytest.raises(CacheDirError, match="cannot clear the kernel cache at .*: another process has held its "
                                                "lock for 0 s"):
            cache.clear()
    assert cache.get(key("while held")) == make_binary(1, 10)


def test_the_environment_opens_the_cache_it_names_or_none(tmp_path: Path) -> None:
    with settings.CACHE_DIR.overridden(str(tmp_path / "env")), settings.CACHE_MAX_BYTES.overridden("12345"):
        with settings.CACHE.overridden("0"):
            assert open_cache_from_env() is None
        with settings.CACHE.overridden("1"):
            opened = open_cache_from_env()
            assert opened is not None and opened.directory == tmp_path / "env" and opened.max_bytes == 12345
