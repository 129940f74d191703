"""The declared settings shown: each one's value in the table's words (:func:`show`), what is in effect
(:func:`in_effect`, ``tritonplug info``), and the configuration table (:func:`markdown`; ``tritonplug settings
--markdown``). The settings themselves, and every read of a ``TRITONPLUG_*`` variable, are
:mod:`tritonplug.settings`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonplug.settings import HOST_OWNER, OFF_WORDS, ON_WORDS, Setting, SettingError, declared


def show(value: Any, none_text: str = "none") -> str:
    """A setting's value in the words the settings table uses."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return none_text
    if value == {} or value == frozenset():
        return "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in sorted(value.items()))
    return str(value)


def in_effect() -> dict[str, str]:
    """Each declared setting's value now and where it comes from (``set`` or ``default``), for ``tritonplug info``;
    a value the setting refuses is reported, not raised."""
    report = {}
    for setting in declared():
        source = "set" if setting.is_set() else "default"
        try:
            report[setting.name] = f"{show(setting.get(), setting.none_text)} ({source})"
        except SettingError as exc:
            report[setting.name] = f"invalid ({exc})"
    return report


def markdown(table: Sequence[Setting[Any]] | None = None) -> str:
    """The configuration table of ``table`` (default: :func:`declared`): the host's rows, then each plugin's by
    owner name, each row naming the setting's owner."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = [f"| `{s.name}` | {s.owner} | {cell(s.doc)} | {cell(s.values)} | {cell(s.default_doc)} |"
            for s in sorted(declared() if table is None else table,
                            key=lambda s: "" if s.owner == HOST_OWNER else s.owner)]  # the host's first
    words = ", ".join(f"`{on}`/`{off}`" for on, off in zip(ON_WORDS, OFF_WORDS, strict=True))
    return "\n".join([
        "| variable | owner | meaning | values | default |", "|---|---|---|---|---|", *rows, "",
        f"Every on/off setting takes {words} (any case); a blank value is the default; a value a setting cannot "
        f"take is an error naming the variable, the value and what was expected. The owner is the host "
        f"(`{HOST_OWNER}`) or the plugin that declares the variable; `tritonplug settings --markdown` prints this "
        f"table for the plugins installed.",
    ])
