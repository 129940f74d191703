"""The disk cache at its edges, each test written against a mutant that the cache's own tests let through (issue 37,
``python tests/mutation.py disk_cache``): bounds met exactly, the smallest and emptiest cases, the error messages a
user reads. A real cache directory (``tmp_path``), real files, no mocks."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest
from cache_helpers import entry_path, key, make_binary

from tritonplug.cache.disk import CacheDirError, DiskCache
from tritonplug.cache.entries import MAGIC, encode_entry
from tritonplug.cache.signing import FleetKeys

UNSIGNED = FleetKeys()


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
