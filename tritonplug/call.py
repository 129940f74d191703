"""The hashable description of one ``triton_call``: the primitive's only parameter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonplug.binding import BoundArgs
from tritonplug.records import BufferSpec


@dataclass(frozen=True, eq=False)
class CallSpec:
    kernel: Any
    bound: BoundArgs
    metaparams: tuple[tuple[str, Any], ...]
    out_specs: tuple[BufferSpec, ...]
    grid: Any
    zeroed_outputs: Any
    call_options: tuple[tuple[str, Any], ...]
    name: str = ""
    serialized_metadata: bytes = b""
    cost_estimate: tuple[tuple[str, Any], ...] | None = None
    has_side_effect: bool = False
    custom_call_target: str | None = None

    def _fields(self) -> tuple:
        return (self.kernel, self.bound, self.metaparams, self.out_specs, self.grid, self.zeroed_outputs,
                self.call_options, self.name, self.serialized_metadata, self.cost_estimate, self.has_side_effect,
                self.custom_call_target)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not CallSpec:
            return NotImplemented
        return hash(self) == hash(other) and self._fields() == other._fields()

    def __hash__(self) -> int:
        """Computed once: JAX hashes the primitive's parameters on every eager call."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(self._fields())
            object.__setattr__(self, "_hash", cached)
        return cached

    def __repr__(self) -> str:
        return f"CallSpec({getattr(self.kernel, '__name__', self.kernel)}, grid={self.grid})"
