"""What both plugin managers (backends, remote caches) share: loading a group's entry points, registering a plugin
with pluggy, checking its hooks, asking it for its own description and entering the settings it declares.

A plugin that fails to import, implements hooks that do not match the specs, or raises while describing itself is
reported by the manager (the ``report`` it passes) naming the plugin; the others keep working. A plugin must
implement every required hook and no hook without a spec (a misspelt name would otherwise be ignored silently), and
its description comes from its own info hook, never from another plugin's.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pluggy

from tritonplug import settings
from tritonplug.errors import PluginError

#: The optional hook, in both managers' specs, through which a plugin declares its own ``TRITONPLUG_*`` settings.
DECLARE_SETTINGS = "tritonplug_declare_settings"


def load_entry_points(group: str, skip: Collection[str], what: str, register: Callable[[object, str, str], Any],
                      report: Callable[[str], None]) -> None:
    """Import each entry point of ``group`` but those named in ``skip`` and ``register(plugin, name, source)`` it;
    one that fails to import is ``report``-ed as ``what`` (``plugin``, ``cache plugin``) and skipped: a plugin's
    import must never take the user's process down."""
    for ep in importlib.metadata.entry_points(group=group):
        if ep.name in skip:
            continue
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as exc:
            report(f"{what} {ep.name!r} ({ep.value}) failed to import: {type(exc).__name__}: {exc}")
            continue
        register(plugin, ep.name, f"entry point {ep.name} = {ep.value}")


def entry_point_names(group: str) -> set[str]:
    """The names of the installed entry points of ``group`` (without importing them)."""
    return {ep.name for ep in importlib.metadata.entry_points(group=group)}


def register(manager: pluggy.PluginManager, plugin: object, label: str, what: str, specs: str) -> None:
    """Register ``plugin`` with pluggy; ``PluginError`` naming ``what`` if its hooks' signatures do not match the
    ``specs`` module (named in the error)."""
    try:
        manager.register(plugin, name=f"{label}@{id(plugin)}")
    except (pluggy.PluginValidationError, ValueError) as exc:
        detail = re.sub(r"@\d+'", "'", " ".join(str(exc).split()))  # one line, without our registration id
        raise PluginError(f"{what} does not match the {specs} hook specs: {detail}") from exc


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


def declare_settings(manager: pluggy.PluginManager, plugin: object, owner: str, what: str
                     ) -> tuple[settings.Setting[Any], ...]:
    """Enter the settings ``plugin`` declares (none if it lacks the hook) as owned by ``owner`` (its backend or
    cache plugin name); ``PluginError`` naming ``what`` and the other owner when they are refused."""
    if DECLARE_SETTINGS not in {caller.name for caller in manager.get_hookcallers(plugin) or []}:
        settings.withdraw(owner)
        return ()
    declared = own_answer(manager, plugin, DECLARE_SETTINGS, what)
    try:
        return settings.declare(owner, declared if declared is not None else ())
    except settings.DeclarationError as exc:
        raise PluginError(f"{what} ({owner}) {exc}") from None
