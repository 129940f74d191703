"""The remote tier's host side: cache plugins loaded and reported like backends, and JAX's coordination service
as a zero-setup tier shared by the processes of one ``jax.distributed`` job (real processes on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
from helpers import for_backend

from tritonplug import cache_hookspecs
from tritonplug.cache import plugins as cache_plugins
from tritonplug.cache.remote import RemoteCaches, configured_url
from tritonplug.cache_records import RemoteCacheInfo

CHILD = Path(__file__).resolve().parent / "fleet_child.py"
# The hosts lower for sm_90 (a cacheable target) without a GPU: they need the CUDA backend.
lowers_for_cuda = for_backend("cuda")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_job(processes: int, configs: int, salt: int, cache_dirs: tuple[str, ...] = (), **env: str) -> list[dict]:
    """``processes`` hosts of one jax.distributed job (CPU), each with a cache directory of its own (``cache_dirs``'
    first ones, then new ones)."""
    coordinator = f"127.0.0.1:{free_port()}"
    children = []
    for rank in range(processes):
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONPLUG_REMOTE")}
        cache_dir = cache_dirs[rank] if rank < len(cache_dirs) else tempfile.mkdtemp(prefix="tritonplug-host-")
        child_env.update(TRITONPLUG_CACHE_DIR=cache_dir, FLEET_RANK=str(rank),
                         FLEET_COORDINATOR=coordinator, FLEET_PROCESSES=str(processes),
                         TRITONPLUG_COMPILE_WORKERS="2", **env)
        children.append(subprocess.Popen([sys.executable, str(CHILD), str(configs), str(salt)], env=child_env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    reports = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-4000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


@lowers_for_cuda
def test_processes_of_one_jax_distributed_job_compile_each_key_once() -> None:
    reports = start_job(3, 4, 201)
    assert sum(r["stats"]["compiled"] for r in reports) == 4
    assert sum(r["stats"]["remote_published"] for r in reports) == 4
    for r in reports:
        assert r["stats"]["compiled"] + r["stats"]["remote_hits"] == 4 and not r["warnings"]


def warm_disk(tmp_path: Path, salt: int) -> tuple[Path, str]:
    """A fleet key, and a cache directory that one host (no job) filled with the 2 configurations of ``salt``."""
    key = tmp_path / "fleet.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    warm = str(tmp_path / "warm-cache")
    before = subprocess.run([sys.executable, str(CHILD), "2", str(salt)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TRITONPLUG_CACHE_DIR": warm, "TRITONPLUG_FLEET_KEY": str(key),
                                 "TRITONPLUG_COMPILE_WORKERS": "2"})
    assert before.returncode == 0 and json.loads(before.stdout.splitlines()[-1])["stats"]["compiled"] == 2
    return key, warm


@lowers_for_cuda
def test_a_kernel_one_process_has_on_disk_is_offered_to_its_peers(tmp_path: Path) -> None:
    """After a restart, rank 0 finds the kernels on its own disk: it publishes them through the coordination service,
    and rank 1 (an empty disk) fetches them instead of compiling them again. Signed entries, as a fleet would have."""
    key, warm = warm_disk(tmp_path, 203)
    rank_0, rank_1 = start_job(2, 2, 203, (warm,), FLEET_RANK_0_FIRST="1", TRITONPLUG_FLEET_KEY=str(key))
    assert rank_0["stats"]["disk_hits"] == 2 and rank_0["stats"]["remote_published"] == 2
    assert rank_1["stats"]["compiled"] == 0 and rank_1["stats"]["remote_hits"] == 2
    assert not rank_0["warnings"] and not rank_1["warnings"]


@lowers_for_cuda
def test_forged_entries_in_the_coordination_service_are_refused_and_replaced(tmp_path: Path) -> None:
    """Rank 0 finds forged entries under both keys (another configuration's payload re-encoded unsigned, and signed
    with a key of the forger's own): it names each once, compiles both and publishes them over the forgeries; rank 1
    then fetches the good ones."""
    from tritonplug import settings
    from tritonplug.cache.entries import decode_entry, encode_entry
    from tritonplug.cache.remote import namespace
    from tritonplug.cache.signing import FleetKey, FleetKeys, fingerprint, fleet_keys

    key, warm = warm_disk(tmp_path, 204)
    (k0, good0), (k1, good1) = sorted((p.stem, p.read_bytes()) for p in Path(warm).glob("entries/*/*.bin"))
    with settings.FLEET_KEY.overridden(str(key)):  # read as the hosts read it (white space around the bytes dropped)
        ours = fleet_keys()
    other = decode_entry(k1, good1, ours)
    secret = b"the forger's own key, 32 bytes.."
    theirs = FleetKeys(FleetKey(secret, fingerprint(secret), "X"))
    forged = {k0: encode_entry(k0, other, FleetKeys()), k1: encode_entry(k1, decode_entry(k0, good0), theirs)}
    plant = tmp_path / "plant.json"
    plant.write_text(json.dumps({f"{namespace()}/{k}": v.hex() for k, v in forged.items()}))
    rank_0, rank_1 = start_job(2, 2, 204, FLEET_RANK_0_FIRST="1", FLEET_PLANT=str(plant), TRITONPLUG_FLEET_KEY=str(key))
    assert rank_0["stats"]["compiled"] == 2 and rank_0["stats"]["remote_published"] == 2
    named = sorted(w for w in rank_0["warnings"] if "refused the cache entry" in w)
    assert len(named) == 2 and all("jax://" in w for w in named), rank_0["warnings"]
    assert k0 in named[0] + named[1] and k1 in named[0] + named[1]
    assert any("unsigned" in w for w in named) and any("signed by an unknown key" in w for w in named)
    assert rank_1["stats"]["compiled"] == 0 and rank_1["stats"]["remote_hits"] == 2 and not rank_1["warnings"]


@lowers_for_cuda
def test_the_coordination_tier_can_be_turned_off() -> None:
    reports = start_job(2, 2, 202, TRITONPLUG_REMOTE_CACHE="off")
    assert [r["stats"]["compiled"] for r in reports] == [2, 2]
    assert all(r["stats"]["remote_hits"] == 0 for r in reports)


class NoOpenHook:
    @staticmethod
    @cache_hookspecs.hookimpl
    def tritonplug_cache_info() -> RemoteCacheInfo:
        return RemoteCacheInfo("half", ("half",), "1")


class RaisingInfo:
    @staticmethod
    @cache_hookspecs.hookimpl
    def tritonplug_cache_info() -> RemoteCacheInfo:
        raise RuntimeError("boom")

    @staticmethod
    @cache_hookspecs.hookimpl
    def tritonplug_cache_open(url: str) -> None:
        return None


class ReturnsJunk:
    @staticmethod
    @cache_hookspecs.hookimpl
    def tritonplug_cache_info() -> RemoteCacheInfo:
        return RemoteCacheInfo("junk", ("junk",), "1")

    @staticmethod
    @cache_hookspecs.hookimpl
    def tritonplug_cache_open(url: str) -> object:
        return object()


@pytest.mark.parametrize(("plugin", "message"), [
    (NoOpenHook, "lacks hooks ['tritonplug_cache_open']"),
    (RaisingInfo, "raised in tritonplug_cache_info: RuntimeError: boom"),
])
def test_a_broken_cache_plugin_is_reported_by_name(plugin: type, message: str) -> None:
    plugins = cache_plugins.CachePlugins()
    with pytest.warns(RuntimeWarning, match="cache plugin 'broken'") as caught:
        assert plugins.register(plugin, "broken", "test") is None
    assert message in str(caught[0].message) and message in plugins.problems[0]
    assert plugins.register(ReturnsJunk, "junk", "test") is not None  # the next plugin still loads


def test_a_store_without_the_store_methods_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    plugins = cache_plugins.CachePlugins()
    plugins.register(ReturnsJunk, "junk", "test")
    with pytest.raises(Exception, match="lacks the RemoteStore methods"):
        plugins.for_url("junk://x").open("junk://x")


@pytest.mark.parametrize(("url", "message"), [
    ("nosuch://host", "no cache plugin serves the scheme 'nosuch'"),
    ("jax://", "needs jax.distributed.initialize"),
    ("jax://?mode=write", "mode must be 'read' or 'readwrite'"),
])
def test_an_unusable_url_warns_and_lowering_goes_on_without_a_remote_tier(monkeypatch: pytest.MonkeyPatch,
                                                                          url: str, message: str) -> None:
    monkeypatch.setenv("TRITONPLUG_REMOTE_CACHE", url)
    caches = RemoteCaches()
    with pytest.warns(RuntimeWarning, match="no remote kernel cache") as caught:
        assert caches.current() is None
    assert message in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert caches.current() is None  # warned once, not on every compile
    assert message in caches.status()


def test_off_and_unset_mean_no_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("off", "0", ""):
        monkeypatch.setenv("TRITONPLUG_REMOTE_CACHE", value)
        assert configured_url() is None  # this process never ran jax.distributed.initialize
    assert "none" in RemoteCaches().status()


def test_passwords_are_redacted() -> None:
    assert cache_plugins.redact("redis://user:pa55@host:1/0") == "redis://user:***@host:1/0"
    assert cache_plugins.redact("redis://:pa55@host:1/0") == "redis://:***@host:1/0"
    assert cache_plugins.redact("redis://host:1/0") == "redis://host:1/0"


CLAIMS_SCRIPT = """
import os, sys, time
os.environ["JAX_PLATFORMS"] = "cpu"
import jax
jax.distributed.initialize(sys.argv[1], 1, 0, initialization_timeout=60)
from tritonplug.adapters import jax_compat
from tritonplug.cache.jax_coordination import CoordinationStore
runtime = jax_compat.distributed_runtime()
a, b = (CoordinationStore(runtime, writable=True, max_entry_bytes=0) for _ in range(2))
reader = CoordinationStore(runtime, writable=False, max_entry_bytes=0)
assert a.get("k") is None and a.put("k", b"v") and b.get("k") == b"v"
assert not reader.put("k", b"w") and not reader.claim("k", 5) and a.get("k") == b"v"
assert a.claim("k", 0.5) and a.claim("k", 0.5), "taken, then renewed"
assert not b.claim("k", 0.5), "a live claim of another holder"
time.sleep(0.7)
assert b.claim("k", 5), "an expired claim is taken over"
assert not a.claim("k", 5), "the old holder learns it lost the claim"
b.release("k")
assert a.claim("k", 5) and not b.claim("k", 5), "a released claim is free again"
a.release("k")
b.release("k")  # not b's: no effect
assert b.claim("k", 5)
print("claims ok")
"""


def test_coordination_store_claims_expire_renew_and_release() -> None:
    done = subprocess.run([sys.executable, "-c", CLAIMS_SCRIPT, f"127.0.0.1:{free_port()}"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "claims ok" in done.stdout, done.stderr[-4000:]
