"""Pointers as (buffer, element offset) pairs; loads as gathers, stores and atomics as scatters.

A :class:`Pointer` names its buffer statically (the argument it came from) and carries its
offsets, in elements of the pointee type, as an int64 array of the pointer tensor's shape.
Masked-off lanes never touch memory: loads gather with ``mode="fill"`` from a clamped index
and take ``other``, stores and atomics scatter to an index past the end (``mode="drop"``).
In parallel mode (programs vectorised with ``vmap``) stores go to a log applied after the
grid; in sequential mode (programs in a loop) they update the buffers at once.
Block pointers (``tt.make_tensor_ptr``/``tt.advance``) and tensor descriptors become the same
gathers with their boundary checks as masks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tritonplug_interpret.xla import strided, tiles
from tritonplug_interpret.xla.program import Frame, Unsupported, family
from tritonplug_interpret.xla.ttir import Op
from tritonplug_interpret.xla.types import TType, parse_type, reinterpret, unsigned
from tritonplug_interpret.xla.windows import Window, write_whole, write_window

HANDLERS, handler = family()   # this family's part of the op table (ops.TABLE)


@dataclass(frozen=True)
class Pointer:
    buffer: int
    offset: Any
    element: str


@dataclass(frozen=True)
class BlockPointer:
    """``tt.make_tensor_ptr``: base offset, tensor shape/strides, block offsets, block shape, element."""

    buffer: int
    base: Any
    shape: tuple
    strides: tuple
    offsets: tuple
    block: tuple[int, ...]
    element: str


jax.tree_util.register_pytree_node(Pointer, lambda p: ((p.offset,), (p.buffer, p.element)),
                                   lambda aux, c: Pointer(aux[0], c[0], aux[1]))
jax.tree_util.register_pytree_node(
    BlockPointer, lambda p: ((p.base, p.shape, p.strides, p.offsets), (p.buffer, p.block, p.element)),
    lambda aux, c: BlockPointer(aux[0], c[0], tuple(c[1]), tuple(c[2]), tuple(c[3]), aux[1], aux[2]))


def select_pointers(cond, a: Pointer, b: Pointer) -> Pointer:
    if not (isinstance(a, Pointer) and isinstance(b, Pointer)) or a.buffer != b.buffer:
        raise Unsupported("arith.select", "between pointers into different buffers")
    return Pointer(a.buffer, jnp.where(cond, a.offset, b.offset), a.element)


def bitcast_pointer(p: Pointer, target: TType) -> Pointer:
    if not isinstance(p, Pointer) or parse_type(target.pointee).dtype.itemsize != parse_type(p.element).dtype.itemsize:
        raise Unsupported("tt.bitcast", "of a pointer to a pointee of another size")
    return Pointer(p.buffer, p.offset, target.pointee)


@handler("tt.addptr")
def _addptr(f: Frame, op: Op):
    p, delta = f.args(op)
    if not isinstance(p, Pointer):
        raise Unsupported("tt.addptr", "on a value that is not a pointer argument")
    offset = p.offset + delta.astype(jnp.int64)
    return [Pointer(p.buffer, offset, p.element)]


@handler("tt.int_to_ptr", "tt.ptr_to_int")
def _no_addresses(f: Frame, op: Op):
    raise Unsupported(op.name, "pointers have no integer addresses here")


# ------------------------------------------------------------------ access primitives


def _clean(f: Frame, buffer: int, offset, mask, inside: bool = False):
    """The lanes that access memory (None: all of them); ``inside``: the plan proved every lane in bounds."""
    if inside:
        active = None if mask is None else jnp.broadcast_to(mask, offset.shape)
    else:
        size = f.ctx.buffers[buffer].size
        bounds = (offset >= 0) & (offset < size)
        active = bounds if mask is None else (bounds & jnp.broadcast_to(mask, offset.shape))
    if f.predicate is None:
        return active
    return jnp.broadcast_to(f.predicate, offset.shape) if active is None else active & f.predicate


def gather(f: Frame, buffer: int, offset, mask, other, dtype, window: Any = None, inside: bool = False) -> Any:
    """Load ``offset`` lanes; ``window``, when given, holds them already (a row of a grid-wide slice,
    :mod:`.windows`, or a window of a strided view, :mod:`.strided`): only the mask is applied. ``inside``:
    every lane is inside the buffer (the plan's ``bounds`` pass), so no bounds mask is computed."""
    offset = jnp.asarray(offset)
    f.record_check("load", buffer, offset, mask)
    active = _clean(f, buffer, offset, mask, inside)
    if window is not None:
        values = window
    else:
        index = offset if active is None else jnp.where(active, offset, 0)
        values = f.state.buffers[buffer].at[index].get(mode="promise_in_bounds")
    if values.dtype != dtype:
        values = reinterpret(values, dtype) if values.dtype.itemsize == np.dtype(dtype).itemsize \
            else values.astype(dtype)
    if active is None:
        return jnp.broadcast_to(values, offset.shape)
    fill = jnp.zeros((), dtype) if other is None else other.astype(dtype)
    return jnp.where(active, values, fill)


def scatter(f: Frame, kind: str, buffer: int, offset, values, mask, access: str = "store",
            unmasked: bool = False) -> Any:
    """Write ``values`` (or combine them, for atomics); returns the old values for atomics in sequential mode.
    ``unmasked``: the plan dropped the mask (:attr:`.plan.Plan.unmasked`), which then bounds only checked mode's
    lanes.

    Atomics combine in the pointer's element type, viewed unsigned for ``umax``/``umin`` (Triton's
    float ``atomic_max``/``atomic_min`` are integer max/umin on the bits).
    """
    offset = jnp.asarray(offset)
    f.record_check(access, buffer, offset, mask)
    info = f.ctx.buffers[buffer]
    active = _clean(f, buffer, offset, None if unmasked else mask,
                    access == "store" and f.current_op in f.ctx.plan.inside)
    values = jnp.broadcast_to(values, offset.shape)
    if kind in ("umax", "umin"):
        values = lax.bitcast_convert_type(values, unsigned(values.dtype))
        kind = kind[1:]
    if values.dtype.itemsize == info.dtype.itemsize and values.dtype != info.dtype:
        values = ViewedValues(values, info.dtype)
    else:
        values = values.astype(info.dtype)
    if f.ctx.parallel:
        plan = f.ctx.plan
        window = (plan.windows.get(f.current_op) or plan.tilings.get(f.current_op)) if kind == "store" else None
        f.ctx.store_log.append((window or kind, buffer, offset, values, active))   # active None: every lane
        return None
    if active is None:  # every lane inside and unmasked: a constant XLA folds away
        active = jnp.ones(offset.shape, bool)
    data = f.state.buffers[buffer]
    old = data[jnp.where(active, offset, 0)]
    f.state.buffers[buffer] = apply_scatter(data, kind, offset, values, active)
    return old


class ViewedValues:
    """Values of another dtype of the buffer's item size: the scatter combines them in their own dtype."""

    def __init__(self, values: Any, buffer_dtype: Any) -> None:
        self.values, self.buffer_dtype = values, buffer_dtype


jax.tree_util.register_pytree_node(ViewedValues, lambda v: ((v.values,), v.buffer_dtype),
                                   lambda aux, c: ViewedValues(c[0], aux))


def whole_stores(buffers: Sequence[Any], stores: Sequence[tuple[Any, int, Any]]) -> dict[int, Any]:
    """``{buffer: new contents}`` for the buffers that the parallel schedule's ``(kind, buffer, values, active)``
    stores (every program's, in order) write whole by windows with every lane on (``active`` None), side by side
    (:func:`.windows.write_whole`): one concatenation of the values, no select over the old contents (XLA:GPU runs
    RoPE's two half-row stores so as fast as its own op, chained selects 2.7x slower:
    ``bench/fusion_store_forms.py``)."""
    by_buffer: dict[int, list[tuple[Any, Any, Any]]] = {}
    for kind, b, values, active in stores:
        by_buffer.setdefault(b, []).append((kind, values, active))
    out = {}
    for b, writes in by_buffer.items():
        if all(isinstance(k, Window) and not isinstance(v, ViewedValues) and a is None for k, v, a in writes):
            whole = write_whole(buffers[b], [(k, v) for k, v, _ in writes])
            if whole is not None:
                out[b] = whole
    return out


def apply_scatter(data, kind: Any, offset, values, active):
    if active is None:  # every lane on (logged so by the parallel schedule)
        active = jnp.ones(jnp.shape(offset), bool)
    if isinstance(kind, tiles.Tiling):
        if isinstance(values, ViewedValues):
            view = reinterpret(data, values.values.dtype)
            return reinterpret(tiles.write(view, kind, values.values, active), data.dtype)
        return tiles.write(data, kind, values, active)
    if isinstance(kind, Window):
        if isinstance(values, ViewedValues):
            view = reinterpret(data, values.values.dtype)
            return reinterpret(write_window(view, kind, values.values, active), data.dtype)
        return write_window(data, kind, values, active)
    if isinstance(values, ViewedValues):
        view = reinterpret(data, values.values.dtype)
        return reinterpret(apply_scatter(view, kind, offset, values.values, active), data.dtype)
    index = jnp.where(active, offset, data.shape[0]).reshape(-1)
    values = values.reshape(-1)
    ref = data.at[index]
    if kind == "store" or kind == "xchg":
        if index.shape[0] > 1:  # a later lane wins over an earlier one (as the interpreter's numpy store)
            return _last_wins(data, index, values)
        return ref.set(values, mode="drop")
    if kind in ("add", "fadd"):
        return ref.add(values, mode="drop")
    if kind == "max":
        return ref.max(values, mode="drop")
    if kind == "min":
        return ref.min(values, mode="drop")
    if kind in ("and", "or", "xor"):
        raise Unsupported("tt.atomic_rmw", f"{kind} in parallel")
    raise Unsupported("tt.atomic_rmw", kind)


def _last_wins(data, index, values):
    return data.at[index].set(values, mode="drop", unique_indices=False)


# ------------------------------------------------------------------ tt.load / tt.store


@handler("tt.load")
def _load(f: Frame, op: Op):
    args = f.args(op)
    p = args[0]
    if isinstance(p, BlockPointer):
        return [_block_load(f, op, p)]
    if not isinstance(p, Pointer):
        raise Unsupported("tt.load", "through a value that is not a pointer")
    unmasked = op in f.ctx.plan.unmasked        # a mask true in every lane: dropped
    mask = args[1] if len(args) > 1 and not unmasked else None
    other = args[2] if len(args) > 2 and not unmasked else None
    dtype = parse_type(p.element).dtype
    window = f.hoisted.get(op)
    access = f.ctx.plan.accesses.get(op)
    if window is None and access is not None and access.view in f.ctx.views:
        base = jnp.reshape(jnp.asarray(p.offset), (-1,))[0]
        window = strided.read(f.ctx.views[access.view], access, base)
    return [gather(f, p.buffer, p.offset, mask, other, dtype, window, op in f.ctx.plan.inside)]


@handler("tt.store")
def _store(f: Frame, op: Op):
    args = f.args(op)
    p, value = args[0], args[1]
    if isinstance(p, BlockPointer):
        offset, mask = _block_addresses(f, op, p)
        scatter(f, "store", p.buffer, offset, value, mask)
        return []
    mask = args[2] if len(args) > 2 else None
    f.current_op = op
    scatter(f, "store", p.buffer, p.offset, value, mask, unmasked=op in f.ctx.plan.unmasked)
    f.current_op = None
    return []


_RMW = {"add": "add", "fadd": "add", "max": "max", "min": "min", "umax": "umax", "umin": "umin",
        "exch": "xchg", "xchg": "xchg", "and": "and", "or": "or", "xor": "xor"}


@handler("tt.atomic_rmw")
def _atomic_rmw(f: Frame, op: Op):
    kind = _RMW.get(op.keyword)
    if kind is None:
        raise Unsupported("tt.atomic_rmw", op.keyword or op.header)
    args = f.args(op)
    p, value = args[0], args[1]
    mask = args[2] if len(args) > 2 else None
    dtype = parse_type(p.element).dtype
    if kind in ("and", "or", "xor") and f.ctx.parallel:
        raise Unsupported("tt.atomic_rmw", f"{kind} in parallel mode")
    if not f.ctx.parallel and kind in ("and", "or", "xor"):
        return [_bitwise_rmw(f, kind, p, value, mask)]
    old = scatter(f, kind, p.buffer, p.offset, jnp.asarray(value).astype(dtype), mask, "atomic")
    if old is None:
        return [jnp.zeros(jnp.shape(p.offset), dtype)]
    return [reinterpret(old, dtype)]


def _bitwise_rmw(f: Frame, kind, p: Pointer, value, mask):
    offset = jnp.asarray(p.offset)
    f.record_check("atomic", p.buffer, offset, mask)
    data = f.state.buffers[p.buffer]
    active = _clean(f, p.buffer, offset, mask)
    index = jnp.where(active, offset, 0)
    old = data[index]
    fn = {"and": jnp.bitwise_and, "or": jnp.bitwise_or, "xor": jnp.bitwise_xor}[kind]
    # lanes hitting one address one after another
    flat_i, flat_v, flat_a = index.reshape(-1), jnp.broadcast_to(value, offset.shape).reshape(-1), active.reshape(-1)

    def body(i, d):
        return jnp.where(flat_a[i], d.at[flat_i[i]].set(fn(d[flat_i[i]], flat_v[i].astype(d.dtype))), d)

    f.state.buffers[p.buffer] = lax.fori_loop(0, flat_i.shape[0], body, data)
    return old


@handler("tt.atomic_cas")
def _atomic_cas(f: Frame, op: Op):
    if f.ctx.parallel:
        raise Unsupported("tt.atomic_cas", "in parallel mode")
    p, cmp, value = f.args(op)
    offset = jnp.asarray(p.offset)
    f.record_check("atomic", p.buffer, offset, None)
    if offset.ndim:
        raise Unsupported("tt.atomic_cas", "on a tensor of pointers")
    data = f.state.buffers[p.buffer]
    index = jnp.clip(offset, 0, data.shape[0] - 1)
    old = data[index]
    new = jnp.where(old == cmp.astype(old.dtype), value.astype(old.dtype), old)
    f.state.buffers[p.buffer] = data.at[index].set(new)
    return [old]


# ------------------------------------------------------------------ block pointers


#: The block in a block pointer's printed type (``<tensor<4x8xf32>>``, ``!tt.ptr<tensor<4x8xf32>>``).
_BLOCK_TYPE = re.compile(r"tensor<[^<>]*>")


@handler("tt.make_tensor_ptr")
def _make_tensor_ptr(f: Frame, op: Op):
    values = f.args(op)
    base = values[0]
    rank = (len(values) - 1) // 3
    shape, strides, offsets = values[1:1 + rank], values[1 + rank:1 + 2 * rank], values[1 + 2 * rank:]
    ty = parse_type(_BLOCK_TYPE.search(op.result_types[0]).group(0))
    return [BlockPointer(base.buffer, base.offset, tuple(jnp.asarray(s, jnp.int64) for s in shape),
                         tuple(jnp.asarray(s, jnp.int64) for s in strides),
                         tuple(jnp.asarray(o, jnp.int32) for o in offsets), ty.shape, base.element)]


@handler("tt.advance")
def _advance(f: Frame, op: Op):
    p, *deltas = f.args(op)
    offsets = tuple(o + d.astype(jnp.int32) for o, d in zip(p.offsets, deltas, strict=True))
    return [BlockPointer(p.buffer, p.base, p.shape, p.strides, offsets, p.block, p.element)]


def _checked_dims(op: Op) -> list[int]:
    text = op.attrs.get("boundaryCheck", "")
    if not text:
        return []
    return [int(v) for v in text.split(":", 1)[1].rstrip(">").split(",") if v.strip()]


def _block_addresses(f: Frame, op: Op, p: BlockPointer):
    offset = jnp.asarray(p.base, jnp.int64)
    mask = None
    checked = _checked_dims(op)
    for d, size in enumerate(p.block):
        shape = [1] * len(p.block)
        shape[d] = size
        index = (p.offsets[d].astype(jnp.int64) + jnp.arange(size, dtype=jnp.int64)).reshape(shape)
        offset = offset + index * p.strides[d]
        if d in checked:
            inside = (index >= 0) & (index < p.shape[d])
            mask = inside if mask is None else mask & inside
    offset = jnp.broadcast_to(offset, p.block)
    return offset, None if mask is None else jnp.broadcast_to(mask, p.block)


def _block_load(f: Frame, op: Op, p: BlockPointer):
    offset, mask = _block_addresses(f, op, p)
    dtype = parse_type(p.element).dtype
    padding = op.attrs.get("padding", "")
    other = jnp.asarray(jnp.nan, dtype) if ("nan" in padding or padding.startswith("2")) else None
    return gather(f, p.buffer, offset, mask, other, dtype)
