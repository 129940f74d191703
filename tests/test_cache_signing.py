"""Signed cache entries (``TRITONPLUG_FLEET_KEY``) and links in the cache directory, on the disk: real kernels run on
the CPU (interpret backend) from a real cache directory whose entries are forged the way an attacker would, with the
project's own encoder. A refused entry is never run, is named once, and is compiled again; the result is right.
The remote tier's side (Redis, the coordination service): ``plugins/redis/tests/test_redis_signing.py`` and
``tests/test_remote_tier.py``."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from hypothesis import given
from hypothesis import strategies as st
from kernels import gapped_add_kernel, gapped_sub_kernel

import tritonplug
from tritonplug import settings
from tritonplug.cache import signing
from tritonplug.cache.disk import DiskCache
from tritonplug.cache.entries import MAGIC, MAGIC_SIGNED, EntryRefused, decode_entry, encode_entry
from tritonplug.cache.signing import FleetKey, FleetKeys
from tritonplug.records import Binary

pytestmark = requires_backend("interpret")
N = 64
SPEC = jax.ShapeDtypeStruct((N,), jnp.float32)
X, Y = jnp.arange(N, dtype=jnp.float32), jnp.full(N, 5.0, jnp.float32)


def write_key(path: Path, secret: bytes | None = None, mode: int = 0o600) -> Path:
    path.write_bytes(os.urandom(32) if secret is None else secret)
    path.chmod(mode)
    return path


def key_of(secret: bytes) -> FleetKey:
    return FleetKey(secret, signing.fingerprint(secret), "TEST")


def fix_checksum(data: bytes) -> bytes:
    """What a forger does after changing bytes: the trailing SHA-256 made right again."""
    return data[:-32] + hashlib.sha256(data[:-32]).digest()


def strip_signature(data: bytes) -> bytes:
    """A signed entry turned into an unsigned one of the first format: magic 1, no HMAC, checksum made right."""
    body = MAGIC + data[len(MAGIC_SIGNED):-64]
    return body + hashlib.sha256(body).digest()


def test_a_key_read_once_cannot_be_changed_by_its_holders() -> None:
    """The keys are read once per version of the file and shared (``signing._load`` caches them): a holder that could
    swap a key's secret, or the keys in effect, would change what every later entry is signed and checked with."""
    fleet_key = key_of(b"a very secret fleet key, 32 byte")
    keys = FleetKeys(fleet_key)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fleet_key.secret = b"another key, 32 bytes long......"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        keys.current = None  # type: ignore[misc]


