"""Every ``TRITONPLUG_*`` environment variable, declared once by its owner: its type, default, allowed values and
meaning.

The host declares its own here (:data:`ALL`); a plugin declares its own through the plugin API (the hook
``tritonplug_declare_settings`` of :mod:`tritonplug.hookspecs` and :mod:`tritonplug.cache_hookspecs`, returning
:class:`Setting` records made with this module's constructors, re-exported by :mod:`tritonplug.plugin_kit` and
:mod:`tritonplug.cache_records`), which the plugin loader enters with :func:`declare`; two owners of one name are
refused (:class:`DeclarationError`, naming both). This module names no backend. :func:`declared` (the host's and
the loaded plugins' settings) is what ``tritonplug info``, the typo check (:func:`undeclared`), the first-use check
(:func:`invalid`) and the table (:func:`markdown`; ``tritonplug settings --markdown``) read.

A setting is read from the environment each time it is asked for (``setting.get()``), never frozen at import, so
``os.environ[...] = ...`` before the first call and ``monkeypatch.setenv`` in tests keep working. A blank value is
the default; a value the setting cannot take is a :class:`SettingError` (a ``ValueError``) naming the variable,
the value and what was expected. Every on/off setting takes the same words (:data:`ON_WORDS`, :data:`OFF_WORDS`,
any case); a setting that can be switched off (the remote cache) also takes ``none``.

This is the only module of the host and the bundled plugins that reads a ``TRITONPLUG_*`` variable
(``tests/test_structure_settings.py``). Triton's own variables (``TRITON_CACHE_DIR``...) are Triton's. Standard
library only: compile workers and plugins import it without JAX.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

PREFIX = "TRITONPLUG_"
#: The words of every on/off setting (any case).
ON_WORDS = ("1", "true", "yes", "on")
OFF_WORDS = ("0", "false", "no", "off")
#: What a setting that can be switched off takes for "off"; it then reads as :data:`OFF`.
NONE_WORDS = (*OFF_WORDS, "none")
OFF = "off"
ON_OFF = "on/off"  # the values column of every on/off setting
#: The owner of the host's own settings; a plugin's are owned by the plugin (its backend or cache plugin name).
HOST_OWNER = "tritonplug"
_NAME = re.compile(r"TRITONPLUG_[A-Z0-9_]+")


class SettingError(ValueError):
    """A ``TRITONPLUG_*`` variable set to a value its setting cannot take."""


class DeclarationError(ValueError):
    """A plugin's setting declarations refused: a malformed record, or a name another owner declares."""


class _Refused(ValueError):
    """Raised by a parser whose own words say what is wrong (they follow the variable's name)."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One ``TRITONPLUG_*`` variable: ``get()`` reads, parses and validates it now."""

    name: str
    doc: str  #: one line: what it does (the settings table's "meaning" column)
    kind: str  #: on/off, integer, seconds, choice, path, list, url or target
    values: str  #: the values it takes, in words (the settings table's "values" column)
    default_doc: str  #: the default, in words
    parse: Callable[[str], T]  #: the stripped, non-blank value → the setting's value; ValueError when refused
    default: Callable[[], T]  #: the value when unset or blank
    expected: str = ""  #: what an error says was expected ("must be <expected>"); ``values`` when empty
    host_only: bool = False  #: changes nothing a kernel does: left out of a host kernel's identity
    none_text: str = "none"  #: what a value of ``None`` means, in words (``tritonplug info``)
    owner: str = HOST_OWNER  #: who declares it: the host, or a plugin by its (backend or cache plugin) name

    def raw(self) -> str | None:
        """The variable's value as set, or ``None`` when it is unset or blank."""
        value = os.environ.get(self.name)
        return value if value is not None and value.strip() else None

    def is_set(self) -> bool:
        return self.raw() is not None

    def get(self) -> T:
        """The setting's value now: the environment's, parsed, else the default."""
        raw = self.raw()
        if raw is None:
            return self.default()
        try:
            return self.parse(raw.strip())
        except _Refused as exc:
            raise SettingError(f"{self.name} {exc}") from None
        except (ValueError, TypeError, OverflowError):
            raise SettingError(f"{self.name} must be {self.expected or self.values}, got {raw!r}") from None

    def overridden(self, value: str | None) -> contextlib.AbstractContextManager[None]:
        """The variable set to ``value`` (``None``: unset) for the duration, then as it was; the environment
        stays the one source, so compile workers and a host kernel's identity see it too."""
        return overridden(self.name, value)


@contextlib.contextmanager
def overridden(name: str, value: str | None) -> Iterator[None]:
    """Variable ``name`` set to ``value`` (``None``: unset) for the duration, then as it was (a plugin's setting)."""
    saved = os.environ.get(name)
    _put(name, value)
    try:
        yield
    finally:
        _put(name, saved)


