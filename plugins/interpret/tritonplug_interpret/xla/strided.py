"""Block loads read as windows of a strided view of the buffer, wherever they are in the kernel.

A load whose pointer tensor is ``base + Σ_d s_d * i_d`` — a per-program scalar ``base``
(anything: computed from program ids, loop counters, loaded values) plus lane offsets whose
strides ``s_d`` are known before tracing — reads a rectangle of the buffer: rows ``R`` apart
(``R`` the larger stride) of contiguous runs (stride 1). That is one ``lax.dynamic_slice`` of
a 2-D view of the buffer instead of a gather of every lane; under ``vmap`` the slices of all
programs become one gather of whole windows (one index per program, not per element), which
XLA copies row by row. The typical case is the k-loop of a matmul, whose pointers are loop
iter_args advanced by a uniform step (``a_ptrs += BLOCK_K * stride_ak``).

The analysis runs before tracing over the whole function, loop bodies included: an iter_arg
keeps its initial value's strides when the yielded value has the same strides (the base may
change freely). The view is built once per kernel call, padded so that every window with at
least one lane inside the buffer is read unclamped; lanes outside the buffer and masked lanes
still take ``other`` (the load computes its mask from the lane offsets as before).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tritonplug_interpret.xla.ttir import Block, Function, Op, split_top
from tritonplug_interpret.xla.types import UnsupportedType, parse_type

#: At most this many shifted copies of the buffer per view (rows closer than a window is wide).
MAX_SHIFTS = 4

_FOR = re.compile(r"^(%[\w.$-]+)\s*=\s*(%[\w.$#-]+)\s+to\s+(%[\w.$#-]+)\s+step\s+(%[\w.$#-]+)"
                  r"(?:\s+iter_args\((.*)\))?")
_BINDING = re.compile(r"(%[\w.$-]+)\s*=\s*(%[\w.$#-]+)")
_INT_SCALARS = frozenset({"i1", "i8", "i16", "i32", "i64", "index"})


@dataclass(frozen=True)
class Lanes:
    """A value's lanes as ``base + Σ strides[d] * i_d``; ``value`` is ``base`` when known statically."""

    strides: tuple[int, ...]        # per block dimension, 0 along size-1 and broadcast dimensions
    buffer: int | None = None       # set for pointers
    value: int | None = None        # the base, when it is a constant or a launch scalar


@dataclass(frozen=True)
class View:
    """A 2-D view ``V[r, j] = buffer[r * row - front + j]`` of one buffer (what windows slice)."""

    buffer: int
    row: int        # R: elements between the view's rows (0: a flat, 1-D view)
    width: int      # W: columns (> R when windows may run past the end of a row)
    front: int      # elements of padding before the buffer
    rows: int       # the window's extent along the row dimension
    cols: int       # its extent along the contiguous dimension


@dataclass(frozen=True)
class Access:
    """How one load reads its block from a :class:`View`."""

    view: View
    row_dim: int | None   # block dimension that steps by ``view.row`` (None: a 1-D run)
    col_dim: int          # block dimension of stride 1
    shape: tuple[int, ...]


def for_header(op: Op) -> tuple[str, str, str, str, list[tuple[str, str]]] | None:
    """``scf.for``'s (induction variable, lower, upper, step, [(iter_arg, initial value)])."""
    m = _FOR.match(op.header)
    if not m:
        return None
    iv, lb, ub, step, iter_text = m.groups()
    return iv, lb, ub, step, _BINDING.findall(iter_text or "")


def _for_result_types(op: Op) -> list[str]:
    """``scf.for``'s result types, printed in its header: ``... iter_args(...) -> (t0, t1)``."""
    parts = split_top(op.header, "->")
    if len(parts) < 2:
        return []
    tail = parts[-1].strip()
    if tail.startswith("(") and tail.endswith(")"):
        tail = tail[1:-1]
    return [t.strip() for t in split_top(tail, ",") if t.strip()]


def _shape_of(type_text: str) -> tuple[int, ...] | None:
    try:
        return parse_type(type_text).shape
    except UnsupportedType:
        return None


def _int_constant(op: Op) -> int | None:
    text = op.header.strip()
    if text.startswith("dense<"):
        text = text[len("dense<"):-1]
    try:
        return int(text)
    except ValueError:
        return None


def _normal(lanes: Lanes, shape: tuple[int, ...]) -> Lanes | None:
    if len(lanes.strides) != len(shape):
        return None
    return replace(lanes, strides=tuple(0 if n == 1 else s for s, n in zip(lanes.strides, shape, strict=True)))


