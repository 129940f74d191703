"""Records shared by the host and the remote-cache plugins (entry-point group ``tritonplug.caches``).

A remote-cache plugin imports from the host only this module and :mod:`tritonplug.cache_hookspecs`.
What crosses the boundary is plain: keys are strings, values are bytes (the host's checksummed cache
entries, never pickles), and descriptions are frozen dataclasses. A plugin's own settings are
:class:`~tritonplug.settings.Setting` records, made with the constructors re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tritonplug.settings import (  # noqa: F401 - re-exported: a cache plugin declares its settings with them
    Setting,
    SettingError,
    boolean,
    choice,
    integer,
    seconds,
)


@dataclass(frozen=True)
class RemoteCacheInfo:
    """What a remote-cache plugin is: its name, the URL schemes it opens (``("redis", "rediss")``)."""

    name: str
    schemes: tuple[str, ...]
    version: str
    description: str = ""


@dataclass(frozen=True)
class StoreDescription:
    """One opened store, for ``tritonplug info`` and warnings.

    ``location`` must not contain a password. ``writable`` is ``False`` for a read-only consumer: the host
    then never calls ``put``, ``claim`` or ``release``. ``max_entry_bytes`` (0 = no limit) lets the host skip
    publishing entries the store would refuse.
    """

    plugin: str
    location: str
    writable: bool = True
    max_entry_bytes: int = 0
    entry_ttl_s: float = 0.0
    detail: str = ""


class RemoteCacheError(Exception):
    """A store operation failed. ``permanent`` (a wrong password, a refused command) switches the remote tier
    off for the process at once; other failures (timeouts, a refused connection) are counted, and the tier
    switches itself off after a few in a row."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


@runtime_checkable
class RemoteStore(Protocol):
    """What ``tritonplug_cache_open`` returns. Keys are printable ASCII (``/``, ``-``, ``.``, hex digits),
    at most 200 characters; the host prefixes them with the tritonplug and Triton versions.

    Every method may raise (ideally :class:`RemoteCacheError`); the host catches everything, warns once,
    and carries on without the store. Each call should give up within about a second or two.
    """

    def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or ``None`` if there is none."""

    def put(self, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` (replacing any value); ``False`` if the store declined (too big,
        read-only)."""

    def claim(self, key: str, ttl_s: float) -> bool:
        """Claim the right to compile ``key`` for ``ttl_s`` seconds: ``True`` if this store object holds the
        claim after the call (newly taken, or renewed because it already held it), ``False`` while another
        holder's unexpired claim stands. Atomic across hosts; a holder that dies loses it after ``ttl_s``."""

    def release(self, key: str) -> None:
        """Give up this store object's claim on ``key`` (no effect on someone else's)."""

    def describe(self) -> StoreDescription:
        """Describe the store; never does I/O."""

    def ping(self) -> None:
        """Check the store answers; raise if not."""

    def close(self) -> None:
        """Release connections; the object is not used again."""
