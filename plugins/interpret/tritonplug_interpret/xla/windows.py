"""Top-level block accesses found statically as one box of the reshaped buffer, read and written as slices.

Most kernels address memory as ``base + pid * P + Σ_d s_d i_d``: program ``p`` touches a block at
``b + P*p``. Vectorised over the grid, the lanes of all programs are an affine function of the indices
``(p, i_0, …)``; when its strides, sorted, each divide the next larger and no dimension runs into the next
(``extent * stride <= next stride``, the innermost stride 1), those lanes are exactly a box of the buffer
reshaped to the strides' radices: one slice (and a transpose), which XLA copies at memory speed and fuses
with its neighbours, where a gather or scatter of every element is several times slower and fuses with
nothing. :func:`windows` is a view of the pointer-lane evaluator's result (:mod:`.lanes`) that finds, per
top-level ``tt.load``/``tt.store``, such a :class:`Window`:

* the program index may split into several axes (``pid // seq`` and ``pid % seq``: RoPE's cos rows are
  ``(pid % seq) * stride``, the same for every batch row), each with its own step, 0 for a broadcast (every
  program reads the same block: a weight row) — loads only;
* a mask bounded by :mod:`.mask_rules` (``offs < n``: a row narrower than its power-of-two block) shrinks a
  dimension to the lanes that may be live; the load still applies its mask and ``other``, a store merges
  with the buffer's contents where its mask is off;
* a 0-d access (a per-row scalar: RSTD, a row's loss) is a window of one element; where programs step ``S > 1``
  elements apart (``pid * S + j``: column ``j`` of a ``(rows, S)`` array, PolyNorm's three RSTDs per row, a
  per-program partial sum of three weights), the region gains a unit axis of radix ``S`` below the programs', of
  which the box takes one element (:meth:`Window.unit`);
* 2-D blocks that cover part of a row (RoPE's half rows of every head) are boxes too;
* a row in column tiles, one per program (a ``(tiles, rows)`` grid: DyT's), where the tiles do not divide the row:
  the innermost program axis folded into the block's first, each row padded to whole tiles, where the mask
  compares exactly the merged column (``tile * BLOCK + i < n``, :class:`.mask_rules.Column`; :func:`_folded`); so is
  a row walked in column blocks by a vectorised loop (``for start in range(0, n, BLOCK)``: the trips are the tiles).

Everything else keeps the general gather/scatter (or :mod:`.strided`'s views, :mod:`.tiles`' tilings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tritonplug_interpret.xla.lanes import Found, Lanes, access_shape
from tritonplug_interpret.xla.mask_rules import Column, Limits
from tritonplug_interpret.xla.ttir import Function, Op

#: At most this many axes for the program index (``pid`` split as ``pid // a % b`` …).
MAX_PROGRAM_AXES = 3


@dataclass(frozen=True)
class Axis:
    """One axis of the accessed lanes: lanes step ``stride`` elements along it; only the first ``extent`` of its
    ``size`` indices may touch memory (the rest are masked off)."""

    stride: int
    extent: int
    size: int


@dataclass(frozen=True)
class Window:
    """Lane ``(q_1 … q_m, i_0 … i_r)`` (program axes, then the block's) is at ``start + Σ stride * index``."""

    buffer: int
    start: int
    axes: tuple[Axis, ...]
    program_axes: int       # how many of ``axes`` (the first) split the flattened program index
    #: the innermost program axis's size where it is folded into the first block axis (column tiles of a row:
    #: :func:`_folded`), that axis then ``fold`` tiles wide; 1: none
    fold: int = 1

    @property
    def programs(self) -> int:
        return int(np.prod([a.size for a in self.axes[:self.program_axes]], dtype=np.int64)) * self.fold

    @property
    def block(self) -> tuple[int, ...]:
        sizes = tuple(a.size for a in self.axes[self.program_axes:])
        return (sizes[0] // self.fold, *sizes[1:]) if self.fold > 1 else sizes

    def moving(self) -> list[int]:
        """The axes along which lanes move, outermost (largest stride) first."""
        found = [k for k, a in enumerate(self.axes) if a.stride and a.extent > 1]
        return sorted(found, key=lambda k: -self.axes[k].stride)

    def unit(self) -> int:
        """The innermost moving axis's stride: 1, or ``S`` where only the programs move, ``S`` elements apart (a
        per-program scalar at ``pid * S + j``): the region then ends in a unit axis of radix ``S``, of which the
        box takes the one element at ``start``'s place."""
        order = self.moving()
        return self.axes[order[-1]].stride if order else 1

    def region(self) -> tuple[int, tuple[int, ...]]:
        """The flat length the box spans from ``start`` (whole rows of its outermost axis) and that length's
        shape: the outermost axis's extent, then each next stride's radix (the unit axis's last)."""
        order = self.moving()
        if not order:
            return 1, ()
        strides = [self.axes[k].stride for k in order]
        shape = (self.axes[order[0]].extent, *(a // b for a, b in zip(strides, strides[1:], strict=False)))
        shape += (strides[-1],) if strides[-1] > 1 else ()     # the unit axis (:meth:`unit`)
        return int(np.prod(shape, dtype=np.int64)), shape


def windows(fn: Function, found: Found, programs: int, loops: Mapping[Op, int] | None = None,
            top: Sequence[Op] | None = None) -> Mapping[Op, Window]:
    """Each top-level load/store whose lanes over the grid form a box of the reshaped buffer → its :class:`Window`.

    ``top``: the ops every program runs once (default: the function's block; the plan adds its branches' sides,
    whose accesses are masked by the branch's predicate); ``loops`` (a vectorised ``scf.for`` → its trip count,
    :mod:`.vectorise`) adds the accesses of their bodies, whose lanes over the grid and the trips (program-major)
    form a box: a window of ``programs * trips`` rows."""
    out = {}
    candidates = [(op, None, 1) for op in (fn.body.ops if top is None else top)]
    for loop, trips in (loops or {}).items():
        names = {loop.loop.iv, *(n for n, _ in loop.loop.iter_args)}
        candidates += [(op, names, trips) for op in loop.regions[0][0].ops]
    for op, names, trips in candidates:
        if op.name == "tt.load" and op in found.loads:
            lanes, starts = found.loads[op].lanes, found.loads[op].starts
        elif op.name == "tt.store" and op in found.stores:
            lanes, starts = found.stores[op], found.store_starts.get(op)
        else:
            continue
        starts = _grid_starts(lanes, starts, names, programs, trips)
        column = _grid_column(found.columns.get(op), programs, trips)
        window = None if starts is None else _window(lanes, access_shape(op), found.limits.get(op), starts,
                                                     op.name == "tt.store", column)
        if window is not None:
            out[op] = window
    return out


def _grid_starts(lanes: Lanes, starts: np.ndarray | None, names: set | None, programs: int,
                 trips: int) -> np.ndarray | None:
    """Lane 0's offset in every program (and, in a vectorised loop's body, every trip: program-major), or None."""
    if lanes.buffer is None or lanes.value is None:
        return None
    if lanes.origin is None:
        value = np.broadcast_to(lanes.value, (programs,)) if lanes.value.ndim == 0 else lanes.value.reshape(-1)
        if value.shape[0] != programs:
            return None
        return np.repeat(value, trips)
    if names is None or lanes.origin[0] not in names or starts is None or starts.size % trips:
        return None     # relative to a value of a loop that is not vectorised
    by_trip = starts.reshape(trips, -1)      # (lanes._starts: trip-major)
    if by_trip.shape[1] not in (1, programs):
        return None
    return np.broadcast_to(by_trip, (trips, programs)).T.reshape(-1)


def _grid_column(column: Column | None, programs: int, trips: int) -> Column | None:
    """``column`` with one base per lane 0 of the access, in :func:`_grid_starts`' order (program-major over the
    trips of a vectorised loop), or None."""
    if column is None:
        return None
    base = column.base.reshape(-1)
    if column.per_trip:     # trip-major over (trips, programs or 1)
        if base.size % trips or base.size // trips not in (1, programs):
            return None
        base = np.broadcast_to(base.reshape(trips, -1), (trips, programs)).T
    elif base.size in (1, programs):    # the same in every trip
        base = np.broadcast_to(base.reshape(-1, 1), (programs, trips)) if base.size == programs else base
    else:
        return None
    return replace(column, base=np.ascontiguousarray(base).reshape(-1) if base.ndim else base)


def _window(lanes: Lanes, shape: tuple[int, ...] | None, limits: Limits | None, starts: np.ndarray,
            store: bool, column: Column | None = None) -> Window | None:
    if shape is None or lanes.buffer is None or len(lanes.strides) != len(shape):
        return None
    grid = program_axes(starts)
    if grid is None:
        return None
    bounds = limits if limits is not None else (None,) * len(shape)
    block = [Axis(s, n if m is None else min(m, n), n) for s, n, m in zip(lanes.strides, shape, bounds, strict=True)]
    window = _boxed_window(Window(lanes.buffer, int(starts[0]), (*grid, *block), len(grid)), store)
    folded = _folded(grid, block, column, starts.shape[0]) if window is None else None
    if folded is not None:
        window = _boxed_window(Window(lanes.buffer, int(starts[0]), *folded), store)
    return window


def _folded(grid: list[Axis], block: list[Axis], column: Column | None,
            programs: int) -> tuple[tuple[Axis, ...], int, int] | None:
    """``(axes, program_axes, fold)`` of a row read or written in column tiles, one per program (DyT's ``(tiles,
    rows)`` grid: lanes ``row * N + tile * BLOCK + i`` under the mask ``tile * BLOCK + i < N``), with the
    innermost program axis folded into the first block axis: one axis of ``tiles * BLOCK`` columns whose first
    ``N`` may be live, where the tiles alone (``BLOCK`` apart) do not divide the rows (``N`` apart). The mask must
    compare exactly the merged column (:class:`.mask_rules.Column`: its lanes per program the tile's first column,
    ``tile * BLOCK``, plus ``i``; its base one per lane 0 of the access or one for all, :func:`_grid_column`); None
    otherwise."""
    if column is None or column.dim != 0 or column.stride != 1 or not grid or not block:
        return None
    tiles, lanes = grid[-1], block[0]
    if tiles.size < 2 or lanes.stride != 1 or lanes.extent != lanes.size or tiles.stride != lanes.size:
        return None
    tile = np.arange(programs, dtype=np.int64) % tiles.size
    if not np.array_equal(np.broadcast_to(column.base, (programs,)), tile * lanes.size):
        return None
    width = tiles.size * lanes.size
    merged = Axis(1, int(np.clip(column.limit, 0, width)), width)
    return (*grid[:-1], merged, *block[1:]), len(grid) - 1, tiles.size


def _boxed_window(window: Window, store: bool) -> Window | None:
    """``window`` where its lanes over the grid are one box of the reshaped buffer, else None."""
    axes = window.axes
    if any(a.extent < 1 or a.stride < 0 for a in axes):
        return None     # (no lane live, or lanes running backwards: the general path)
    if store and any(a.stride == 0 and a.extent > 1 for a in axes):
        return None     # several lanes or programs write one element: the general scatter orders them
    order = window.moving()
    for outer, inner in zip(order, order[1:], strict=False):
        a, b = axes[outer], axes[inner]
        if a.stride % b.stride or b.extent * b.stride > a.stride:
            return None     # dimensions that overlap or interleave: not a box of one reshape
    if order and axes[order[-1]].stride != 1 and order[-1] >= window.program_axes:
        return None     # a block whose lanes are strided: the general path (a per-program scalar: the unit axis)
    return window


def program_axes(starts: np.ndarray) -> list[Axis] | None:
    """``starts`` (one per program of the flattened grid) as ``starts[0] + Σ step_k q_k`` over the digits of
    the program index in a mixed radix (outermost first), or None."""
    axes: list[Axis] = []
    current = starts - starts[0]
    while current.shape[0] > 1:
        n = current.shape[0]
        step = int(current[1] - current[0])
        for count in sorted((d for d in range(2, n + 1) if n % d == 0), reverse=True):
            rows = current.reshape(n // count, count)
            if np.all(rows - rows[:, :1] == step * np.arange(count, dtype=np.int64)[None, :]):
                break
        else:
            return None
        axes.insert(0, Axis(step, count, count))
        current = rows[:, 0]
        if len(axes) > MAX_PROGRAM_AXES:
            return None
    return axes or [Axis(0, 1, 1)]


# ------------------------------------------------------------------ runtime


def _segment(buffer: Any, w: Window) -> tuple[Any, int, int, int]:
    """The buffer padded so that the window's region lies inside it; (padded, begin, lo, length)."""
    import jax.numpy as jnp

    size, _ = w.region()
    length = buffer.shape[0]
    lo, hi = max(0, -w.start), max(0, w.start + size - length)
    padded = jnp.pad(buffer, (lo, hi)) if lo or hi else buffer
    return padded, w.start + lo, lo, length


def _box(w: Window) -> tuple[slice, ...]:
    """The live part of the region's shape (every axis but the outermost cut to its extent)."""
    order = w.moving()
    return tuple(slice(0, w.axes[k].extent) for k in order) + ((slice(0, 1),) if w.unit() > 1 else ())


def _aligned(length: int, w: Window) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """The whole buffer as a grid of the region's radices, ``(length // outer stride, radix, …)``, and where the
    window's box starts and ends in it, where ``start``'s digits leave every axis of the box inside its radix
    (RoPE's second half row: ``start`` 64 of rows 128 long is column 64 of every row). The box is then a slice of
    a reshape of the buffer itself: no padding past its end, no padded copy written back whole. None where the box
    would run off its grid (the padded region of :func:`_segment` then)."""
    order = w.moving()
    if not order or w.start < 0 or length % w.axes[order[0]].stride:
        return None
    _, shape = w.region()
    grid = (length // w.axes[order[0]].stride, *shape[1:])
    corner, rest = [], w.start
    for k, size in zip(order, grid, strict=False):
        digit, rest = divmod(rest, w.axes[k].stride)
        if digit + w.axes[k].extent > size:
            return None
        corner.append(digit)
    end = [c + w.axes[k].extent for c, k in zip(corner, order, strict=True)]
    if w.unit() > 1:    # the unit axis: the one element at start's remainder
        corner.append(rest)
        end.append(rest + 1)
    return grid, tuple(corner), tuple(end)


def read_window(buffer: Any, w: Window) -> Any:
    """All programs' blocks of ``buffer`` as a ``(programs, *block)`` array; lanes past the buffer or past an
    extent (masked off) read zero, lanes along a stride-0 axis repeat."""
    import jax.numpy as jnp
    from jax import lax

    order = w.moving()
    aligned = _aligned(buffer.shape[0], w)
    if aligned is not None:
        grid, corner, end = aligned
        box = lax.slice(buffer.reshape(grid), corner, end)
    else:
        padded, begin, _, _ = _segment(buffer, w)
        size, shape = w.region()
        box = lax.slice_in_dim(padded, begin, begin + size).reshape(shape)[_box(w)]
    box = box.reshape(box.shape[:len(order)])      # (the unit axis's one element)
    # the box's axes are the moving axes, outermost first: put them in the window's axis order
    box = jnp.transpose(box, np.argsort(order).tolist()) if order else box
    full = [w.axes[k].extent if k in order else 1 for k in range(len(w.axes))]
    box = box.reshape(full)
    pads = [(0, a.size - a.extent) if k in order else (0, 0) for k, a in enumerate(w.axes)]
    if any(p for _, p in pads):
        box = jnp.pad(box, pads)
    box = jnp.broadcast_to(box, tuple(a.size for a in w.axes))
    return box.reshape(w.programs, *w.block)


def _boxed(w: Window, x: Any) -> Any:
    """``(programs, *block)`` values (or ``(programs, trips, *block)`` from a vectorised loop: one axis of rows) as
    the window's box in its grid's axis order, cut to the live extents."""
    import jax.numpy as jnp

    order = w.moving()
    sizes = tuple(a.size for a in w.axes)
    live = tuple(slice(0, w.axes[k].extent if k in order else 1) for k in range(len(w.axes)))
    x = jnp.asarray(x)
    lead = x.ndim - len(w.block)
    x = x.reshape(-1, *x.shape[lead:]) if lead > 1 else x
    x = jnp.broadcast_to(x, (w.programs, *w.block)).reshape(sizes)[live]
    x = x.reshape([w.axes[k].extent for k in range(len(w.axes)) if k in order])
    x = jnp.transpose(x, np.argsort(np.argsort(order)).tolist()) if order else x
    return x[..., None] if w.unit() > 1 else x      # the unit axis's one element


def write_whole(buffer: Any, writes: Sequence[tuple[Window, Any]]) -> Any | None:
    """``buffer``'s new contents where ``writes`` (every lane of each written) together cover all of it, each once,
    side by side along one axis of their common grid (RoPE's two half rows; one store of the whole buffer): their
    values concatenated, no select over the old contents. None where they do not."""
    import jax.numpy as jnp

    boxes = [_aligned(buffer.shape[0], w) for w, _ in writes]
    if not boxes or any(b is None for b in boxes) or len({b[0] for b in boxes if b is not None}) != 1:
        return None
    grid = boxes[0][0]
    for axis in range(len(grid)):
        if any((c[d], e[d]) != (0, grid[d]) for _, c, e in boxes for d in range(len(grid)) if d != axis):
            continue
        spans = sorted((c[axis], e[axis], i) for i, (_, c, e) in enumerate(boxes))
        ends, starts = [end for _, end, _ in spans], [start for start, _, _ in spans]
        if starts[0] == 0 and ends[-1] == grid[axis] and ends[:-1] == starts[1:]:     # side by side, each once
            pieces = [_boxed(writes[i][0], writes[i][1]).astype(buffer.dtype) for _, _, i in spans]
            return jnp.concatenate(pieces, axis=axis).reshape(-1)
    return None


def write_window(buffer: Any, w: Window, values: Any, active: Any) -> Any:
    """Write ``(programs, *block)`` ``values`` where ``active`` into ``buffer``'s window (elsewhere it keeps its
    contents)."""
    import jax.numpy as jnp
    from jax import lax

    aligned = _aligned(buffer.shape[0], w)
    if aligned is not None:
        grid, corner, end = aligned
        view = buffer.reshape(grid)
        # the box placed in the whole grid: every element a select XLA fuses with the values' computation and
        # with the other stores into this buffer (an in-place update would need the loads materialised first)
        margins = [(c, g - e, 0) for c, e, g in zip(corner, end, grid, strict=True)]
        inside = lax.pad(_boxed(w, active), False, margins)
        placed = lax.pad(_boxed(w, values).astype(view.dtype), jnp.zeros((), view.dtype), margins)
        return jnp.where(inside, placed, view).reshape(-1)
    padded, begin, lo, length = _segment(buffer, w)
    size, shape = w.region()
    segment = lax.slice_in_dim(padded, begin, begin + size).reshape(shape)
    box = _box(w)
    merged = jnp.where(_boxed(w, active), _boxed(w, values).astype(segment.dtype), segment[box])
    segment = lax.dynamic_update_slice(segment, merged, (0,) * len(shape)) if merged.shape != shape else merged
    padded = lax.dynamic_update_slice_in_dim(padded, segment.reshape(-1), begin, axis=0)
    return lax.slice_in_dim(padded, lo, lo + length) if padded.shape[0] != length else padded