def _plus(a: Lanes, b: Lanes, sign: int = 1) -> Lanes | None:
    if a.buffer is not None and b.buffer is not None:
        return None
    sa = a.strides or (0,) * len(b.strides)
    sb = b.strides or (0,) * len(sa)
    if len(sa) != len(sb):
        return None
    value = a.value + sign * b.value if a.value is not None and b.value is not None else None
    return Lanes(tuple(x + sign * y for x, y in zip(sa, sb, strict=True)),
                 a.buffer if a.buffer is not None else b.buffer, value)


def _known(a: Lanes) -> bool:
    return a.buffer is None and a.value is not None and not any(a.strides)


def _times(a: Lanes, b: Lanes) -> Lanes | None:
    if a.buffer is not None or b.buffer is not None:
        return None
    if _known(b):
        a, b = b, a
    rank = max(len(a.strides), len(b.strides))
    if not _known(a):       # neither factor is a constant: fine only while no lane moves
        return Lanes((0,) * rank) if not any(a.strides) and not any(b.strides) else None
    k = a.value
    strides = b.strides or (0,) * rank
    return Lanes(tuple(s * k for s in strides), None, None if b.value is None else b.value * k)


@dataclass(frozen=True)
class Carried:
    """A pointer iter_arg of ``scf.for`` that stays ``base + pattern``: the loop carries only ``base``."""

    strides: tuple[int, ...]
    shape: tuple[int, ...]

    def pattern(self) -> np.ndarray:
        """The lane offsets relative to lane 0 (int64, the block's shape)."""
        lanes = np.zeros(self.shape, np.int64)
        for d, (s, n) in enumerate(zip(self.strides, self.shape, strict=True)):
            index = [1] * len(self.shape)
            index[d] = n
            lanes = lanes + s * np.arange(n, dtype=np.int64).reshape(index)
        return lanes


@dataclass(frozen=True)
class Found:
    accesses: dict[int, Access]     # id(load op) → how it reads a window
    carried: dict[str, Carried]     # iter_arg name → its lanes


class _Analysis:
    def __init__(self, arguments: dict[str, Lanes]) -> None:
        self.lanes: dict[str, Lanes] = dict(arguments)
        self.loads: dict[int, Op] = {}
        self.carried: dict[str, Carried] = {}

    def block(self, block: Block) -> list[str]:
        """Analyse ``block``'s ops; returns its terminator's operands."""
        for op in block.ops:
            if op.name in ("scf.yield", "scf.condition"):
                return list(op.operands)
            if op.name == "scf.for":
                self.loop(op)
                continue
            for region in op.regions:       # scf.if / scf.while / reductions: results unknown
                for b in region:
                    for name, _ in b.args:
                        self.lanes.pop(name, None)
                    self.block(b)
            if op.name == "tt.load":
                self.loads[id(op)] = op
            if len(op.results) == 1:
                out = self.one(op)
                if out is None:
                    self.lanes.pop(op.results[0], None)
                else:
                    self.lanes[op.results[0]] = out
        return []

    def loop(self, op: Op) -> None:
        header = for_header(op)
        body = op.regions[0][0]
        if header is None:
            self.block(body)
            return
        iv, _, _, _, bindings = header
        self.lanes[iv] = Lanes(())
        assumed = {name: replace(self.lanes[init], value=None) for name, init in bindings if init in self.lanes}
        for _ in range(len(bindings) + 1):          # drop iter_args until the assumption holds
            self.lanes.update(assumed)
            for name, _ in bindings:
                if name not in assumed:
                    self.lanes.pop(name, None)
            yielded = self.block(body)
            broken = [name for (name, _), out in zip(bindings, yielded, strict=False)
                      if name in assumed and (self.lanes.get(out) is None
                                              or self.lanes[out].strides != assumed[name].strides
                                              or self.lanes[out].buffer != assumed[name].buffer)]
            if not broken:
                break
            for name in broken:
                del assumed[name]
        names = [n for n, _ in bindings]
        for result, name, type_text in zip(op.results, names, _for_result_types(op), strict=False):
            if name in assumed:
                self.lanes[result] = assumed[name]
                shape = _shape_of(type_text)
                if assumed[name].buffer is not None and shape:
                    self.carried[name] = Carried(assumed[name].strides, shape)
            else:
                self.lanes.pop(result, None)

    def one(self, op: Op) -> Lanes | None:
        types = op.result_types()
        shape = _shape_of(types[-1]) if types else None
        if shape is None:
            return None
        args = [self.lanes.get(n) for n in op.operands]
        name = op.name
        out: Lanes | None = None
        if name == "arith.constant":
            value = _int_constant(op)
            out = None if value is None else Lanes((0,) * len(shape), None, value)
        elif name == "tt.make_range":
            out = Lanes((1,), None, int(op.attrs.get("start", "0").split(":")[0]))
        elif None not in args and args:
            out = self._combine(name, op, args, shape)
        if out is None and not shape and types[-1].strip() in _INT_SCALARS:
            out = Lanes(())             # an integer scalar: fine as a base, whatever it is
        return None if out is None else _normal(out, shape)

    def _combine(self, name: str, op: Op, args: list[Lanes], shape: tuple[int, ...]) -> Lanes | None:
        a = args[0]
        if name in ("tt.splat", "tt.broadcast"):
            if not a.strides:
                return Lanes((0,) * len(shape), a.buffer, a.value)
            return a if len(a.strides) == len(shape) else None
        if name == "tt.expand_dims":
            axis = int(op.attrs["axis"].split(":")[0])
            return replace(a, strides=a.strides[:axis] + (0,) + a.strides[axis:])
        if name in ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast"):
            return a
        if name in ("arith.addi", "tt.addptr") and len(args) == 2:
            return _plus(a, args[1])
        if name == "arith.subi" and args[1].buffer is None:
            return _plus(a, args[1], -1)
        if name == "arith.muli":
            return _times(a, args[1])
        return None


