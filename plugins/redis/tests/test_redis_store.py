"""The Redis store on its own, against a real redis-server: URL options, claims, limits, TTL, tritonplug info."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from tritonplug_redis.plugin import tritonplug_cache_open
from tritonplug_redis.store import RedisStore, parse_url


def test_claims_are_exclusive_renewable_expiring_and_released_only_by_their_holder(server) -> None:
    a, b = RedisStore(parse_url(server.url())), RedisStore(parse_url(server.url()))
    assert a.claim("k", 0.5) and a.claim("k", 0.5) and not b.claim("k", 0.5)
    b.release("k")  # not b's: no effect
    assert not b.claim("k", 0.5)
    time.sleep(0.7)
    assert b.claim("k", 5) and not a.claim("k", 5)
    b.release("k")
    assert a.claim("k", 5)


def test_put_get_limit_ttl_and_read_mode(server) -> None:
    store = RedisStore(parse_url(server.url(query="max_entry_bytes=10&ttl_s=0.5")))
    assert store.get("k") is None
    assert store.put("k", b"0123456789") and store.get("k") == b"0123456789"
    assert not store.put("big", b"x" * 11) and store.get("big") is None
    time.sleep(0.7)
    assert store.get("k") is None  # expired
    reader = RedisStore(parse_url(server.url(query="mode=read")))
    assert not reader.put("k", b"v") and not reader.claim("k", 5) and server.client().keys("*") == []
    assert not reader.describe().writable and "mode=read" in reader.describe().location


@pytest.mark.parametrize(("url", "message"), [
    ("redis://127.0.0.1:6379/0?mode=write", "mode must be 'read' or 'readwrite'"),
    ("redis://127.0.0.1:6379/0?colour=red", "unknown option 'colour'"),
    ("redis://127.0.0.1:6379/zero", "must be a database number"),
    ("redis://127.0.0.1:6379/0?ttl_s=-1", "ttl_s must be a non-negative number"),
    ("redis://127.0.0.1:6379/0?timeout_s=0", "timeout_s must be positive"),
    ("redis:///0", "no host"),
])
def test_bad_urls_are_refused_when_opened(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tritonplug_cache_open(url)


def test_other_schemes_are_not_ours_and_passwords_stay_out_of_descriptions() -> None:
    assert tritonplug_cache_open("jax://") is None
    store = tritonplug_cache_open("rediss://user:hunter2@example.invalid:6380/3?ssl_cert_reqs=none")
    assert store.describe().location == "rediss://user@example.invalid:6380/3" and store.describe().writable


@pytest.mark.parametrize("reachable", [True, False])
def test_tritonplug_info_shows_the_tier_and_whether_it_answers(server, reachable: bool) -> None:
    if not reachable:
        server.stop()
    env = dict(os.environ, TRITONPLUG_REMOTE_CACHE=server.url(), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-m", "tritonplug", "info", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    remote = json.loads(done.stdout)["remote cache"]
    assert remote["store"] == server.url() and remote["plugin"] == "redis" and remote["mode"] == "readwrite"
    assert remote["reachable"] is True if reachable else "ConnectionError" in remote["reachable"]
