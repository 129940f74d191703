"""The checks both plugin managers (backends, remote caches) make of a plugin pluggy has just registered.

A plugin must implement every required hook and no hook without a spec (a misspelt name would otherwise be ignored
silently), and its description comes from its own info hook, never from another plugin's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pluggy

from tritonplug.errors import PluginError


def check_hooks(manager: pluggy.PluginManager, plugin: object, required: Sequence[str], what: str,
                hookimpl: str) -> None:
    """``PluginError`` naming ``what`` (e.g. ``plugin 'cuda'``) unless it implements exactly known hooks, all of
    ``required`` among them; ``hookimpl`` names the decorator to use."""
    implemented = {caller.name for caller in manager.get_hookcallers(plugin) or []}
    unknown = sorted(n for n in implemented if not getattr(manager.hook, n).has_spec())
    missing = [h for h in required if h not in implemented]
    if unknown or missing:
        raise PluginError(f"{what} implements unknown hooks {unknown} / lacks hooks {missing} "
                          f"(each hook is a function decorated with {hookimpl})")


def own_answer(manager: pluggy.PluginManager, plugin: object, hook: str, what: str) -> Any:
    """What ``plugin``'s own ``hook`` returns (the other plugins left out); ``PluginError`` naming ``what`` if it
    raises."""
    others = [p for p in manager.get_plugins() if p is not plugin]
    try:
        return manager.subset_hook_caller(hook, others)()
    except Exception as exc:
        raise PluginError(f"{what} raised in {hook}: {type(exc).__name__}: {exc}") from exc
