"""The op table: every TTIR op name the translation runs, and its handler, from each op family's own table.

Explicit, not registered as a side effect of importing a module: a name two families claim is an error
here, and ``TABLE`` is everything :func:`.driver.unsupported_ops` checks a kernel against.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from tritonplug_interpret.xla import blocks, control, elementwise, libdevice, memory
from tritonplug_interpret.xla.program import Handler

#: Each family's table: blocks (shapes, dots, reductions), control flow, elementwise arithmetic,
#: libdevice calls, memory (pointers, loads, stores, atomics, descriptors).
FAMILIES: Mapping[str, Mapping[str, Handler]] = {
    "blocks": blocks.HANDLERS, "control": control.HANDLERS, "elementwise": elementwise.HANDLERS,
    "libdevice": libdevice.HANDLERS, "memory": memory.HANDLERS,
}


def _merged() -> Mapping[str, Handler]:
    table: dict[str, Handler] = {}
    for family, handlers in FAMILIES.items():
        for name, fn in handlers.items():
            if name in table:
                raise ValueError(f"{name} is handled by two op families ({family} and another)")
            table[name] = fn
    return MappingProxyType(table)


TABLE: Mapping[str, Handler] = _merged()
