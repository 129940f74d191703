"""The pointer-lane evaluator's rules (:mod:`.lanes` walks the ops; this is what each op does): one table.

:data:`RULES` maps an op name to its rule, ``rule(op, args, shape, pids) -> Lanes | None``: the lanes of
the op's result from its operands' (None where unknown), its result's shape and the grid's program ids.
An op with no rule has unknown lanes (an integer scalar is still fine as a base). Teaching the
evaluator an op is one entry here; every view of its result (windows, strided views, tilings, bounds,
carried pointers, trip counts) then sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tritonplug_interpret.xla.ttir import Op, program_axis
from tritonplug_interpret.xla.types import UnsupportedType, parse_type

_LIMIT = 1 << 31    # static values past this are left unknown (the kernel's i32 arithmetic may wrap)


@dataclass(frozen=True, eq=False)
class Lanes:
    """Lanes ``base + Σ strides[d] * i_d`` with ``base = coef * origin + value`` (``origin``: a loop value).

    ``value`` is an int64 array over the grid's programs (0-d when every program has the same),
    or None when unknown.
    """

    strides: tuple[int, ...]        # per block dimension, 0 along size-1 and broadcast dimensions
    buffer: int | None = None       # set for pointers
    value: np.ndarray | None = None
    origin: tuple[str, int] | None = None   # (loop value, coefficient)


def shape_of(type_text: str) -> tuple[int, ...] | None:
    """The shape of a TTIR type (() for scalars), None for types the translation has no dtype for."""
    try:
        return parse_type(type_text).shape
    except UnsupportedType:
        return None


def access_shape(op: Op) -> tuple[int, ...] | None:
    """The block a ``tt.load`` reads (its result's shape) or a ``tt.store`` writes (its pointer operand's)."""
    if op.name == "tt.store":
        return shape_of(op.type_text) if op.type_text else None
    return shape_of(op.result_types[-1]) if op.result_types else None


def checked(value: np.ndarray | None) -> np.ndarray | None:
    if value is None or (value.size and int(np.max(np.abs(value))) >= _LIMIT):
        return None
    return value


def uniform(value: np.ndarray | None) -> int | None:
    if value is None or (value.ndim and value.size and not np.all(value == value.flat[0])):
        return None
    return int(value.flat[0]) if value.size else None


def _known(a: Lanes) -> bool:
    return a.buffer is None and a.origin is None and a.value is not None and not any(a.strides)


def _plus(a: Lanes, b: Lanes, sign: int = 1) -> Lanes | None:
    if a.buffer is not None and b.buffer is not None:
        return None
    sa = a.strides or (0,) * len(b.strides)
    sb = b.strides or (0,) * len(sa)
    if len(sa) != len(sb):
        return None
    value = checked(a.value + sign * b.value) if a.value is not None and b.value is not None else None
    if a.origin is not None and b.origin is not None:
        coef = a.origin[1] + sign * b.origin[1]
        if a.origin[0] != b.origin[0]:
            origin, value = None, None      # relative to two loop values: base unknown
        else:
            origin = (a.origin[0], coef) if coef else None
    elif b.origin is not None:
        origin = (b.origin[0], sign * b.origin[1])
    else:
        origin = a.origin
    return Lanes(tuple(x + sign * y for x, y in zip(sa, sb, strict=True)),
                 a.buffer if a.buffer is not None else b.buffer, value, origin)


def _times(a: Lanes, b: Lanes) -> Lanes | None:
    if a.buffer is not None or b.buffer is not None:
        return None
    if _known(b):
        a, b = b, a
    rank = max(len(a.strides), len(b.strides))
    if not _known(a):       # neither factor is a constant: the lanes must not move
        if any(a.strides) or any(b.strides):
            return None
        value = None if a.origin or b.origin or a.value is None or b.value is None else checked(a.value * b.value)
        return Lanes((0,) * rank, None, value)
    k = a.value
    scalar = uniform(k)
    if any(b.strides) or b.origin:
        if scalar is None:
            return None
        return Lanes(tuple(s * scalar for s in (b.strides or (0,) * rank)), None,
                     None if b.value is None else checked(b.value * scalar),
                     None if b.origin is None else (b.origin[0], b.origin[1] * scalar))
    return Lanes((0,) * rank, None, None if b.value is None else checked(b.value * k))


Rule = Callable[[Op, list, tuple[int, ...], tuple[np.ndarray, ...]], "Lanes | None"]


def _constant(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    value = op.int_value
    return None if value is None else Lanes((0,) * len(shape), None, np.asarray(value, np.int64))


def _range(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    return Lanes((1,), None, np.asarray(op.int_attr("start") or 0, np.int64))


def _program_id(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    axis = program_axis(op)
    return None if axis is None else Lanes((), None, pids[axis])


def _num_programs(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    """The grid's size along the axis: every program's ids along it run ``0 … n - 1`` (a grid-stride loop's step,
    ``range(pid, n_rows, tl.num_programs(0))``)."""
    axis = program_axis(op)
    if axis is None or not pids[axis].size:
        return None
    return Lanes((), None, np.asarray(int(pids[axis].max()) + 1, np.int64))


def _splat(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    a = args[0]
    if not a.strides:
        return replace(a, strides=(0,) * len(shape))
    return a if len(a.strides) == len(shape) else None


def _expand_dims(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    a, axis = args[0], op.int_attr("axis")
    return None if axis is None else replace(a, strides=a.strides[:axis] + (0,) + a.strides[axis:])


def _same(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    return args[0]


def _add(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    return _plus(args[0], args[1]) if len(args) == 2 else None


def _sub(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    return _plus(args[0], args[1], -1) if args[1].buffer is None else None


def _mul(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
    return _times(args[0], args[1])


def _scalar(fn: Callable[[np.ndarray, np.ndarray], np.ndarray | None]) -> Rule:
    """A rule for an op of two known, lane-independent values (evaluated over the grid)."""
    def rule(op: Op, args: list, shape: tuple[int, ...], pids: tuple[np.ndarray, ...]) -> Lanes | None:
        if len(args) != 2 or not (_known(args[0]) and _known(args[1])):
            return None
        value = fn(args[0].value, args[1].value)
        return None if value is None else Lanes((0,) * len(shape), None, checked(value))
    return rule


def _nonzero(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray | None]:
    return lambda a, b: None if np.any(b == 0) else fn(a, b)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))    # truncating, as arith.divsi


#: Rules that read no operand (every other rule runs only when all its operands' lanes are known).
SOURCES = frozenset({"arith.constant", "tt.make_range", "tt.get_program_id", "tt.get_num_programs"})
#: The evaluator's table: op name → rule.
RULES: dict[str, Rule] = {
    "arith.constant": _constant, "tt.make_range": _range, "tt.get_program_id": _program_id,
    "tt.get_num_programs": _num_programs, "tt.splat": _splat, "tt.broadcast": _splat, "tt.expand_dims": _expand_dims,
    "arith.extsi": _same, "arith.extui": _same, "arith.trunci": _same, "arith.index_cast": _same,
    "arith.addi": _add, "tt.addptr": _add, "arith.subi": _sub, "arith.muli": _mul,
    "arith.divsi": _scalar(_nonzero(_divide)), "arith.divui": _scalar(_nonzero(_divide)),
    "arith.remsi": _scalar(_nonzero(np.fmod)), "arith.remui": _scalar(_nonzero(np.fmod)),
    "arith.minsi": _scalar(np.minimum), "arith.maxsi": _scalar(np.maximum),
}
