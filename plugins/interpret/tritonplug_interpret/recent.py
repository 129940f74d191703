"""A bounded map of recently made objects, the least recently used dropped first: the plugin's in-process caches
(prepared interpreter launches in ``runner``, translated XLA kernels in ``paths``)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Recent(Generic[V]):
    """At most ``size`` entries; ``get`` and ``put`` are thread-safe and mark the entry most recently used."""

    def __init__(self, size: int) -> None:
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
