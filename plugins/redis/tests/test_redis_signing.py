"""Signed entries (``TRITONPLUG_FLEET_KEY``) against a real redis-server, and disk hits published to it: real hosts
(subprocesses with cache directories of their own) lowering an autotuned kernel for sm_90. Entries in Redis are forged
the way an attacker who can write to the store would: another configuration's payload re-encoded under a key with the
project's own encoder, unsigned or signed with a key of their own; a byte flipped and the checksum made right again;
the signature stripped. Each is refused, named once, compiled again and replaced; nothing forged reaches a disk."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from hosts import run_host

from tritonplug.cache import signing
from tritonplug.cache.entries import MAGIC, MAGIC_SIGNED, decode_entry, encode_entry
from tritonplug.cache.signing import FleetKey, FleetKeys

REFUSED = "refused the cache entry"


def write_key(directory: Path, name: str) -> Path:
    path = directory / name
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return path


def keys_of(*paths: Path) -> FleetKeys:
    made = [FleetKey(p.read_bytes().strip(), signing.fingerprint(p.read_bytes().strip()), "TEST") for p in paths]
    return FleetKeys(*made)


def entries(server) -> dict[str, bytes]:
    """The entries in Redis by cache key (claims left out)."""
    client = server.client()
    return {k.decode().rsplit("/", 1)[1]: client.get(k) for k in client.keys("tritonplug-*")
            if not k.endswith(b"#claim")}


def redis_key(server, key: str) -> bytes:
    (name,) = [k for k in server.client().keys("tritonplug-*") if k.decode().endswith("/" + key)]
    return name


def disk_entries(cache_dir: str) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in Path(cache_dir).glob("entries/*/*.bin")}


def refusals(report: dict) -> list[str]:
    return [w for w in report["warnings"] if REFUSED in w]


def fix_checksum(data: bytes) -> bytes:
    return data[:-32] + hashlib.sha256(data[:-32]).digest()


def test_forged_entries_in_redis_are_refused_named_once_compiled_again_and_replaced(server, tmp_path) -> None:
    key = write_key(tmp_path, "fleet.key")
    ours, wrong = keys_of(key), keys_of(write_key(tmp_path, "attacker.key"))
    first = run_host(server.url(), 4, 301, TRITONPLUG_FLEET_KEY=str(key))
    assert first["stats"]["compiled"] == 4 and first["stats"]["remote_published"] == 4 and not first["warnings"]
    good = entries(server)
    k0, k1, k2, k3 = sorted(good)
    other = decode_entry(k3, good[k3], ours)  # another configuration's binary: the payload a forger puts in
    forged = {
        k0: (encode_entry(k0, other, FleetKeys()), "unsigned"),  # re-encoded with our encoder, under k0's key
        k1: (encode_entry(k1, other, wrong), "signed by an unknown key"),
        k2: (fix_checksum(good[k2][:-100] + bytes([good[k2][-100] ^ 1]) + good[k2][-99:]), "bad signature"),
        k3: (fix_checksum(MAGIC + good[k3][len(MAGIC_SIGNED):-64] + bytes(32)), "unsigned"),  # signature stripped
    }
    client = server.client()
    for k, (data, _) in forged.items():
        client.set(redis_key(server, k), data)
    cache_dir = tempfile.mkdtemp(prefix="tritonplug-host-")
    second = run_host(server.url(), 4, 301, TRITONPLUG_FLEET_KEY=str(key), TRITONPLUG_CACHE_DIR=cache_dir)
    assert second["stats"]["compiled"] == 4 and second["stats"]["remote_hits"] == 0
    named = refusals(second)
    assert len(named) == 4, second["warnings"]  # one per forged key
    for k, (_, reason) in forged.items():
        (warning,) = [w for w in named if k in w]
        assert reason in warning and f"127.0.0.1:{server.port}/0" in warning
    replaced = entries(server)
    assert sorted(replaced) == sorted(good) and all(replaced[k] != data for k, (data, _) in forged.items())
    assert all(decode_entry(k, v, ours) for k, v in replaced.items()), "each replaced by a compiled, signed entry"
    assert disk_entries(cache_dir) == replaced, "nothing forged reached the disk"
    third_dir = tempfile.mkdtemp(prefix="tritonplug-host-")
    third = run_host(server.url(), 4, 301, TRITONPLUG_FLEET_KEY=str(key), TRITONPLUG_CACHE_DIR=third_dir)
    assert third["stats"]["compiled"] == 0 and third["stats"]["remote_hits"] == 4 and not third["warnings"]
    assert disk_entries(third_dir) == replaced, "the local copy of a remote entry keeps its signature"


def test_unsigned_entries_then_a_rotated_key(server, tmp_path) -> None:
    old, new = write_key(tmp_path, "old.key"), write_key(tmp_path, "new.key")
    unsigned = run_host(server.url(), 2, 302)  # no key: today's entries, unsigned
    assert unsigned["stats"]["remote_published"] == 2
    signer = run_host(server.url(), 2, 302, TRITONPLUG_FLEET_KEY=str(old))
    assert signer["stats"]["compiled"] == 2 and signer["stats"]["remote_published"] == 2
    assert len(refusals(signer)) == 2 and all("unsigned" in w for w in refusals(signer))
    signed_by_old = entries(server)
    assert all(decode_entry(k, v, keys_of(old)) for k, v in signed_by_old.items())
    rotated = run_host(server.url(), 2, 302, TRITONPLUG_FLEET_KEY=str(new), TRITONPLUG_FLEET_KEY_PREVIOUS=str(old))
    assert rotated["stats"]["compiled"] == 0 and rotated["stats"]["remote_hits"] == 2 and not rotated["warnings"]
    dropped = run_host(server.url(), 2, 302, TRITONPLUG_FLEET_KEY=str(new))
    assert dropped["stats"]["compiled"] == 2 and len(refusals(dropped)) == 2
    assert all("signed by an unknown key" in w for w in refusals(dropped))
    assert all(decode_entry(k, v, keys_of(new)) for k, v in entries(server).items()), "now signed by the new key"
    stranger = write_key(tmp_path, "stranger.key")  # a read-only consumer with a key of its own: refuses, never writes
    before = entries(server)
    reader = run_host(server.url(query="mode=read"), 2, 302, TRITONPLUG_FLEET_KEY=str(stranger))
    assert reader["stats"]["compiled"] == 2 and len(refusals(reader)) == 2 and entries(server) == before


def test_disk_hits_are_published_where_the_store_lacks_them(server, tmp_path) -> None:
    key = write_key(tmp_path, "fleet.key")
    cache_dir = tempfile.mkdtemp(prefix="tritonplug-host-")
    offline = run_host(None, 2, 303, TRITONPLUG_FLEET_KEY=str(key), TRITONPLUG_CACHE_DIR=cache_dir)
    assert offline["stats"]["compiled"] == 2
    on_disk = disk_entries(cache_dir)
    for query in ("mode=read", "max_entry_bytes=100"):  # a read-only consumer, and entries over the store's limit
        held_back = run_host(server.url(query=query), 2, 303, TRITONPLUG_FLEET_KEY=str(key),
                             TRITONPLUG_CACHE_DIR=cache_dir)
        assert held_back["stats"]["disk_hits"] == 2 and not entries(server) and not held_back["warnings"]
    warm = run_host(server.url(), 2, 303, TRITONPLUG_FLEET_KEY=str(key), TRITONPLUG_CACHE_DIR=cache_dir)
    assert warm["stats"]["disk_hits"] == 2 and warm["stats"]["compiled"] == 0 and not warm["warnings"]
    assert entries(server) == on_disk, "the disk's entries, published as they are (signatures included)"
    k0 = sorted(on_disk)[0]
    server.client().set(redis_key(server, k0), encode_entry(k0, decode_entry(k0, on_disk[k0], keys_of(key)),
                                                            FleetKeys()))  # a forged value where ours belongs
    again = run_host(server.url(), 2, 303, TRITONPLUG_FLEET_KEY=str(key), TRITONPLUG_CACHE_DIR=cache_dir)
    assert again["stats"]["disk_hits"] == 2 and again["stats"]["compiled"] == 0
    assert entries(server) == on_disk, "a refused value in the store is replaced by the disk's entry"
    peer = run_host(server.url(), 2, 303, TRITONPLUG_FLEET_KEY=str(key))
    assert peer["stats"]["compiled"] == 0 and peer["stats"]["remote_hits"] == 2