def _put(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


# ------------------------------------------------------------------------------------------- parsers


def on_off(text: str) -> bool:
    """The one on/off vocabulary: :data:`ON_WORDS` are ``True``, :data:`OFF_WORDS` ``False``, any case."""
    word = text.strip().lower()
    if word in ON_WORDS:
        return True
    if word in OFF_WORDS:
        return False
    raise ValueError(text)


def _integer(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(text)
        return value
    return parse


def _seconds(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(text)
    return value


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise ValueError(text)
        return text.lower()
    return parse


def _names(text: str) -> frozenset[str]:
    return frozenset(n.strip() for n in text.split(",") if n.strip())


def _pairs(text: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in sorted(_names(text)):
        platform, sep, name = item.partition(":")
        if not sep or not platform.strip() or not name.strip():
            raise _Refused(f"entries must look like platform:backend, got {item!r}")
        platform, name = platform.strip(), name.strip()
        if pairs.setdefault(platform, name) != name:
            raise _Refused(f"names two backends for platform {platform!r}: {pairs[platform]!r} and {name!r}")
    return pairs


def _inline_mode(text: str) -> bool | str:
    if text.lower() == "auto":
        return "auto"
    return on_off(text)


def _url_or_off(text: str) -> str:
    if text.lower() in NONE_WORDS:
        return OFF
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*://\S*", text):
        raise ValueError(text)
    return text


def _file(text: str) -> str:
    if os.path.isdir(os.path.expanduser(text)):
        raise _Refused(f"names a directory ({text}); it takes a file (`tritonplug tune export` writes one)")
    return text


def _key_file(text: str) -> Path:
    """A fleet key file: a regular file (a link to one is followed: secrets are often mounted so), not empty, that only
    its owner may read or write (whoever can read it can sign entries every host of the fleet runs)."""
    path = Path(text).expanduser()
    try:
        st = path.stat()
    except OSError as exc:
        raise _Refused(f"names {text}, which cannot be read ({exc.strerror}); it takes a key file") from None
    if not stat.S_ISREG(st.st_mode):
        raise _Refused(f"names {text}, which is not a regular file; it takes a key file")
    if st.st_mode & 0o077:
        raise _Refused(f"names {text}, which group or others may access (mode {stat.S_IMODE(st.st_mode):#o}); a "
                       f"fleet key must be readable only by its owner: `chmod 600 {text}`")
    if st.st_size == 0:
        raise _Refused(f"names {text}, which is empty; it takes a key file (`head -c 32 /dev/urandom > {text}`)")
    return path


def _cache_directory() -> Path:
    """``$XDG_CACHE_HOME/tritonplug`` (an absolute one: XDG says to ignore a relative path), else
    ``~/.cache/tritonplug``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "tritonplug"


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value


# ------------------------------------------------------------------------------------------ settings
# One constructor per kind, as Triton's ``knobs.py`` has ``env_bool``...: tests hold each kind to one behaviour.


def boolean(name: str, doc: str, default: bool, host_only: bool = False, owner: str = HOST_OWNER) -> Setting[bool]:
    return Setting(name, doc, "on/off", ON_OFF, "on" if default else "off", on_off, _const(default),
                   f"on or off: one of {', '.join(ON_WORDS + OFF_WORDS)} (any case)", host_only, owner=owner)


def integer(name: str, doc: str, default: int | Callable[[], int], default_doc: str, minimum: int = 0,
            expected: str = "", host_only: bool = False, owner: str = HOST_OWNER) -> Setting[int]:
    values = "a non-negative integer" if minimum == 0 else f"an integer, at least {minimum}"
    return Setting(name, doc, "integer", values, default_doc, _integer(minimum),
                   default if callable(default) else _const(default), expected, host_only, owner=owner)


def seconds(name: str, doc: str, default: float, host_only: bool = False, owner: str = HOST_OWNER
            ) -> Setting[float]:
    return Setting(name, doc, "seconds", "a positive number of seconds", f"{default:g}", _seconds, _const(default),
                   host_only=host_only, owner=owner)


def choice(name: str, doc: str, choices: tuple[str, ...], default: str | None, host_only: bool = False,
           owner: str = HOST_OWNER) -> Setting[Any]:
    return Setting(name, doc, "choice", ", ".join(f"`{c}`" for c in choices), f"`{default}`" if default else "off",
                   _choice(*choices), _const(default), f"one of {', '.join(choices)}", host_only, none_text="off",
                   owner=owner)


CACHE_DIR: Setting[Path] = Setting(
    "TRITONPLUG_CACHE_DIR", "compiled-kernel cache directory (created 0700)", "path", "a directory",
    "`$XDG_CACHE_HOME/tritonplug` or `~/.cache/tritonplug`", lambda text: Path(text).expanduser(),
    _cache_directory, host_only=True)
CACHE_MAX_BYTES = integer("TRITONPLUG_CACHE_MAX_BYTES", "LRU size bound of the cache, in bytes", 1 << 30, "1 GiB",
                          host_only=True)
CACHE = boolean("TRITONPLUG_CACHE", "the disk cache of compiled kernels and tuning records (off: nothing is kept "
                "on disk)", True, host_only=True)
COMPILE_WORKERS = integer(
    "TRITONPLUG_COMPILE_WORKERS", "compile worker processes, at most; `0` compiles in-process. A compile starts no "
    "more workers than it has jobs; a value above the CPU count warns", lambda: min(os.cpu_count() or 1, 8),
    "`min(cpus, 8)`", expected="a non-negative integer (0 compiles in-process)", host_only=True)
COMPILE_TIMEOUT = seconds("TRITONPLUG_COMPILE_TIMEOUT", "how long one compile job may run before it is killed "
                          "with its process group; a worker that does not start in as long (at least 60 s) is "
                          "replaced and the job retried once", 600.0, host_only=True)
LOG = choice("TRITONPLUG_LOG", "log compiles and cache events on the `tritonplug` logger at this level",
             ("debug", "info", "warning", "error"), None, host_only=True)
DISABLE_PLUGINS: Setting[frozenset[str]] = Setting(
    "TRITONPLUG_DISABLE_PLUGINS", "skip these plugins (backends and remote caches) by entry-point name", "list",
    "`name,name...`", "none", _names, _const(frozenset()), host_only=True)
BACKENDS: Setting[dict[str, str]] = Setting(
    "TRITONPLUG_BACKENDS", "choose a backend where several claim a platform", "list", "`platform:name,...`", "none",
    _pairs, dict)  # a new dict each time: callers may change theirs
EARLY_COMPILE = boolean("TRITONPLUG_EARLY_COMPILE", "compile already when a call is traced (off: when it is "
                        "lowered)", True)
CHECK_RULES = boolean("TRITONPLUG_CHECK_RULES", "a partitioned function checks its rule at its first call "
                      "(`tritonplug.check_rule` on the call's arrays, or made-up values of their shapes inside a "
                      "jit) and refuses a rule under which a split changes the result", False, host_only=True)
TUNING_FILE: Setting[str | None] = Setting(
    "TRITONPLUG_TUNING_FILE", "a tuning file whose records take precedence over those tuned here (read-only)",
    "path", "a file", "none", _file, _const(None), host_only=True)
INLINE: Setting[bool | str] = Setting(
    "TRITONPLUG_INLINE", "the inline mode of calls whose call and kernel set none: on (lowered as their translation "
    "to XLA ops), off (launched) or auto (docs/using.md)", "choice", "on/off, `auto`", "off", _inline_mode,
    _const(False), f"on, off or auto: one of {', '.join(ON_WORDS + OFF_WORDS)}, auto (any case)", host_only=True)
REMOTE_CACHE: Setting[str | None] = Setting(
    "TRITONPLUG_REMOTE_CACHE", "remote kernel cache: `redis://[user:pw@]host:port/db[?mode=read&max_entry_bytes=N"
    "&ttl_s=S&timeout_s=S]`, `rediss://` (TLS) or `jax://` (the job's coordination service)", "url",
    "a URL, or off (`off`, `none`, any off word)",
    "the coordination service inside a multi-process `jax.distributed` job, else none", _url_or_off, _const(None),
    f"a URL such as redis://host:6379/0 or jax://, or one of {', '.join(NONE_WORDS)}")
REMOTE_CLAIM_S = seconds("TRITONPLUG_REMOTE_CLAIM_S", "how long a host's claim on a key lasts (renewed while it "
                         "compiles)", 30.0)
REMOTE_WAIT_S = seconds("TRITONPLUG_REMOTE_WAIT_S", "how long the other hosts wait for that entry before "
                        "compiling it themselves", 180.0)
FLEET_KEY: Setting[Path | None] = Setting(
    "TRITONPLUG_FLEET_KEY", "a key file (mode 0600, at least 16 bytes): every cache entry written is signed with it "
    "(HMAC-SHA256), and an entry without a valid signature is never run (docs/remote-cache.md)", "path",
    "a file only its owner can read", "none (entries are not signed)", _key_file, _const(None), host_only=True)
FLEET_KEY_PREVIOUS: Setting[Path | None] = Setting(
    "TRITONPLUG_FLEET_KEY_PREVIOUS", "the fleet key before the last rotation: entries it signed are still "
    "accepted (never used to sign)", "path", "a file only its owner can read", "none", _key_file, _const(None),
    host_only=True)

#: The host's own settings, in the table's order (docs/configuration.md).
ALL: tuple[Setting[Any], ...] = (
    CACHE_DIR, CACHE_MAX_BYTES, CACHE, COMPILE_WORKERS, COMPILE_TIMEOUT, LOG, DISABLE_PLUGINS, BACKENDS,
    EARLY_COMPILE, CHECK_RULES, TUNING_FILE, INLINE, REMOTE_CACHE, REMOTE_CLAIM_S, REMOTE_WAIT_S, FLEET_KEY,
    FLEET_KEY_PREVIOUS)
BY_NAME: dict[str, Setting[Any]] = {s.name: s for s in ALL}


# --------------------------------------------------------------------------- the plugins' declarations

_PLUGINS: dict[str, tuple[Setting[Any], ...]] = {}  # owner → its settings, in loading order


def declare(owner: str, specs: Iterable[Any]) -> tuple[Setting[Any], ...]:
    """Enter the settings plugin ``owner`` declares (replacing what ``owner`` declared before: a reload); returns
    them owned by ``owner``. :class:`DeclarationError` for a record that is no :class:`Setting`, a name outside
    ``TRITONPLUG_[A-Z0-9_]+``, a record owned by someone else, a name declared twice, a host setting, or a name
    another plugin declares (the message names both owners)."""
    if isinstance(specs, (str, bytes, Setting)) or not isinstance(specs, Iterable):
        raise DeclarationError(f"declares {specs!r:.200}, not a sequence of tritonplug.settings.Setting records")
    owned: list[Setting[Any]] = []
    for spec in specs:
        if not isinstance(spec, Setting):
            raise DeclarationError(f"declares {spec!r:.200}, not a tritonplug.settings.Setting record")
        if not isinstance(spec.name, str) or not _NAME.fullmatch(spec.name):
            raise DeclarationError(f"declares a setting named {spec.name!r}; a name is TRITONPLUG_ followed by "
                                   f"capital letters, digits and underscores")
        if spec.owner not in (HOST_OWNER, owner):
            raise DeclarationError(f"declares {spec.name} as owned by {spec.owner!r}, not by itself ({owner!r})")
        if spec.name in BY_NAME:
            raise DeclarationError(f"declares {spec.name}, a setting of the host ({HOST_OWNER}); a plugin declares "
                                   f"only its own variables")
        if any(spec.name == o.name for o in owned):
            raise DeclarationError(f"declares {spec.name} twice")
        for other, theirs in _PLUGINS.items():
            if other != owner and any(spec.name == t.name for t in theirs):
                raise DeclarationError(f"declares {spec.name}, which plugin {other!r} declares already; "
                                       f"one variable has one owner")
        owned.append(replace(spec, owner=owner))
    _PLUGINS[owner] = tuple(owned)
    return _PLUGINS[owner]


def withdraw(owner: str) -> None:
    """Forget the settings of plugin ``owner`` (unloaded, or refused after it declared them)."""
    _PLUGINS.pop(owner, None)


def declared(owners: Sequence[str] | None = None) -> tuple[Setting[Any], ...]:
    """The host's settings, then each loaded plugin's in loading order; with ``owners``, only theirs."""
    every = (*ALL, *(s for specs in _PLUGINS.values() for s in specs))
    return every if owners is None else tuple(s for s in every if s.owner in owners)


def lookup(name: str) -> Setting[Any] | None:
    """The setting named ``name``, the host's or a loaded plugin's; ``None`` when none declares it (not loaded)."""
    return next((s for s in declared() if s.name == name), None)


# ---------------------------------------------------------------------------------- the whole set


def kernel_environment() -> list[tuple[str, str]]:
    """The ``TRITONPLUG_*`` variables set now that may change what a kernel does: all but the host-only
    settings (the loaded plugins' included; an undeclared variable counts), for a host kernel's identity."""
    host_only = {s.name for s in declared() if s.host_only}
    return sorted((k, v) for k, v in os.environ.items() if k.startswith(PREFIX) and k not in host_only)


def undeclared() -> list[str]:
    """``TRITONPLUG_*`` variables set now that neither the host nor a loaded plugin declares (a typo, or the variable
    of a plugin that is not loaded)."""
    names = {s.name for s in declared()}
    return sorted(k for k in os.environ if k.startswith(PREFIX) and k not in names)


def invalid(owners: Sequence[str] | None = None) -> list[str]:
    """Every set variable whose value its setting refuses, as ``NAME: why`` (``tritonplug info``'s problems); with
    ``owners``, only those of these owners' settings."""
    problems = []
    for setting in declared(owners):
        try:
            setting.get()
        except SettingError as exc:
            problems.append(str(exc))  # the message names the variable
    return problems
