"""The hashable description of one ``triton_call``: the primitive's only parameter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonplug.binding import BoundArgs
from tritonplug.records import BufferSpec


@dataclass(frozen=True)
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

    def __repr__(self) -> str:
        return f"CallSpec({getattr(self.kernel, '__name__', self.kernel)}, grid={self.grid})"
