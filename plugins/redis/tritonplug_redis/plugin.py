"""The ``tritonplug.caches`` entry point: opens ``redis://`` and ``rediss://`` URLs.

``TRITONPLUG_REMOTE_CACHE=redis://[user:password@]host:port/db[?options]`` (``rediss://`` for TLS, with
redis-py's ``ssl_*`` options, e.g. ``ssl_ca_certs=/path/ca.pem``). Options of ours:

- ``mode=read``: a consumer that never writes and never claims (CI, untrusted hosts); default ``readwrite``;
- ``max_entry_bytes=N``: entries larger than this are not published (default 64 MiB);
- ``ttl_s=S``: entries expire after S seconds (default: never; pair with ``maxmemory-policy allkeys-lru``);
- ``timeout_s=S``: connect and read timeout (default 1).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from tritonplug.cache_hookspecs import hookimpl
from tritonplug.cache_records import RemoteCacheInfo
from tritonplug_redis.store import RedisStore, parse_url

SCHEMES = ("redis", "rediss")


def _version() -> str:
    try:
        return version("tritonplug-redis")
    except PackageNotFoundError:
        return "0+source"


@hookimpl
def tritonplug_cache_info() -> RemoteCacheInfo:
    return RemoteCacheInfo(name="redis", schemes=SCHEMES, version=_version(),
                           description="a Redis server shared by a fleet (redis://, rediss:// for TLS)")


@hookimpl
def tritonplug_cache_open(url: str) -> RedisStore | None:
    if not url.lower().startswith(tuple(f"{s}://" for s in SCHEMES)):
        return None
    return RedisStore(parse_url(url))
