"""Which remote tier this process uses, opened once per URL; what ``tritonplug info`` shows of it.

``TRITONPLUG_REMOTE_CACHE=<url>`` names a store served by a cache plugin (``redis://``, ``rediss://`` from
``tritonplug-redis``; ``jax://`` built in); with no URL set, a process that ran ``jax.distributed.initialize``
with several processes uses the job's coordination service (``jax://``); ``TRITONPLUG_REMOTE_CACHE=off``
turns the tier off. A URL that cannot be opened costs one warning: kernels are then compiled locally.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import threading
import warnings
from typing import Any

from tritonplug import jax_compat
from tritonplug.cache_records import StoreDescription
from tritonplug.remote_tier import RemoteTier, stats

log = logging.getLogger("tritonplug.remote")

URL_ENV = "TRITONPLUG_REMOTE_CACHE"
CLAIM_ENV = "TRITONPLUG_REMOTE_CLAIM_S"  # claim lifetime; renewed every third of it while compiling
WAIT_ENV = "TRITONPLUG_REMOTE_WAIT_S"  # longest wait for another host's entry before compiling it here
DEFAULT_CLAIM_S = 30.0
DEFAULT_WAIT_S = 180.0
_OFF = {"0", "off", "none", "false", "no"}

_opened: dict[str, RemoteTier | None] = {}  # URL → its tier (None: could not be opened; warned once)
_open_errors: dict[str, str] = {}  # URL → why it could not be opened
_open_lock = threading.Lock()


def configured_url() -> str | None:
    """The store this process should use: ``TRITONPLUG_REMOTE_CACHE``, else ``jax://`` in a multi-process
    ``jax.distributed`` job, else ``None``."""
    url = os.environ.get(URL_ENV, "").strip()
    if url.lower() in _OFF:
        return None
    if url:
        return url
    runtime = jax_compat.distributed_runtime()
    return "jax://" if runtime is not None and runtime.num_processes > 1 else None


def current() -> RemoteTier | None:
    """The remote tier to use now, opened on first use; ``None`` when there is none or it is off."""
    url = configured_url()
    if url is None:
        return None
    with _open_lock:
        if url not in _opened:
            _opened[url] = _open(url)
        tier = _opened[url]
    return None if tier is None or tier.off else tier


def _open(url: str) -> RemoteTier | None:
    from tritonplug.cache_plugins import get_cache_plugins, redact
    from tritonplug.errors import PluginError

    try:
        claim_s, wait_s = _seconds(CLAIM_ENV, DEFAULT_CLAIM_S), _seconds(WAIT_ENV, DEFAULT_WAIT_S)
        store = get_cache_plugins().for_url(url).open(url)
        if store is None:
            raise PluginError(f"the cache plugin serving {redact(url)!r} declined to open it")
        try:
            description = store.describe()
        except Exception as exc:
            raise PluginError(f"the store opened for {redact(url)!r} raised in describe(): {exc}") from exc
        if not isinstance(description, StoreDescription):
            raise PluginError(f"the store opened for {redact(url)!r}: describe() returned {description!r:.100}, "
                              f"not a StoreDescription")
        tier = RemoteTier(store, namespace(), claim_s, wait_s)
    except (ValueError, PluginError) as exc:
        _open_errors[url] = str(exc)
        warnings.warn(f"tritonplug: no remote kernel cache: {exc}", RuntimeWarning, stacklevel=3)
        return None
    log.info("remote kernel cache: %s", tier.location)
    return tier


def _seconds(variable: str, default: float) -> float:
    raw = os.environ.get(variable, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{variable} must be a positive number of seconds, got {raw!r}")
    return value


def namespace() -> str:
    """The per-version key prefix: entries of other tritonplug or Triton versions are never even fetched."""
    return f"tritonplug-{_version('tritonplug')}/triton-{_version('triton')}"


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "0+source"


def status() -> dict[str, Any] | str:
    """What ``tritonplug info`` shows for the remote tier."""
    try:
        url = configured_url()
    except Exception as exc:  # noqa: BLE001 - info reports, never raises
        return f"invalid ({exc})"
    if url is None:
        return "none (set TRITONPLUG_REMOTE_CACHE, or run jax.distributed.initialize with several processes)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reason is reported here instead
        tier = current() or _opened.get(url)
    if tier is None:
        return f"not opened: {_open_errors.get(url, '?')}"
    return tier.status()


def reset() -> None:
    """Close and forget the opened stores (tests change the environment); the counters stay."""
    with _open_lock:
        tiers = [t for t in _opened.values() if t is not None]
        _opened.clear()
        _open_errors.clear()
    for tier in tiers:
        with contextlib.suppress(Exception):
            tier.store.close()


def counters() -> dict[str, int]:
    """The remote tier's process-wide counters, for ``tritonplug.compile_stats()``."""
    return dict(stats)
