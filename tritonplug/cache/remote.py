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
import sys
import threading
import warnings
from typing import Any

from tritonplug import settings
from tritonplug.cache.plugins import CachePlugins, redact
from tritonplug.cache.remote_tier import RemoteTier
from tritonplug.cache_records import StoreDescription
from tritonplug.calls import user_warnings
from tritonplug.errors import PluginError

log = logging.getLogger("tritonplug.remote")

URL_ENV = settings.REMOTE_CACHE.name
CLAIM_ENV = settings.REMOTE_CLAIM_S.name  # claim lifetime; renewed every third of it while compiling
WAIT_ENV = settings.REMOTE_WAIT_S.name  # longest wait for another host's entry before compiling it here


def configured_url() -> str | None:
    """The store this process should use: ``TRITONPLUG_REMOTE_CACHE``, else ``jax://`` in a multi-process
    ``jax.distributed`` job, else ``None``. Never imports JAX (compile workers import this module)."""
    url = settings.REMOTE_CACHE.get()
    if url == settings.OFF:
        return None
    if url:
        return url
    if "jax" not in sys.modules:
        return None
    from tritonplug.adapters import jax_compat

    runtime = jax_compat.distributed_runtime()
    return "jax://" if runtime is not None and runtime.num_processes > 1 else None


class RemoteCaches:
    """The process's remote tier, opened once per URL (owned by the compile service); its counters."""

    def __init__(self) -> None:
        self._opened: dict[str, RemoteTier | None] = {}  # URL → its tier (None: not opened; warned once)
        self._errors: dict[str, str] = {}  # URL → why it could not be opened
        self._plugins: CachePlugins | None = None  # loaded when a store is first asked for
        self._lock = threading.Lock()
        self.stats: dict[str, int] = {"remote_hits": 0, "remote_waits": 0, "remote_published": 0,
                                      "remote_errors": 0}

    def current(self) -> RemoteTier | None:
        """The remote tier to use now, opened on first use; ``None`` when there is none or it is off."""
        refused = None
        try:
            url = configured_url()
        except settings.SettingError as exc:  # not a URL: warned once, as a URL that cannot be opened
            url, refused = settings.REMOTE_CACHE.raw() or "", exc
        if url is None:
            return None
        with self._lock:
            if url not in self._opened:
                self._opened[url] = self._open(url, refused)
            tier = self._opened[url]
        return None if tier is None or tier.off else tier

    def _open(self, url: str, refused: ValueError | None = None) -> RemoteTier | None:
        """Open ``url`` (the lock is held); ``refused``: why the setting is not a URL."""
        try:
            if refused is not None:
                raise refused
            claim_s, wait_s = settings.REMOTE_CLAIM_S.get(), settings.REMOTE_WAIT_S.get()
            if self._plugins is None:
                self._plugins = CachePlugins()
                self._plugins.load()
            store = self._plugins.for_url(url).open(url)
            if store is None:
                raise PluginError(f"the cache plugin serving {redact(url)!r} declined to open it")
            try:
                description = store.describe()
            except Exception as exc:
                raise PluginError(f"the store opened for {redact(url)!r} raised in describe(): {exc}") from exc
            if not isinstance(description, StoreDescription):
                raise PluginError(f"the store opened for {redact(url)!r}: describe() returned "
                                  f"{description!r:.100}, not a StoreDescription")
            tier = RemoteTier(store, namespace(), claim_s, wait_s, self.stats)
        except (ValueError, PluginError) as exc:
            self._errors[url] = str(exc)
            user_warnings.warn(f"tritonplug: no remote kernel cache: {exc}", RuntimeWarning)
            return None
        log.info("remote kernel cache: %s", tier.location)
        return tier

    def status(self) -> dict[str, Any] | str:
        """What ``tritonplug info`` shows: the store, its mode, whether it answers a ping now."""
        try:
            url = configured_url()
        except Exception as exc:  # noqa: BLE001 - info reports, never raises
            return f"invalid ({exc})"
        if url is None:
            return "none (set TRITONPLUG_REMOTE_CACHE, or run jax.distributed.initialize with several processes)"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reason is reported here instead
            tier = self.current() or self._opened.get(url)
        if tier is None:
            return f"not opened: {self._errors.get(url, '?')}"
        return tier.status()

    def load_plugins(self) -> None:
        """Load the cache plugins now if no store was asked for yet: ``tritonplug info`` lists their settings."""
        with self._lock:
            if self._plugins is None:
                self._plugins = CachePlugins()
                self._plugins.load()

    def problems(self) -> list[str]:
        """Cache plugins that failed to load; empty until a store was first asked for."""
        with self._lock:
            return list(self._plugins.problems) if self._plugins is not None else []

    def counters(self) -> dict[str, int]:
        """For ``tritonplug.compile_stats()``."""
        with self._lock:
            return dict(self.stats)

    def reset(self) -> None:
        """Close and forget the opened stores (tests change the environment); the counters stay."""
        with self._lock:
            tiers = [t for t in self._opened.values() if t is not None]
            self._opened.clear()
            self._errors.clear()
            self._plugins = None
        for tier in tiers:
            with contextlib.suppress(Exception):
                tier.store.close()


def namespace() -> str:
    """The per-version key prefix: entries of other tritonplug or Triton versions are never even fetched."""
    return f"tritonplug-{_version('tritonplug')}/triton-{_version('triton')}"


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "0+source"
