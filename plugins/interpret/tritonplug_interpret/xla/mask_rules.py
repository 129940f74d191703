"""Masks the pointer-lane evaluator can bound: ``offs < n`` and their conjunctions, as a box of live lanes.

A row narrower than its power-of-two block is loaded and stored under ``mask = tl.arange(0, BLOCK) < n``
(RMSNorm at hidden 3072 in a block of 4096; RoPE's ``(heads[:, None] < n_h) & (cols[None, :] < d)``). What
:mod:`.windows` needs from such a mask is a bound: along block dimension ``d`` no lane at index ``>=
limits[d]`` is live, in any program. The load still applies the mask itself (lanes inside the bound may be
off); the bound only says which lanes may touch memory, so a window need only cover those.

:data:`MASK_RULES` maps an op name to ``rule(op, args, masks, shape) -> Limits | None``: ``args`` are the
operands' integer :class:`.lane_rules.Lanes` (None where unknown), ``masks`` the operands' limits (None where
unknown). Sound by construction: an op's limits are never tighter than its live lanes.

A mask can also be proved **exact**: in every program its live lanes are exactly the box its limits give (``offs <
n`` where every program has as many lanes below ``n``: SwiGLU's 5632 columns in a block of 8192), and **full** where
that box is the whole block (RoPE's at 16 heads and a rotary width of the head dim, RMSNorm's ``cols < n`` where the
row fills its block). :data:`EXACT_RULES` maps an op name to ``rule(op, args, exact, masks, shape) -> bool``. An
access whose mask is full is translated without it; so is a store whose mask is exact and whose lanes are a window
(:mod:`.windows` writes only the box's lanes): no select per load, the stores whole writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tritonplug_interpret.xla.lane_rules import Lanes
from tritonplug_interpret.xla.ttir import Op

#: Per block dimension, an exclusive upper bound on the index of a live lane (None: no bound known).
Limits = tuple[int | None, ...]
MaskRule = Callable[[Op, list["Lanes | None"], list["Limits | None"], tuple[int, ...]], "Limits | None"]

_LESS = {"slt": False, "ult": False, "sle": True, "ule": True}           # predicate → inclusive
_GREATER = {"sgt": False, "ugt": False, "sge": True, "uge": True}        # b > a, b >= a: the same, swapped


def _moving(lanes: Lanes | None, limit: Lanes | None, loop_relative: bool = False) -> tuple[int, int] | None:
    """``(dim, stride)`` of integer lanes compared with ``limit``: moving along one dimension only, by a positive
    stride, from a known base (relative to a loop value where ``loop_relative``); ``limit`` known and the same for
    every lane of a program. None otherwise."""
    if lanes is None or limit is None or lanes.value is None or lanes.buffer is not None:
        return None
    if lanes.origin is not None and not loop_relative:
        return None
    if limit.value is None or limit.origin is not None or limit.buffer is not None or any(limit.strides):
        return None
    moving = [(d, s) for d, s in enumerate(lanes.strides) if s]
    if len(moving) != 1 or moving[0][1] < 0:
        return None
    return moving[0]


def _counts(lanes: Lanes | None, limit: Lanes | None, inclusive: bool, unsigned: bool) -> tuple[int, np.ndarray] | None:
    """``(dim, lanes live per program)`` for ``lanes < limit`` (``<=`` when ``inclusive``): :func:`_moving`'s lanes."""
    found = _moving(lanes, limit)
    if found is None or lanes is None or limit is None:
        return None
    dim, stride = found
    base, bound = np.asarray(lanes.value, np.int64), np.asarray(limit.value, np.int64)
    if unsigned and (np.any(base < 0) or np.any(bound < 0)):
        return None     # as unsigned, a negative value is huge: leave it unknown
    room = bound - base + (1 if inclusive else 0)          # lanes i with base + stride * i < room + base
    return dim, -(-room // stride)


def _compared(op: Op, args: list) -> tuple[int, np.ndarray] | None:
    """:func:`_counts` of an ``arith.cmpi`` ``lanes < limit`` or ``limit > lanes`` (``<=``/``>=`` inclusive)."""
    predicate = op.keyword or ""
    if len(args) != 2:
        return None
    if predicate in _LESS:
        return _counts(args[0], args[1], _LESS[predicate], predicate[0] == "u")
    if predicate in _GREATER:
        return _counts(args[1], args[0], _GREATER[predicate], predicate[0] == "u")
    return None


@dataclass(frozen=True, eq=False)
class Column:
    """A mask ``base + stride * i_dim < limit`` with one bound for every program: the lanes it compares, per program
    (``base``: over the grid, or 0-d), along block dimension ``dim``. Where those lanes are a column index spanning
    a program axis and a block axis (``tile * BLOCK + arange(BLOCK) < n``: DyT's column tiles), :mod:`.windows` can
    read the tiles of a row as one row padded to whole tiles, ``limit`` its width."""

    dim: int
    base: np.ndarray
    stride: int
    limit: int
    #: ``base`` relative to a loop value (``(name, coefficient)``: a row's column blocks walked by a loop, ``offs = i
    #: + arange(BLOCK)``), until :func:`.lanes.analyse` expands it over the loop's trips
    origin: tuple[str, int] | None = None
    #: ``base`` runs over the trips of the loop of its origin, then the programs (trip-major): set by the expansion
    per_trip: bool = False


def column(op: Op, args: list) -> Column | None:
    """An ``arith.cmpi`` mask's :class:`Column` (``lanes < limit``, ``<=`` counted as ``< limit + 1``), or None."""
    if op.name != "arith.cmpi" or len(args) != 2:
        return None
    predicate = op.keyword or ""
    if predicate not in _LESS or predicate[0] == "u":
        return None
    lanes, limit = args
    found = _moving(lanes, limit, loop_relative=True)
    if found is None or lanes is None or limit is None:
        return None
    bound = np.unique(np.asarray(limit.value, np.int64))
    if bound.size != 1:
        return None
    dim, stride = found
    return Column(dim, np.asarray(lanes.value, np.int64), stride, int(bound[0]) + (1 if _LESS[predicate] else 0),
                  lanes.origin)


def _cmpi(op: Op, args: list, masks: list, shape: tuple[int, ...]) -> Limits | None:
    """The most lanes live in any program, along the compared lanes' moving dimension."""
    counted = _compared(op, args)
    if counted is None:
        return None
    dim, count = counted
    limits: list[int | None] = [None] * len(shape)
    limits[dim] = max(0, int(np.max(count)))
    return tuple(limits)


def _and(op: Op, args: list, masks: list, shape: tuple[int, ...]) -> Limits | None:
    known = [m for m in masks if m is not None and len(m) == len(shape)]
    if not known:
        return None
    return tuple(_tightest([m[d] for m in known]) for d in range(len(shape)))


def _or(op: Op, args: list, masks: list, shape: tuple[int, ...]) -> Limits | None:
    if any(m is None or len(m) != len(shape) for m in masks):
        return None
    return tuple(None if any(m[d] is None for m in masks) else max(m[d] for m in masks) for d in range(len(shape)))


def _tightest(limits: list[int | None]) -> int | None:
    known = [x for x in limits if x is not None]
    return min(known) if known else None


def _broadcast(op: Op, args: list, masks: list, shape: tuple[int, ...]) -> Limits | None:
    # limits are normal (:func:`normal`): a size-1 dimension's is None or 0 (no lane live), true after broadcast too
    mask = masks[0] if masks else None
    return mask if mask is not None and len(mask) == len(shape) else None


def _expand_dims(op: Op, args: list, masks: list, shape: tuple[int, ...]) -> Limits | None:
    mask, axis = (masks[0] if masks else None), op.int_attr("axis")
    if mask is None or axis is None:
        return None
    return mask[:axis] + (None,) + mask[axis:]


def normal(limits: Limits | None, shape: tuple[int, ...]) -> Limits | None:
    """``limits`` with a bound no tighter than the block's own dropped (None when no dimension keeps one)."""
    if limits is None or len(limits) != len(shape):
        return None
    out = tuple(None if m is None or m >= n else m for m, n in zip(limits, shape, strict=True))
    return None if all(m is None for m in out) else out


#: Op name → how its result bounds live lanes (an i1 tensor's). Any other op's result bounds nothing.
MASK_RULES: dict[str, MaskRule] = {
    "arith.cmpi": _cmpi, "arith.andi": _and, "arith.ori": _or,
    "tt.broadcast": _broadcast, "tt.expand_dims": _expand_dims,
}


# ------------------------------------------------------------------ exact masks

ExactRule = Callable[[Op, list["Lanes | None"], list[bool], list["Limits | None"], tuple[int, ...]], bool]


def _exact_cmpi(op: Op, args: list, exact: list[bool], masks: list, shape: tuple[int, ...]) -> bool:
    """``lanes < limit`` is exact where every program has as many lanes live along the moving dimension, counted
    within the block (:func:`_compared`): then its lanes are the box ``[0, count)`` in every program."""
    counted = _compared(op, args)
    if counted is None or not shape:
        return False
    live = np.clip(counted[1], 0, shape[counted[0]])
    return bool(np.min(live) == np.max(live))


def _exact_or(op: Op, args: list, exact: list[bool], masks: list, shape: tuple[int, ...]) -> bool:
    """An or is exact where one side is full (exact, its box the whole block): the or is full too."""
    return any(e and m is None for e, m in zip(exact, masks, strict=True))


#: Op name → whether its i1 result is exact (its live lanes, in every program, are the box its limits give, the
#: whole block where they give none) given its operands'; any other op's is not known. An and of exact masks is
#: the intersection of their boxes, a box.
EXACT_RULES: dict[str, ExactRule] = {
    "arith.cmpi": _exact_cmpi,
    "arith.andi": lambda op, args, exact, masks, shape: bool(exact) and all(exact),
    "arith.ori": _exact_or,
    "tt.broadcast": lambda op, args, exact, masks, shape: bool(exact) and exact[0],
    "tt.expand_dims": lambda op, args, exact, masks, shape: bool(exact) and exact[0],
}
