"""``TensorDescriptor``: a host-side TMA descriptor operand, as in jax-triton 0.4.

The record is a pytree whose only leaf is the base array (everything else static), so code
written for ``jax_triton.TensorDescriptor`` constructs and transforms it unchanged. Like
jax-triton, construction checks only ``padding`` and the ranks; :func:`check` validates the
rest when the descriptor is passed to ``triton_call``, against the limits of NVIDIA's tensor
memory accelerator (``cuTensorMapEncodeTiled``, which jaxlib's runtime calls) and of Triton's
own ``TensorDescriptor``, raising a ``ValueError`` that names the field.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from tritonplug.calls.call import DescriptorArg, pointer_type
from tritonplug.utils import strides_from_shape

PADDINGS = ("zero", "nan")
MAX_RANK = 5  # TMA descriptors have one to five dimensions
MAX_BLOCK_DIM = 256  # the TMA box is at most 256 elements along each dimension
MAX_SHAPE_DIM = 2**32
MAX_BYTE_STRIDE = 2**40
ALIGNMENT = 16  # bytes: strides, the innermost block row and the base address


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TensorDescriptor:
    """A block-wise view of ``base`` for TMA loads and stores (``desc.load([i, j])`` in a kernel).

    ``shape`` and ``strides`` are in elements, outermost first (the innermost stride must be 1);
    ``block_shape`` is the block one load or store moves; ``layout`` is the shared-memory layout
    a Gluon kernel expects (``gl.NVMMASharedLayout``; ``None`` for ``@triton.jit`` kernels);
    ``padding`` is what out-of-bounds elements read as (``"zero"`` or ``"nan"``);
    ``round_f32_to_tf32`` makes the TMA unit round float32 elements to TF32 as it loads them.
    """

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
        """A descriptor over a whole row-major array. ``block_shape`` must hold ints (``16.5`` is refused,
        not truncated), as must the array's shape."""
        if not (hasattr(array, "shape") and hasattr(array, "dtype")):
            raise TypeError(f"TensorDescriptor.from_array: array must be an array, got {type(array).__name__}")
        shape = _ints(tuple(array.shape), "shape", "TensorDescriptor.from_array")
        if isinstance(block_shape, np.ndarray):
            block_shape = block_shape.tolist()
        block = _ints(block_shape, "block_shape", "TensorDescriptor.from_array")
        if not isinstance(round_f32_to_tf32, (bool, np.bool_)):
            raise TypeError(f"TensorDescriptor.from_array: round_f32_to_tf32 must be a bool, got "
                            f"{type(round_f32_to_tf32).__name__}: {round_f32_to_tf32!r}")
        return cls(array, shape, strides_from_shape(shape), block, layout, padding, bool(round_f32_to_tf32))


def _ints(values: Any, field: str, where: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{where}: TensorDescriptor.{field} must be a sequence of ints, got {values!r}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{where}: TensorDescriptor.{field}[{i}] must be an int, got {v!r} ({type(v).__name__})")
        out.append(int(v))
    return tuple(out)


def check(desc: TensorDescriptor, index: int, where: str) -> DescriptorArg:
    """Validate ``desc`` (whose base is array operand ``index``) for a kernel launch; errors name the field
    and the rule it breaks."""
    base = desc.base
    if not (hasattr(base, "shape") and hasattr(base, "dtype")) or isinstance(base, np.generic):
        raise TypeError(f"{where}: TensorDescriptor.base must be an array, got {type(base).__name__}")
    dtype = np.dtype(base.dtype)
    pointer_type(dtype, f"{where}: TensorDescriptor.base")
    if dtype == np.bool_:
        raise ValueError(f"{where}: TensorDescriptor.base has dtype bool, which TMA cannot move (no 1-bit element "
                         f"type); use uint8")
    itemsize = dtype.itemsize
    shape = _ints(desc.shape, "shape", where)
    strides = _ints(desc.strides, "strides", where)
    block = _ints(desc.block_shape, "block_shape", where)
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"{where}: TensorDescriptor.shape has rank {rank}; TMA descriptors have 1 to {MAX_RANK} "
                         f"dimensions")
    for i, d in enumerate(shape):
        if not 1 <= d <= MAX_SHAPE_DIM:
            raise ValueError(f"{where}: TensorDescriptor.shape[{i}] = {d} must be between 1 and 2**32")
    if strides[-1] != 1:
        raise ValueError(f"{where}: TensorDescriptor.strides[-1] = {strides[-1]} must be 1 (the innermost "
                         f"dimension is contiguous)")
    for i, s in enumerate(strides[:-1]):
        if s <= 0 or (s * itemsize) % ALIGNMENT or s * itemsize >= MAX_BYTE_STRIDE:
            raise ValueError(f"{where}: TensorDescriptor.strides[{i}] = {s} elements = {s * itemsize} bytes "
                             f"({dtype.name}) is not a positive multiple of {ALIGNMENT} bytes below 2**40, "
                             f"as TMA requires")
    for i, b in enumerate(block):
        if not 1 <= b <= MAX_BLOCK_DIM or b & (b - 1):
            raise ValueError(f"{where}: TensorDescriptor.block_shape[{i}] = {b} must be a power of two between 1 "
                             f"and {MAX_BLOCK_DIM}")
        if b > shape[i]:
            raise ValueError(f"{where}: TensorDescriptor.block_shape[{i}] = {b} is larger than shape[{i}] = "
                             f"{shape[i]}")
    if (block[-1] * itemsize) % ALIGNMENT:
        raise ValueError(f"{where}: TensorDescriptor.block_shape[-1] = {block[-1]} spans {block[-1] * itemsize} "
                         f"bytes of {dtype.name}; the innermost block dimension must span a multiple of "
                         f"{ALIGNMENT} bytes")
    reach = 1 + sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
    size = math.prod(int(d) for d in base.shape)
    if reach > size:
        raise ValueError(f"{where}: TensorDescriptor.shape {list(shape)} with strides {list(strides)} reaches "
                         f"element {reach - 1}, but the base array has only {size} elements")
    if desc.padding == "nan" and (dtype.kind != "f" and dtype.name != "bfloat16" or itemsize < 2):
        raise ValueError(f"{where}: TensorDescriptor.padding='nan' needs a floating-point base of 16 bits or more, "
                         f"got {dtype.name}")
    if desc.round_f32_to_tf32 and dtype != np.float32:
        raise ValueError(f"{where}: TensorDescriptor.round_f32_to_tf32=True needs a float32 base, got {dtype.name}")
    layout = "" if desc.layout is None else repr(desc.layout)
    return DescriptorArg(index, dtype.name, shape, strides, block, desc.padding, bool(desc.round_f32_to_tf32), layout)
