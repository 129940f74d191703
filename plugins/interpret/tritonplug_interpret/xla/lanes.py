"""The one evaluator of pointer arithmetic: the lanes of every pointer and integer value, before tracing.

Before tracing, every integer and pointer value of the kernel (loop bodies included) is
described, where possible, as ``base + Σ_d strides[d] * i_d``: static strides per block
dimension and a per-program ``base``. The grid and the launch's scalars are known here, so
``base`` is often known too, as one number per program (``tt.get_program_id`` and the scalar
arithmetic on it are evaluated with NumPy over the whole grid). Inside ``scf.for`` a base may be
relative to a loop value (``origin``): the induction variable, or an iter_arg that the body
advances by a uniform, loop-invariant step (the ``a_ptrs += BLOCK_K * stride_ak`` of a matmul).
Such a pointer iter_arg is not carried by the loop at all: its base is ``init + trip * step``.

One walk over the ops (loops to a fixed point) applies one table of rules (:mod:`.lane_rules`), and for
i1 masks a second (:mod:`.mask_rules`: ``offs < n`` bounds the lanes a load or store may touch); the
plan's passes are views of its :class:`Found`: :mod:`.windows` (top-level accesses as grid-wide slices),
:mod:`.strided` (views and windows), :func:`within` (loads that need no bounds mask), :mod:`.tiles` (the
stores' lanes), and :mod:`.control` uses :class:`Carried` and the trip counts. The same walk labels
which programs compute equal values (:mod:`.sharing`), for the ``tt.dot``s that :mod:`.gemm` computes
once per distinct tile.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from tritonplug_interpret.xla.lane_rules import RULES, SOURCES, Lanes, access_shape, checked, shape_of, uniform
from tritonplug_interpret.xla.mask_rules import EXACT_RULES, MASK_RULES, Column, Limits, column, normal
from tritonplug_interpret.xla.sharing import ROUNDS, Labels
from tritonplug_interpret.xla.ttir import Block, Function, Op, walk
from tritonplug_interpret.xla.types import UnsupportedType, parse_type

__all__ = ["Carried", "Found", "Lanes", "LoadLanes", "Loop", "access_shape", "analyse", "shape_of", "within"]

_MASK_OPERAND = {"tt.load": 1, "tt.store": 2}     # where an access's mask operand is
_INT_SCALARS = frozenset({"i1", "i8", "i16", "i32", "i64", "index"})


@dataclass(frozen=True)
class Count:
    """An ``scf.for``'s trips: the most any program makes, and whether every program makes as many (else each
    makes its own number, up to ``most``: a row loop over a program count that does not divide the rows)."""

    most: int
    even: bool


@dataclass(frozen=True, eq=False)
class Loop:
    """What is known of an ``scf.for``: its trip count and the static step of its values."""

    trips: int | None
    steps: dict[str, int]           # loop value (iv or iter_arg) → its change per trip
    inits: dict[str, np.ndarray | None] = field(default_factory=dict)   # → its static base at trip 0


@dataclass(frozen=True, eq=False)
class Carried:
    """A pointer iter_arg that stays ``base + pattern``, ``base`` advancing by ``step`` per trip
    (None: not static, the loop carries ``base``)."""

    strides: tuple[int, ...]
    shape: tuple[int, ...]
    step: int | None

    def pattern(self) -> np.ndarray:
        """The lane offsets relative to lane 0 (int64, the block's shape)."""
        lanes = np.zeros(self.shape, np.int64)
        for d, (s, n) in enumerate(zip(self.strides, self.shape, strict=True)):
            index = [1] * len(self.shape)
            index[d] = n
            lanes = lanes + s * np.arange(n, dtype=np.int64).reshape(index)
        return lanes


@dataclass(frozen=True, eq=False)
class LoadLanes:
    """A load's pointer lanes and every lane-0 offset it may have (None: not known statically)."""

    op: Op
    lanes: Lanes
    starts: np.ndarray | None


class _Analysis:
    def __init__(self, arguments: dict[str, Lanes], grid: tuple[int, int, int], dots: bool = True) -> None:
        self.lanes: dict[str, Lanes] = dict(arguments)
        gx, gy, gz = grid
        linear = np.arange(gx * gy * gz, dtype=np.int64)
        self.pids = (linear % gx, (linear // gx) % gy, linear // (gx * gy))
        self.labels = Labels(gx * gy * gz, dots)   # only a tt.dot uses them
        self.loads: dict[Op, tuple[Lanes, Loop | None]] = {}   # as seen on the last visit
        self.loops: dict[str, Loop] = {}        # loop value → its loop (names are reused by sibling regions)
        self.carried: dict[Op, dict[str, Carried]] = {}
        self.stores: dict[Op, Lanes] = {}
        self.store_loops: dict[Op, Loop | None] = {}   # store → the loop of its lanes' origin (as loads')
        self.counts: dict[Op, Count] = {}       # scf.for → its trips, where known (uneven ones: forward loops)
        self.masks: dict[str, Limits] = {}      # i1 value → bound on its live lanes (mask_rules)
        self.limits: dict[Op, Limits] = {}      # load/store → its mask's bound
        self.exact: set[str] = set()            # i1 values whose live lanes are their limits' box (mask_rules)
        self.exact_masked: set[Op] = set()      # loads/stores whose mask is exact
        self.columns: dict[str, Column] = {}    # i1 value → the column it compares (mask_rules.column)
        self.access_columns: dict[Op, tuple[Column, Loop | None]] = {}   # load/store → its mask's column (its loop)
        self.trips: dict[Op, int] = {}          # scf.for → its trip count, the same in every program

    def block(self, block: Block) -> list[str]:
        """Analyse ``block``'s ops; returns its terminator's operands."""
        for op in block.ops:
            if op.name in ("scf.yield", "scf.condition"):
                return list(op.operands)
            if op.name == "scf.for":
                self.loop(op)
                continue
            for region in op.regions:       # scf.if / scf.while / reductions: their values are unknown
                for b in region:
                    for name, _ in b.args:
                        self.lanes.pop(name, None)
                        self.masks.pop(name, None)
                        self.exact.discard(name)
                        self.columns.pop(name, None)
                    self.labels.set_unknown(name for name, _ in b.args)
                    self.block(b)
            # (a loop's body is analysed again when an assumption on its iter_args fails: an access whose
            # pointer has no lanes this time keeps no record of an earlier visit's)
            if op.name == "tt.load" and op.operands and self.lanes.get(op.operands[0]) is not None:
                lanes = self.lanes[op.operands[0]]
                self.loads[op] = (lanes, None if lanes.origin is None else self.loops.get(lanes.origin[0]))
            elif op.name == "tt.load":
                self.loads.pop(op, None)
            if op.name == "tt.store" and self.lanes.get(op.operands[0]) is not None:
                lanes = self.lanes[op.operands[0]]
                self.stores[op] = lanes
                self.store_loops[op] = None if lanes.origin is None else self.loops.get(lanes.origin[0])
            elif op.name == "tt.store":
                self.stores.pop(op, None)
                self.store_loops.pop(op, None)
            at = _MASK_OPERAND.get(op.name)
            if at is not None:
                limits = self.masks.get(op.operands[at]) if len(op.operands) > at else None
                if limits is None:
                    self.limits.pop(op, None)
                else:
                    self.limits[op] = limits
                if len(op.operands) > at and op.operands[at] in self.exact:
                    self.exact_masked.add(op)
                else:
                    self.exact_masked.discard(op)
                found = self.columns.get(op.operands[at]) if len(op.operands) > at else None
                if found is None:
                    self.access_columns.pop(op, None)
                else:
                    self.access_columns[op] = (found, None if found.origin is None else self.loops.get(found.origin[0]))
            out = None
            for name in op.results:     # (names are reused by sibling regions)
                self.masks.pop(name, None)
                self.exact.discard(name)
                self.columns.pop(name, None)
            if op.name in MASK_RULES and len(op.results) == 1:
                self.mask(op)
            if len(op.results) == 1:
                out = self.one(op)
                if out is None:
                    self.lanes.pop(op.results[0], None)
                else:
                    self.lanes[op.results[0]] = out
            self.labels.after(op, None if out is None else out.value,
                              None if out is None or out.origin is None else out.origin[0])
        return []

    def mask(self, op: Op) -> None:
        """The bound on the live lanes of ``op``'s i1 result and whether they are exactly its box, by its rules in
        :data:`.mask_rules.MASK_RULES` and :data:`.mask_rules.EXACT_RULES`."""
        shape = shape_of(op.result_types[-1]) if op.result_types else None
        limits = None
        if shape:
            rule = MASK_RULES[op.name]
            limits = normal(rule(op, [self.lanes.get(n) for n in op.operands],
                                 [self.masks.get(n) for n in op.operands], shape), shape)
        if limits is not None:
            self.masks[op.results[0]] = limits
        compared = column(op, [self.lanes.get(n) for n in op.operands])
        if compared is not None:
            self.columns[op.results[0]] = compared
        if shape and EXACT_RULES[op.name](op, [self.lanes.get(n) for n in op.operands],
                                          [n in self.exact for n in op.operands],
                                          [self.masks.get(n) for n in op.operands], shape):
            self.exact.add(op.results[0])

    def _static(self, name: str) -> np.ndarray | None:
        lanes = self.lanes.get(name)
        return None if lanes is None or lanes.origin is not None or any(lanes.strides) else lanes.value

    def loop(self, op: Op) -> None:
        header = op.loop
        body = op.regions[0][0]
        if header is None:
            self.labels.set_unknown(name for name, _ in body.args)
            self.block(body)
            self.labels.set_unknown(op.results)
            return
        iv, lb, ub, step, bindings = header.iv, header.lower, header.upper, header.step, header.iter_args
        lower, upper, stride = self._static(lb), self._static(ub), uniform(self._static(step))
        trips = None
        if lower is not None and upper is not None and stride:
            count = np.maximum(0, -((lower - upper) // stride))
            trips = int(np.max(count))
            if uniform(count) is not None or stride > 0:
                self.counts[op] = Count(trips, uniform(count) is not None)
            if uniform(lower) is not None and uniform(upper) is not None:
                self.trips[op] = trips
        zero = np.zeros((), np.int64)
        for name in [iv, *(n for n, _ in bindings), *(n for n, _ in body.args)]:
            self.masks.pop(name, None)
            self.columns.pop(name, None)
        self.lanes[iv] = Lanes((), None, zero, (iv, 1))
        if self.counts.get(op) == Count(1, True) and lower is not None:
            self.lanes[iv] = Lanes((), None, lower)    # one trip: the induction variable is its lower bound
        steps: dict[str, int] = {} if stride is None else {iv: stride}
        inits = {iv: lower}
        assumed = {}
        for name, init in bindings:
            if init in self.lanes:
                assumed[name] = Lanes(self.lanes[init].strides, self.lanes[init].buffer, zero, (name, 1))
                inits[name] = self._static_base(init)
        labels = self.labels
        if labels.enabled:
            labels.of[iv] = labels.combine([labels.get(lb), labels.get(ub), labels.get(step)])
            for name, init in bindings:
                labels.of[name] = labels.combine([labels.get(init), labels.get(iv)])
        for attempt in range(len(bindings) + 1 + ROUNDS):    # drop iter_args until the assumption holds
            self.loops.update({n: Loop(trips, steps, inits) for n in [iv, *assumed]})
            self.lanes.update(assumed)
            for name, _ in bindings:
                if name not in assumed:
                    self.lanes.pop(name, None)
            yielded = dict(zip((n for n, _ in bindings), body.ops[-1].operands if body.ops else [], strict=False))
            self.block(body)
            broken = [name for name in assumed if not self._keeps(assumed[name], self.lanes.get(yielded.get(name)))]
            refined = labels.refine((name, yielded.get(name)) for name, _ in bindings)
            if refined and attempt == len(bindings) + ROUNDS:
                labels.sound = False
            if not broken and not refined:
                break
            for name in broken:
                del assumed[name]
        for name in assumed:
            out = self.lanes[yielded[name]]
            step_value = uniform(out.value) if out.origin == (name, 1) else None
            if step_value is not None:
                steps[name] = step_value
        for result, (name, _) in zip(op.results, bindings, strict=False) if labels.enabled else ():
            labels.of[result] = labels.get(name)
        for result, (name, _), type_text in zip(op.results, bindings, op.result_types, strict=False):
            if name in assumed:
                self.lanes[result] = replace(assumed[name], value=None, origin=None)
                shape = shape_of(type_text)
                if assumed[name].buffer is not None and shape is not None:
                    self.carried.setdefault(op, {})[name] = Carried(assumed[name].strides, shape, steps.get(name))
            else:
                self.lanes.pop(result, None)

    def _static_base(self, name: str) -> np.ndarray | None:
        lanes = self.lanes.get(name)
        return None if lanes is None or lanes.origin is not None else lanes.value

    @staticmethod
    def _keeps(assumed: Lanes, out: Lanes | None) -> bool:
        return out is not None and out.strides == assumed.strides and out.buffer == assumed.buffer

    def one(self, op: Op) -> Lanes | None:
        """The lanes of ``op``'s one result, by its rule in :data:`.lane_rules.RULES`."""
        types = op.result_types
        shape = shape_of(types[-1]) if types else None
        if shape is None:
            return None
        rule = RULES.get(op.name)
        args = [self.lanes.get(n) for n in op.operands]
        out = None
        if rule is not None and (op.name in SOURCES or (args and None not in args)):
            out = rule(op, args, shape, self.pids)
        if out is None and not shape and _scalar_type(op) in _INT_SCALARS:
            out = Lanes(())             # an integer scalar: fine as a base, whatever it is
        return None if out is None else _normal(out, shape)


def _scalar_type(op: Op) -> str:
    """A scalar result's element type; a scalar ``tt.load`` prints its pointer's type (``!tt.ptr<i32>``): the
    pointee's (a step loaded at run time is one integer for every lane)."""
    text = op.result_types[-1].strip()
    if op.name == "tt.load":
        try:
            pointee = parse_type(text).pointee
        except UnsupportedType:
            return text
        return pointee or text
    return text


def _normal(lanes: Lanes, shape: tuple[int, ...]) -> Lanes | None:
    if len(lanes.strides) != len(shape):
        return None
    return replace(lanes, strides=tuple(0 if n == 1 else s for s, n in zip(lanes.strides, shape, strict=True)))


@dataclass(frozen=True, eq=False)
class Found:
    """The evaluator's result, which the plan's passes view: windows, strided accesses, tilings, bounds, GEMMs."""

    loads: dict[Op, LoadLanes]              # load → its pointer's lanes
    carried: dict[Op, dict[str, Carried]]   # scf.for → pointer iter_arg → how the loop carries it
    trips: dict[Op, int] = field(default_factory=dict)    # scf.for → trip count, uniform over programs
    dots: dict[Op, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)   # tt.dot → operand labels
    stores: dict[Op, Lanes] = field(default_factory=dict)  # store → its pointer's lanes
    limits: dict[Op, Limits] = field(default_factory=dict)  # load/store → bound on its mask's live lanes
    counts: dict[Op, Count] = field(default_factory=dict)  # scf.for → its trips (the most; whether even)
    store_starts: dict[Op, np.ndarray] = field(default_factory=dict)   # store → every lane-0 offset (as loads')
    exact_masked: frozenset[Op] = frozenset()   # load/store whose mask's live lanes are its limits' box
    columns: dict[Op, Column] = field(default_factory=dict)   # load/store → the column its mask compares


def analyse(fn: Function, arguments: dict[str, Lanes], grid: tuple[int, int, int]) -> Found:
    """Lanes of every load's pointer (nested loads included) and of every loop-carried pointer."""
    analysis = _Analysis(arguments, grid, any(op.name == "tt.dot" for op in walk(fn.body)))
    analysis.labels.set_uniform(name for name, _ in fn.args)     # every program gets the same arguments
    analysis.block(fn.body)
    loads = {op: LoadLanes(op, lanes, _starts(lanes, loop))
             for op, (lanes, loop) in analysis.loads.items() if lanes.buffer is not None}
    dots = dict(analysis.labels.dots) if analysis.labels.sound else {}
    store_starts = {op: starts for op, lanes in analysis.stores.items()
                    if (starts := _starts(lanes, analysis.store_loops.get(op))) is not None}
    columns = {op: expanded for op, (col, loop) in analysis.access_columns.items()
               if (expanded := _expand_column(col, loop)) is not None}
    return Found(loads, dict(analysis.carried), dict(analysis.trips), dots, dict(analysis.stores),
                 dict(analysis.limits), dict(analysis.counts), store_starts,
                 frozenset(analysis.exact_masked), columns)


def _expand_column(col: Column, loop: Loop | None) -> Column | None:
    """``col`` with a base relative to a loop value expanded over the loop's trips (:func:`_starts`: trip-major)."""
    if col.origin is None:
        return col
    base = _starts(Lanes((), None, col.base, col.origin), loop)
    return None if base is None else replace(col, base=base, origin=None, per_trip=True)


def _starts(lanes: Lanes, loop: Loop | None) -> np.ndarray | None:
    """Every lane-0 offset the access may touch (over the trips of ``loop``, the loop of the lanes' origin,
    then the programs: trip-major), or None."""
    if lanes.value is None:
        return None
    if lanes.origin is None:
        return lanes.value.reshape(-1)
    name, coef = lanes.origin
    if loop is None or not loop.trips or name not in loop.steps or loop.inits.get(name) is None:
        return None
    trips = np.arange(loop.trips, dtype=np.int64)[:, None] * loop.steps[name]
    bases = loop.inits[name].reshape(1, -1) + trips
    return checked((lanes.value.reshape(1, -1) + coef * bases).reshape(-1))


def within(lanes: Lanes, starts: np.ndarray | None, shape: tuple[int, ...] | None, size: int,
           limits: Limits | None = None) -> bool:
    """Whether every lane the access may touch (every program, every trip: ``starts``) lies inside a buffer of
    ``size`` elements: its bounds mask is then all true and need not be computed. ``limits`` (its mask's bound,
    :mod:`.mask_rules`): lanes at or past a dimension's limit are masked off in every program, so only the
    lanes below it must be inside (a row of 5632 in a block of 8192: the block's tail runs past the buffer's end
    in the last row, but never touches memory)."""
    if starts is None or not starts.size or shape is None or len(shape) != len(lanes.strides):
        return False
    bounds = limits if limits is not None and len(limits) == len(shape) else (None,) * len(shape)
    live = [n if m is None else max(1, min(n, m)) for n, m in zip(shape, bounds, strict=True)]
    low = sum(min(0, s * (n - 1)) for s, n in zip(lanes.strides, live, strict=True))
    high = sum(max(0, s * (n - 1)) for s, n in zip(lanes.strides, live, strict=True))
    return int(starts.min()) + low >= 0 and int(starts.max()) + high < size
