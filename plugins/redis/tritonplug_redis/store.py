"""A :class:`tritonplug.cache_records.RemoteStore` on a Redis server, through the ``redis`` client.

Entries are plain string values (``SET``/``GET``), claims are ``SET NX PX`` keys holding this store's owner
token, renewed and released by two short Lua scripts that act only when the token is still ours. Every call
is bounded by the connect/read timeout and never retried (the host counts failures and switches the tier
off), so an unreachable or stalled server costs at most a few timeouts.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tritonplug.cache_records import RemoteCacheError, StoreDescription

DEFAULT_MAX_ENTRY_BYTES = 64 << 20
DEFAULT_TIMEOUT_S = 1.0
CLAIM_SUFFIX = "#claim"
_OURS = {"mode", "max_entry_bytes", "ttl_s", "timeout_s"}
_PASSED_TO_REDIS = {"ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_password",
                    "ssl_check_hostname", "client_name", "protocol"}
_PERMANENT = (redis.exceptions.AuthenticationError, redis.exceptions.AuthenticationWrongNumberOfArgsError,
              redis.exceptions.NoPermissionError, redis.exceptions.ReadOnlyError)

# KEYS[1] claim key, ARGV[1] owner token, ARGV[2] lifetime in ms: take it if free, renew it if ours.
_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class RedisSettings:
    """A parsed ``redis://`` URL: what redis-py gets, and our own options."""

    redis_url: str  # without our options
    location: str  # for messages: without the password
    writable: bool
    max_entry_bytes: int
    ttl_s: float
    timeout_s: float


def parse_url(url: str) -> RedisSettings:
    """Validate a ``redis://``/``rediss://`` URL; ``ValueError`` naming the bad part."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("redis", "rediss"):
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE must be a redis:// or rediss:// URL, got scheme {parts.scheme!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE: bad port in {redact(url)!r} ({exc})") from exc
    if not parts.hostname:
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE: no host in {redact(url)!r} (redis://host:port/db)")
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE: the path must be a database number, got {db!r}")
    ours, theirs = {}, []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _OURS:
            ours[name] = value
        elif name in _PASSED_TO_REDIS:
            theirs.append((name, value))
        else:
            raise ValueError(f"TRITONPLUG_REMOTE_CACHE: unknown option {name!r} (ours: {sorted(_OURS)}; passed to "
                             f"redis-py: {sorted(_PASSED_TO_REDIS)})")
    mode = ours.get("mode", "readwrite")
    if mode not in ("read", "readwrite"):
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE: mode must be 'read' or 'readwrite', got {mode!r}")
    max_entry = _number(ours, "max_entry_bytes", DEFAULT_MAX_ENTRY_BYTES, int)
    ttl_s = _number(ours, "ttl_s", 0.0, float)
    timeout_s = _number(ours, "timeout_s", DEFAULT_TIMEOUT_S, float)
    if timeout_s <= 0:
        raise ValueError("TRITONPLUG_REMOTE_CACHE: timeout_s must be positive")
    user = f"{parts.username}@" if parts.username else ""
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    location = f"{parts.scheme}://{user}{host}:{port or 6379}/{db or 0}" + ("?mode=read" if mode == "read" else "")
    redis_url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(theirs, quote_via=quote), ""))
    return RedisSettings(redis_url, location, mode == "readwrite", max_entry, ttl_s, timeout_s)


def _number(options: dict[str, str], name: str, default: Any, kind: type) -> Any:
    if name not in options:
        return default
    try:
        value = kind(options[name])
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE: {name} must be a non-negative number, got {options[name]!r}")
    return value


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class RedisStore:
    """Entries and claims on one Redis database; thread-safe (redis-py's connection pool)."""

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self._owner = f"{os.uname().nodename}.{os.getpid()}.{secrets.token_hex(6)}"
        self._client = redis.Redis.from_url(
            settings.redis_url, socket_timeout=settings.timeout_s, socket_connect_timeout=settings.timeout_s,
            retry=Retry(NoBackoff(), 0), health_check_interval=0)
        self._claim = self._client.register_script(_CLAIM)
        self._release = self._client.register_script(_RELEASE)

    def _run(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _PERMANENT as exc:
            raise RemoteCacheError(f"{type(exc).__name__}: {exc}", permanent=True) from exc
        except redis.exceptions.ResponseError as exc:  # e.g. NOAUTH, or scripting disabled: not going away
            raise RemoteCacheError(f"{type(exc).__name__}: {exc}", permanent=True) from exc
        except (redis.exceptions.RedisError, OSError) as exc:
            raise RemoteCacheError(f"{what}: {type(exc).__name__}: {exc}") from exc

    def get(self, key: str) -> bytes | None:
        return self._run("GET", self._client.get, key)

    def put(self, key: str, data: bytes) -> bool:
        s = self.settings
        if not s.writable or (s.max_entry_bytes and len(data) > s.max_entry_bytes):
            return False
        ttl_ms = int(s.ttl_s * 1000) or None
        self._run("SET", self._client.set, key, data, px=ttl_ms)
        return True

    def claim(self, key: str, ttl_s: float) -> bool:
        if not self.settings.writable:
            return False
        ttl_ms = max(1, int(ttl_s * 1000))
        return bool(self._run("claim", self._claim, keys=[key + CLAIM_SUFFIX], args=[self._owner, ttl_ms]))

    def release(self, key: str) -> None:
        if self.settings.writable:
            self._run("release", self._release, keys=[key + CLAIM_SUFFIX], args=[self._owner])

    def describe(self) -> StoreDescription:
        s = self.settings
        return StoreDescription(plugin="redis", location=s.location, writable=s.writable,
                                max_entry_bytes=s.max_entry_bytes, entry_ttl_s=s.ttl_s,
                                detail=f"timeouts {s.timeout_s:g} s")

    def ping(self) -> None:
        self._run("PING", self._client.ping)

    def close(self) -> None:
        self._client.close()
