"""What is said once about the ``TRITONPLUG_*`` environment when a process first uses tritonplug (the plugins
just loaded): values a setting refuses, a variable no setting has whose name is close to one (a typo), and plugin
names in ``TRITONPLUG_DISABLE_PLUGINS`` that no plugin has. Each is a ``UserWarning`` naming the variable, so a
typo is never silent. A variable that is close to no setting (a tool's own, or the setting of a plugin that is not
installed) is only listed by ``tritonplug info`` ("undeclared variables").
"""

from __future__ import annotations

import difflib
from collections.abc import Collection

from tritonplug import cache_hookspecs, hookspecs, settings
from tritonplug.adapters import plugin_hooks
from tritonplug.cache.plugins import BUILTIN_NAME
from tritonplug.calls import user_warnings

#: How close (difflib's ratio, names without the prefix) an unknown name must be to a setting's to be a typo of it.
_TYPO_CUTOFF = 0.75


def warn_about_settings(loaded_backends: Collection[str]) -> None:
    """Warn about the environment's invalid values, typos and unknown disabled plugins (see the module)."""
    problems = settings.invalid()
    if problems:
        user_warnings.warn(f"tritonplug: invalid settings (each is an error where it is read): {'; '.join(problems)}",
                           UserWarning)
    for name, known in typos():
        user_warnings.warn(f"tritonplug: {name} is set, but no setting has that name, so it is ignored; did you mean "
                           f"{known}?", UserWarning)
    plugins = known_plugins(loaded_backends)
    unknown = sorted(settings.DISABLE_PLUGINS.get() - plugins)
    if unknown:
        user_warnings.warn(f"tritonplug: {settings.DISABLE_PLUGINS.name} names {', '.join(map(repr, unknown))}, which "
                           f"no installed plugin is called, so nothing is disabled for it; the plugins are "
                           f"{', '.join(sorted(plugins))}", UserWarning)


def typos() -> list[tuple[str, str]]:
    """``(variable, setting)`` for each ``TRITONPLUG_*`` variable set that no setting has but one is close to."""
    known = {s.name.removeprefix(settings.PREFIX): s.name for s in settings.declared()}
    found = []
    for name in settings.undeclared():
        close = difflib.get_close_matches(name.removeprefix(settings.PREFIX), known, n=1, cutoff=_TYPO_CUTOFF)
        if close:
            found.append((name, known[close[0]]))
    return found


def known_plugins(loaded_backends: Collection[str]) -> set[str]:
    """The names ``TRITONPLUG_DISABLE_PLUGINS`` can take: every installed backend and cache plugin, by entry point
    (and by backend name), and the built-in coordination-service cache."""
    return {*plugin_hooks.entry_point_names(hookspecs.ENTRY_POINT_GROUP),
            *plugin_hooks.entry_point_names(cache_hookspecs.ENTRY_POINT_GROUP), *loaded_backends, BUILTIN_NAME}