def analyse(fn: Function, arguments: dict[str, Lanes], sizes: dict[int, int],
            skip: frozenset[int] = frozenset()) -> Found:
    """Every ``tt.load`` (nested ones included, those in ``skip`` left out) that reads a window of a
    buffer in ``sizes``, and every loop-carried pointer that keeps its lane pattern."""
    analysis = _Analysis(arguments)
    analysis.block(fn.body)
    found = {}
    for key, op in analysis.loads.items():
        if key in skip or not op.operands:
            continue
        lanes = analysis.lanes.get(op.operands[0])
        shape = _shape_of(op.result_types()[-1]) if op.result_types() else None
        if lanes is None or lanes.buffer is None or not shape or lanes.buffer not in sizes:
            continue
        access = _access(lanes, shape)
        if access is not None:
            found[key] = access
    return Found(found, dict(analysis.carried))


def _access(lanes: Lanes, shape: tuple[int, ...]) -> Access | None:
    moving = [(s, d) for d, s in enumerate(lanes.strides) if s]
    if any(s < 0 for s, _ in moving) or not moving or len(moving) > 2:
        return None
    if len(moving) == 1:
        (s, d), = moving
        if s != 1:
            return None
        n = shape[d]
        return Access(View(lanes.buffer, 0, n, n - 1, 1, n), None, d, shape)
    (s0, d0), (s1, d1) = sorted(moving, reverse=True)
    if s1 != 1:
        return None
    rows, cols = shape[d0], shape[d1]
    width = s0 + cols - 1
    if -(-width // s0) - 1 > MAX_SHIFTS:
        return None
    extent = (rows - 1) * s0 + cols - 1
    return Access(View(lanes.buffer, s0, width, extent, rows, cols), d0, d1, shape)


# ------------------------------------------------------------------ runtime


def build_view(buffer: Any, view: View) -> Any:
    """The padded 2-D view of a flat ``buffer`` (every window with a lane inside is unclamped)."""
    import jax.numpy as jnp

    length = buffer.shape[0]
    row, front = view.row, view.front
    if not row:
        return jnp.pad(buffer, (front, front))
    n_rows = (length - 1 + front) // row + view.rows          # rows a window may start in, plus its height
    shifts = -(-view.width // row)                             # shifted copies that make a row W wide
    total = (n_rows + shifts) * row
    padded = jnp.pad(buffer, (front, total - front - length))
    grid = padded.reshape(n_rows + shifts, row)
    parts = [grid[t:t + n_rows] for t in range(shifts)]
    wide = parts[0] if shifts == 1 else jnp.concatenate(parts, axis=1)
    return wide[:, :view.width]


def read(view_array: Any, access: Access, base: Any) -> Any:
    """The block at lane offset ``base`` (a traced scalar) in the block's own shape."""
    import jax.numpy as jnp
    from jax import lax

    view = access.view
    start = jnp.asarray(base).astype(jnp.int64) + view.front
    if access.row_dim is None:
        window = lax.dynamic_slice(view_array, (start,), (view.cols,))
        dims: tuple[int, ...] = (access.col_dim,)
    else:
        window = lax.dynamic_slice(view_array, (start // view.row, start % view.row), (view.rows, view.cols))
        dims = (access.row_dim, access.col_dim)
        if access.row_dim > access.col_dim:
            window, dims = window.T, (access.col_dim, access.row_dim)
    shape = [1] * len(access.shape)
    for d in dims:
        shape[d] = access.shape[d]
    return jnp.broadcast_to(window.reshape(shape), access.shape)
