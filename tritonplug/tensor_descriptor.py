"""``TensorDescriptor``: a host-side TMA descriptor operand, as in jax-triton 0.4.

The record is complete (a pytree whose only leaf is the base array, everything else
static), so code written for ``jax_triton.TensorDescriptor`` constructs and transforms it
unchanged. Launching a kernel with one is not supported yet: jaxlib's runtime gained
descriptor parameters after 0.11.0, and tritonplug's kernel-call encoder does not write
them. Kernels can build descriptors on the device instead, with ``tl.make_tensor_descriptor``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax

from tritonplug import jaxlib_compat
from tritonplug.utils import strides_from_shape

PADDINGS = ("zero", "nan")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TensorDescriptor:
    """A block-wise view of ``base`` for TMA loads and stores (``desc.load([i, j])`` in a kernel)."""

    base: Any
    shape: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    strides: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    block_shape: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    layout: Any | None = dataclasses.field(default=None, metadata=dict(static=True))
    padding: str = dataclasses.field(default="zero", metadata=dict(static=True))
    round_f32_to_tf32: bool = dataclasses.field(default=False, metadata=dict(static=True))

    def __post_init__(self) -> None:
        if self.padding not in PADDINGS:
            raise ValueError(f"padding must be 'zero' or 'nan', got {self.padding!r}")
        if not len(self.shape) == len(self.strides) == len(self.block_shape):
            raise ValueError(f"shape, strides, and block_shape must have the same length, got {len(self.shape)}, "
                             f"{len(self.strides)}, {len(self.block_shape)}")

    @classmethod
    def from_array(cls, array: Any, block_shape: Sequence[int], layout: Any | None = None, padding: str = "zero",
                   round_f32_to_tf32: bool = False) -> TensorDescriptor:
        """A descriptor over a whole row-major array."""
        shape = tuple(int(d) for d in array.shape)
        strides = strides_from_shape(shape)
        return cls(array, shape, strides, tuple(int(b) for b in block_shape), layout, padding,
                   bool(round_f32_to_tf32))


def unsupported_error(where: str = "triton_call") -> NotImplementedError:
    """The error for a ``TensorDescriptor`` operand, saying what the installed jaxlib lacks."""
    reason = jaxlib_compat.tma_descriptor_support()
    detail = f"{reason}, and " if reason else ""
    return NotImplementedError(
        f"{where}: TensorDescriptor operands (host-side TMA descriptors) are not supported: {detail}tritonplug does "
        f"not encode descriptor parameters yet. Pass the array and its shape/strides instead and build the "
        f"descriptor in the kernel with tl.make_tensor_descriptor.")
