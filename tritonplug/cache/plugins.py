"""Loads remote-cache plugins (entry-point group ``tritonplug.caches``) and opens the store a URL names.

Mirrors how :mod:`tritonplug.compile.backends` treats backends: a plugin that fails to import, implements hooks that do
not match :mod:`tritonplug.cache_hookspecs` or raises while describing itself is reported by name (a
``RuntimeWarning`` and :attr:`CachePlugins.problems`, which ``tritonplug info`` lists); the others keep
working. ``TRITONPLUG_DISABLE_PLUGINS`` skips cache plugins by entry-point name, as it does backends.
The built-in plugin for JAX's coordination service is registered like any other, under the name ``jax``.
"""

from __future__ import annotations

import importlib
import re
from urllib.parse import urlsplit

import pluggy

from tritonplug import cache_hookspecs, settings
from tritonplug.adapters import plugin_hooks
from tritonplug.cache_records import RemoteCacheInfo, RemoteStore
from tritonplug.calls import user_warnings
from tritonplug.errors import PluginError

REQUIRED_HOOKS = ("tritonplug_cache_info", "tritonplug_cache_open")
BUILTIN = "tritonplug.cache.jax_coordination"
#: The built-in plugin's name (``TRITONPLUG_DISABLE_PLUGINS=jax`` disables it).
BUILTIN_NAME = "jax"


class CachePlugin:
    """One loaded cache plugin: its description and typed access to its hooks."""

    def __init__(self, manager: pluggy.PluginManager, plugin: object, info: RemoteCacheInfo, source: str):
        self._manager = manager
        self.plugin = plugin
        self.info = info
        self.source = source

    def open(self, url: str) -> RemoteStore | None:
        others = [p for p in self._manager.get_plugins() if p is not self.plugin]
        caller = self._manager.subset_hook_caller("tritonplug_cache_open", remove_plugins=others)
        try:
            store = caller(url=url)
        except ValueError:
            raise
        except Exception as exc:
            raise PluginError(f"cache plugin {self.info.name!r} raised in tritonplug_cache_open: "
                              f"{type(exc).__name__}: {exc}") from exc
        if store is not None and not isinstance(store, RemoteStore):
            raise PluginError(f"cache plugin {self.info.name!r}: tritonplug_cache_open returned "
                              f"{type(store).__name__}, which lacks the RemoteStore methods")
        return store


class CachePlugins:
    """The cache plugins of this process, by URL scheme."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(cache_hookspecs.PROJECT_NAME)
        self.manager.add_hookspecs(cache_hookspecs)
        self.plugins: dict[str, CachePlugin] = {}
        self.problems: list[str] = []

    def load(self) -> None:
        """The built-in coordination-service plugin, then every entry point of ``tritonplug.caches``."""
        disabled = settings.DISABLE_PLUGINS.get()
        if BUILTIN_NAME not in disabled:
            self.register(importlib.import_module(BUILTIN), BUILTIN_NAME, "built in")
        plugin_hooks.load_entry_points(cache_hookspecs.ENTRY_POINT_GROUP, disabled, "cache plugin", self.register,
                                       self._report)
        refused = settings.invalid([p.info.name for p in self.plugins.values()])
        if refused:  # their settings are read from now on: a typo is said once, as the backends' are
            user_warnings.warn(f"tritonplug: invalid settings (each is an error where it is read): "
                               f"{'; '.join(refused)}", UserWarning)

    def register(self, plugin: object, label: str, source: str) -> CachePlugin | None:
        """Register one plugin object; a broken one is reported and skipped."""
        try:
            plugin_hooks.register(self.manager, plugin, label, f"cache plugin {label!r}", "tritonplug cache")
            try:
                info = self._describe(plugin, label)
                plugin_hooks.declare_settings(self.manager, plugin, info.name, f"cache plugin {label!r}")
            except PluginError:
                self.manager.unregister(plugin)
                raise
        except PluginError as exc:
            self._report(str(exc))
            return None
        loaded = CachePlugin(self.manager, plugin, info, source)
        self.plugins[info.name] = loaded
        return loaded

    def _describe(self, plugin: object, label: str) -> RemoteCacheInfo:
        what = f"cache plugin {label!r}"
        plugin_hooks.check_hooks(self.manager, plugin, REQUIRED_HOOKS, what, "tritonplug.cache_hookspecs.hookimpl")
        info = plugin_hooks.own_answer(self.manager, plugin, "tritonplug_cache_info", what)
        if not isinstance(info, RemoteCacheInfo) or not info.name or not isinstance(info.schemes, tuple) \
                or not all(isinstance(s, str) and s for s in info.schemes):
            raise PluginError(f"cache plugin {label!r}: tritonplug_cache_info must return a RemoteCacheInfo with "
                              f"a name and a tuple of URL schemes, got {info!r:.200}")
        for other in self.plugins.values():
            shared = set(other.info.schemes) & set(info.schemes)
            if other.info.name == info.name or shared:
                raise PluginError(f"cache plugin {label!r} ({info.name}) clashes with the loaded {other.info.name!r} "
                                  f"({other.source}) over the name or schemes {sorted(shared)}")
        return info

    def for_url(self, url: str) -> CachePlugin:
        """The plugin serving ``url``'s scheme; ``ValueError`` naming the loaded schemes if none does."""
        scheme = urlsplit(url).scheme.lower() if "://" in url else url.strip().lower()
        for plugin in self.plugins.values():
            if scheme in plugin.info.schemes:
                return plugin
        served = sorted(s for p in self.plugins.values() for s in p.info.schemes)
        if scheme in _BUNDLED:
            hint = (f"; install {_BUNDLED[scheme]}, which ships in this project's repository (not on PyPI): "
                    f"`pip install ./plugins/redis` from a clone")
        else:
            hint = ("; a store for another scheme is a plugin of the `tritonplug.caches` entry-point group "
                    "(see docs/remote-cache.md)")
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE={redact(url)!r}: no cache plugin serves the scheme {scheme!r} "
                         f"(served: {served}){hint}")

    def _report(self, message: str) -> None:
        self.problems.append(message)
        user_warnings.warn(f"tritonplug: {message}", RuntimeWarning)


#: Schemes served by cache plugins that ship in this repository, and their distributions.
_BUNDLED = {"redis": "tritonplug-redis", "rediss": "tritonplug-redis"}


def redact(url: str) -> str:
    """``url`` without the password of its user-info part."""
    return re.sub(r"(://[^/@:]*):[^/@]*@", r"\1:***@", url)
