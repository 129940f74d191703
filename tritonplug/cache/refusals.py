"""Cache entries refused by the fleet key, and links refused in the cache directory: each named once.

One :class:`Refusals` per store (a disk cache, a remote tier): a refused entry is warned about once per key, naming
the store (the entry's file, or the remote URL without its password) and the reason (and logged at warning level),
then logged at info level each time it is met again. A refused entry is never run; the caller treats it as a miss,
so the kernel is compiled again and the good entry written over it.
"""

from __future__ import annotations

import logging
import threading

from tritonplug import settings
from tritonplug.calls import user_warnings

log = logging.getLogger("tritonplug.cache")


class Refusals:
    """What one store refused; thread-safe."""

    def __init__(self) -> None:
        self._named: set[str] = set()
        self._lock = threading.Lock()

    def entry(self, key: str, where: str, reason: object, remade: str) -> None:
        """An entry under ``key``, found at ``where``, refused for ``reason``; ``remade``: what happens instead."""
        self._name(key, f"refused the cache entry {where}: {reason} ({settings.FLEET_KEY.name} is set); it is "
                        f"never used, and {remade}")

    def link(self, where: str, directory: str) -> None:
        """A link (or a non-directory) at ``where``, where the cache in ``directory`` keeps a directory."""
        self._name(where, f"refused {where}: the kernel cache follows no link inside {directory} (whoever placed "
                          f"one could make this process run their files); it is removed")

    def _name(self, what: str, message: str) -> None:
        with self._lock:
            again = what in self._named
            self._named.add(what)
        if again:  # a host waiting for a peer's entry meets the refused one at every poll: logged, not warned
            log.info("%s", message)
            return
        log.warning("%s", message)
        user_warnings.warn(f"tritonplug: {message}", RuntimeWarning)
