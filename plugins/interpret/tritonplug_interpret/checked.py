"""Checked mode: bounds-check every load, store and atomic the interpreter performs.

Each pointer argument gets a virtual address of its own instead of the buffer's real one:
``((tag + 1) << 40) + 2**39 + (real address % 4096)``. Pointer arithmetic in the
interpreter is plain uint64 addition, so every pointer a kernel derives from an argument
keeps that argument's tag in its top bits (offsets up to ±512 GiB), whatever ops it went
through. The memory ops are wrapped to decode ``tag, offset``, check the active lanes (masked-off
lanes are not accesses) against that argument's buffer, and hand the real addresses to the
interpreter. An access through argument ``x`` that lands in another buffer is therefore
caught too, and the error names the argument the pointer came from and the byte offset
from the start of its buffer (negative when before it). Alignment modulo 4096 is kept, so
alignment checks (tensor descriptors) behave as on real addresses.

Unchecked mode installs nothing: pointers are the buffers' real addresses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonplug_interpret import compat

_TAG_SHIFT = 40
_HALF = 1 << (_TAG_SHIFT - 1)


class OutOfBoundsAccess(IndexError):
    """A kernel run in checked mode loaded or stored outside the buffer its pointer came from."""


@dataclass(frozen=True)
class Region:
    """One pointer argument's view of its buffer."""

    name: str
    nbytes: int
    dtype: str
    shape: tuple[int, ...]


def virtual_base(tag: int, address: int) -> int:
    return ((tag + 1) << _TAG_SHIFT) + _HALF + (address % 4096)


class AddressMap:
    """Virtual -> real addresses for one run."""

    def __init__(self, kernel_name: str, regions: list[Region], addresses: list[int]) -> None:
        self.kernel_name = kernel_name
        self.regions = regions
        self.real = np.array(addresses, dtype=np.int64).reshape(-1)
        virtual = [virtual_base(t, a) for t, a in enumerate(addresses)]
        self.virtual = np.array(virtual, dtype=np.int64).reshape(-1)
        self.nbytes = np.array([r.nbytes for r in regions], dtype=np.int64).reshape(-1)

    def translate(self, pointers: Any, mask: Any, itemsize: int, access: str) -> np.ndarray:
        """Real addresses for ``pointers``; raises :class:`OutOfBoundsAccess` for an active bad lane."""
        vp = np.asarray(pointers, dtype=np.uint64)
        tag = (vp >> np.uint64(_TAG_SHIFT)).astype(np.int64) - 1
        known = (tag >= 0) & (tag < len(self.regions))
        tag = np.where(known, tag, 0)
        offset = vp.astype(np.int64) - self.virtual[tag]
        ok = known & (offset >= 0) & (offset + itemsize <= self.nbytes[tag])
        if mask is None:
            bad = ~ok
        else:
            bad = np.broadcast_to(np.asarray(mask, dtype=bool), vp.shape) & ~ok
        if bad.any():
            self._fail(vp, known, tag, offset, bad, itemsize, access)
        return (self.real[tag] + offset).astype(np.uint64)

    def _fail(self, vp, known, tag, offset, bad, itemsize, access) -> None:
        lane = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
        lanes = int(np.count_nonzero(bad))
        pid = getattr(compat.builder, "grid_idx", None)
        where = f"program {tuple(pid)}" if pid is not None else "a program"
        lane_text = f" at lane {tuple(int(i) for i in lane)}" if lane else ""
        others = f" ({lanes - 1} other lane(s) of this access are out of bounds too)" if lanes > 1 else ""
        head = f"kernel {self.kernel_name!r}: out-of-bounds {access} of {itemsize} byte(s)"
        if not bool(known[lane]):
            raise OutOfBoundsAccess(f"{head} in {where}{lane_text}: address {int(vp[lane]):#x} is not "
                                    f"derived from any pointer argument{others}")
        region = self.regions[int(tag[lane])]
        off = int(offset[lane])
        raise OutOfBoundsAccess(
            f"{head} through argument {region.name!r} at byte offset {off} "
            f"(element {off // max(itemsize, 1)}), in {where}{lane_text}; "
            f"{region.name!r} is a {region.dtype}{list(region.shape)} buffer of "
            f"{region.nbytes} bytes{others}")


def _itemsize(ptr: Any) -> int:
    return max(1, ptr.get_element_ty().primitive_bitwidth // 8)


def install(scope: Any, amap: AddressMap) -> None:
    """Wrap the builder's memory ops (:data:`compat.MEMORY_OPS`) for the current run."""
    b = compat.builder
    o_load, o_store, o_rmw, o_cas = (getattr(b, name) for name in compat.MEMORY_OPS)
    handle = compat.TensorHandle

    def real(ptr: Any, mask: Any, access: str) -> Any:
        data = amap.translate(ptr.data, None if mask is None else mask.data, _itemsize(ptr), access)
        return handle(data, ptr.dtype)

    def create_masked_load(ptrs, mask, other, *rest, **kwargs):
        return o_load(real(ptrs, mask, "load"), mask, other, *rest, **kwargs)

    def create_masked_store(ptrs, value, mask, *rest, **kwargs):
        return o_store(real(ptrs, mask, "store"), value, mask, *rest, **kwargs)

    def create_atomic_rmw(op, ptr, val, mask, *rest, **kwargs):
        return o_rmw(op, real(ptr, mask, "atomic"), val, mask, *rest, **kwargs)

    def create_atomic_cas(ptr, cmp, val, *rest, **kwargs):
        return o_cas(real(ptr, None, "atomic compare-and-swap"), cmp, val, *rest, **kwargs)

    wrappers = (create_masked_load, create_masked_store, create_atomic_rmw, create_atomic_cas)
    for name, fn in zip(compat.MEMORY_OPS, wrappers, strict=True):
        scope.set_attr(b, name, fn)