# --- the key settings -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("make", "words"), [
    (lambda p: write_key(p, mode=0o640), "readable only by its owner"),
    (lambda p: write_key(p, mode=0o604), "readable only by its owner"),
    (lambda p: p, "cannot be read"),
    (lambda p: write_key(p, b""), "is empty"),
    (lambda p: write_key(p, b"  \n"), "holds 0 bytes"),
    (lambda p: write_key(p, b"short key"), "at least 16"),
    (lambda p: p.mkdir() or p, "not a regular file"),
])
def test_a_bad_key_file_is_refused_at_the_call_naming_the_variable(make: Callable[[Path], Path], words: str,
                                                                   private_cache: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONPLUG_FLEET_KEY", str(make(tmp_path / "fleet.key")))
    with pytest.raises(settings.SettingError, match="TRITONPLUG_FLEET_KEY") as caught:
        run(gapped_add_kernel)
    assert words in str(caught.value)
    assert not list(private_cache.glob("entries/*/*")), "nothing was compiled or cached"


@given(mode=st.integers(min_value=0o400, max_value=0o777))
def test_a_key_file_is_accepted_exactly_when_group_and_others_have_no_access(mode: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = write_key(Path(directory) / "fleet.key", mode=mode)
        with settings.FLEET_KEY.overridden(str(path)):
            if mode & 0o077:
                with pytest.raises(settings.SettingError, match="readable only by its owner"):
                    signing.fleet_keys()
            else:
                assert signing.fleet_keys().signing


def test_a_previous_key_alone_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONPLUG_FLEET_KEY_PREVIOUS", str(write_key(tmp_path / "old.key")))
    with pytest.raises(settings.SettingError, match="TRITONPLUG_FLEET_KEY_PREVIOUS is set without"):
        signing.fleet_keys()


def test_info_says_whether_entries_are_signed_and_never_shows_the_key(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert signing.fleet_keys().describe().startswith("unsigned")
    secret = b"0123456789abcdef-secret"
    monkeypatch.setenv("TRITONPLUG_FLEET_KEY", str(write_key(tmp_path / "k", secret + b"\n")))
    keys = signing.fleet_keys()
    described = keys.describe()
    assert described.startswith("signed with the fleet key " + signing.fingerprint(secret))
    assert "secret" not in described and "secret" not in repr(keys)
    assert settings.FLEET_KEY.host_only and settings.FLEET_KEY_PREVIOUS.host_only, "the key changes no kernel's key"


# --- the entry format -----------------------------------------------------------------------------------------------

BINARY = Binary("k", "cubin", {"cubin": b"\x01" * 40, "ptx": b"// ptx"}, {"shared": 0})
ENTRY_KEY = "ab" * 32
OURS = FleetKeys(key_of(b"our fleet key, 32 bytes long...."))


def test_signed_entries_round_trip_and_unsigned_ones_are_read_without_a_key() -> None:
    signed = encode_entry(ENTRY_KEY, BINARY, OURS)
    assert signed.startswith(MAGIC_SIGNED) and decode_entry(ENTRY_KEY, signed, OURS) == BINARY
    assert decode_entry(ENTRY_KEY, signed, FleetKeys()) == BINARY  # no key: the checksum alone, as before
    unsigned = encode_entry(ENTRY_KEY, BINARY, FleetKeys())
    assert unsigned.startswith(MAGIC) and decode_entry(ENTRY_KEY, unsigned, FleetKeys()) == BINARY
    with pytest.raises(EntryRefused, match="unsigned"):
        decode_entry(ENTRY_KEY, unsigned, OURS)


@given(position=st.integers(min_value=0), mask=st.integers(min_value=1, max_value=255))
def test_no_byte_of_a_signed_entry_can_be_changed(position: int, mask: int) -> None:
    entry = bytearray(encode_entry(ENTRY_KEY, BINARY, OURS))
    position %= len(entry) - 32
    entry[position] ^= mask
    with pytest.raises(ValueError):  # EntryRefused, or damage (magic, header) found before the signature
        decode_entry(ENTRY_KEY, fix_checksum(bytes(entry)), OURS)


def test_a_signed_entry_cannot_be_moved_to_another_key() -> None:
    with pytest.raises(EntryRefused, match="bad signature"):
        decode_entry("cd" * 32, encode_entry(ENTRY_KEY, BINARY, OURS), OURS)


# --- forged entries on the disk, end to end -------------------------------------------------------------------------

WRONG = key_of(b"someone else's key, 32 bytes....")


def run(kernel: object) -> jax.Array:
    return tritonplug.triton_call(X, N, Y, kernel=kernel, out_type=SPEC, grid=(1,), BLOCK=N)


def counted(before: dict[str, float]) -> dict[str, float]:
    """The compile counters gained since ``before`` (they count for the process)."""
    now = tritonplug.compile_stats()
    return {name: now[name] - before.get(name, 0) for name in ("compiled", "disk_hits")}


def entry_files(directory: Path) -> dict[str, Path]:
    """The entry files of a cache directory by kernel name (read with the keys in effect)."""
    found = {}
    for path in directory.glob("entries/*/*.bin"):
        found[decode_entry(path.stem, path.read_bytes()).kernel_name] = path
    return found


#: How an attacker forges the adding kernel's entry, and the reason its refusal names.
FORGERIES = {
    "re-encoded unsigned": "unsigned",  # the forgery: another kernel's payload under this key, our encoder
    "signed with a wrong key": "signed by an unknown key",
    "a wrong key under our fingerprint": "bad signature",
    "signature stripped": "unsigned",
    "payload byte flipped": "bad signature",
    "another kernel's signed entry": "bad signature",
}


def forge(how: str, key: str, add: bytes, sub: bytes, sub_binary: Binary, ours: FleetKey) -> bytes:
    """The forged bytes put in place of ``add`` (the genuine entry under ``key``); ``sub``: another kernel's entry."""
    if how == "re-encoded unsigned":
        return encode_entry(key, sub_binary, FleetKeys())
    if how == "signed with a wrong key":
        return encode_entry(key, sub_binary, FleetKeys(WRONG))
    if how == "a wrong key under our fingerprint":
        return encode_entry(key, sub_binary, FleetKeys(FleetKey(WRONG.secret, ours.fingerprint, "X")))
    if how == "signature stripped":
        return strip_signature(add)
    if how == "payload byte flipped":
        return fix_checksum(add[:-100] + bytes([add[-100] ^ 1]) + add[-99:])
    return sub


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_entry_on_disk_is_refused_named_once_and_recompiled(forgery: str, private_cache: Path,
                                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    fresh_state) -> None:
    monkeypatch.setenv("TRITONPLUG_FLEET_KEY", str(write_key(tmp_path / "fleet.key")))
    ours = signing.fleet_keys().current
    np.testing.assert_array_equal(run(gapped_add_kernel), X + Y)
    np.testing.assert_array_equal(run(gapped_sub_kernel), X - Y)
    files = entry_files(private_cache)
    add_path, sub_path = files["gapped_add_kernel"], files["gapped_sub_kernel"]
    sub = sub_path.read_bytes()
    add_path.write_bytes(forge(forgery, add_path.stem, add_path.read_bytes(), sub, decode_entry(sub_path.stem, sub),
                               ours))
    fresh_state.reset()
    before = tritonplug.compile_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(run(gapped_add_kernel), X + Y)
        fresh_state.reset()
        np.testing.assert_array_equal(run(gapped_add_kernel), X + Y)  # the good entry, written over the forged one
    named = [str(w.message) for w in caught if "refused the cache entry" in str(w.message)]
    assert len(named) == 1 and str(add_path) in named[0] and FORGERIES[forgery] in named[0], named
    assert counted(before) == {"compiled": 1, "disk_hits": 1}
    assert decode_entry(add_path.stem, add_path.read_bytes()).kernel_name == "gapped_add_kernel"


def test_a_rotated_key_reads_the_previous_keys_entries_until_it_is_dropped(private_cache: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         fresh_state) -> None:
    old, new = write_key(tmp_path / "old.key"), write_key(tmp_path / "new.key")
    monkeypatch.setenv("TRITONPLUG_FLEET_KEY", str(old))
    run(gapped_add_kernel)
    fresh_state.reset()
    monkeypatch.setenv("TRITONPLUG_FLEET_KEY", str(new))
    monkeypatch.setenv("TRITONPLUG_FLEET_KEY_PREVIOUS", str(old))
    before = tritonplug.compile_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(run(gapped_add_kernel), X + Y)
    assert counted(before) == {"compiled": 0, "disk_hits": 1}
    fresh_state.reset()
    monkeypatch.delenv("TRITONPLUG_FLEET_KEY_PREVIOUS")
    before = tritonplug.compile_stats()
    with pytest.warns(RuntimeWarning, match="signed by an unknown key"):
        np.testing.assert_array_equal(run(gapped_add_kernel), X + Y)
    assert counted(before) == {"compiled": 1, "disk_hits": 0}


def test_unsigned_entries_made_before_the_key_was_set_are_compiled_again(private_cache: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        fresh_state) -> None:
    run(gapped_add_kernel)
    fresh_state.reset()
    monkeypatch.setenv("TRITONPLUG_FLEET_KEY", str(write_key(tmp_path / "fleet.key")))
    before = tritonplug.compile_stats()
    with pytest.warns(RuntimeWarning, match="unsigned"):
        np.testing.assert_array_equal(run(gapped_add_kernel), X + Y)
    assert counted(before) == {"compiled": 1, "disk_hits": 0}


# --- links inside the cache directory -------------------------------------------------------------------------------

@pytest.mark.parametrize("linked", ["bucket", "entries"])
def test_a_linked_directory_in_the_cache_is_refused_never_followed(linked: str, tmp_path: Path) -> None:
    k = hashlib.sha256(b"linked").hexdigest()
    planted = DiskCache(tmp_path / "elsewhere")  # a directory of entries someone else filled
    assert planted.put(k, BINARY)
    cache = DiskCache(tmp_path / "cache")
    if linked == "bucket":
        (cache.directory / "entries").mkdir(mode=0o700)
        link, target = cache.directory / "entries" / k[:2], planted.directory / "entries" / k[:2]
    else:
        link, target = cache.directory / "entries", planted.directory / "entries"
    link.symlink_to(target)
    with pytest.warns(RuntimeWarning, match="symbolic link") as caught:
        assert cache.get(k) is None
        assert cache.get(k) is None
    assert len(caught) == 1 and str(link) in str(caught[0].message)
    assert not link.is_symlink() and planted.get(k) == BINARY, "the link is removed, what it pointed to left alone"
    assert cache.put(k, BINARY) and cache.get(k) == BINARY and not link.is_symlink()


def test_tuning_records_are_signed_too(private_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record picks which of a call's configurations runs: one written before the key was set is refused, named
    once, and treated as missing; one written with the key is read back."""
    from tritonplug.tuning.records import TuningRecord, target_fields
    from tritonplug.tuning.store import TuningStore

    record = TuningRecord("src", "cuda", target_fields("cuda", 90, 32), {"args": {}, "dtypes": [], "constexprs": {}},
                          {"BLOCK": 128}, {"kernel": "k"})
    assert TuningStore().put(record) and TuningStore().lookup(record.identity) == record
    monkeypatch.setenv("TRITONPLUG_FLEET_KEY", str(write_key(tmp_path / "fleet.key")))
    store = TuningStore()
    with pytest.warns(RuntimeWarning, match="refused the cache entry .*tuning.*: unsigned") as caught:
        assert store.lookup(record.identity) is None
    assert len(caught) == 1 and "records them anew" in str(caught[0].message)
    assert store.put(record) and TuningStore().lookup(record.identity) == record


def test_an_entry_file_linked_to_a_real_entry_is_refused_never_followed(tmp_path: Path) -> None:
    """A link to another key's good entry, at this key's path: named once, removed, a miss (a dangling link is damage,
    healed silently as before: tests/test_cache_safety.py)."""
    k, other = hashlib.sha256(b"mine").hexdigest(), hashlib.sha256(b"theirs").hexdigest()
    cache = DiskCache(tmp_path / "cache")
    assert cache.put(other, BINARY) and cache.put(k, Binary("mine", "cubin", {"cubin": b"\x02"}, {}))
    link = cache.directory / "entries" / k[:2] / f"{k}.bin"
    link.unlink()
    link.symlink_to(cache.directory / "entries" / other[:2] / f"{other}.bin")
    with pytest.warns(RuntimeWarning, match="a symbolic link where the cache keeps an entry file") as caught:
        assert cache.get(k) is None
    assert len(caught) == 1 and str(link) in str(caught[0].message) and not link.exists() and cache.get(other) == BINARY
