"""The analyses that run before anything is traced, as named passes producing one frozen :class:`Plan`.

In order (as Triton's ``add_stages`` lists its passes, :data:`PASSES`): ``lanes`` (the one evaluator of pointer
arithmetic: every pointer's lanes, loop trip counts, carried pointers and which programs share values,
:mod:`.lanes`); ``vectorise`` (loops whose trips run at once, :mod:`.vectorise`) and ``schedule`` (parallel
``vmap`` over the grid or programs in order, :func:`choose_parallel`); then views of the lanes: ``bounds`` (loads
and stores whose every live lane is inside its buffer: no bounds mask; those whose mask is true in every lane: no
mask), and in the parallel schedule ``tiling`` (stores that tile their buffer, :mod:`.tiles`), ``windows`` (the
other top-level accesses that are boxes of the reshaped buffer: slices, :mod:`.windows`), ``sharing`` (dots whose
tiles repeat over the grid, :mod:`.gemm`) and ``strided`` (loads as windows of strided views, :mod:`.strided`).
A lane-wise kernel whose accesses leave the tail of its block dead is first cut to its live lanes
(:mod:`.live_block`, from a first ``lanes`` pass); the passes then plan that function, :attr:`Plan.fn`. The plan's
maps are keyed by the function's ops (which hash by identity), read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from tritonplug_interpret.xla import gemm, lanes, live_block, strided, tiles, vectorise
from tritonplug_interpret.xla.program import WRITES, BufferInfo
from tritonplug_interpret.xla.ttir import Function, Op, walk
from tritonplug_interpret.xla.windows import Window, windows


@dataclass(frozen=True)
class Plan:
    """What the passes decided; every map is keyed by an op of ``fn``, the function they planned (the kernel's, or
    its block cut to the live lanes: :mod:`.live_block`)."""

    fn: Function
    parallel: bool                               # programs vectorised over the grid (else in order)
    vectorised: Mapping[Op, vectorise.Vectorised]   # scf.for → run vmap-ed over its independent trips
    windows: Mapping[Op, Window]                 # top-level access → grid-wide slice
    hoisted: frozenset[Op]                       # top-level tt.load ops with a window (read before the grid)
    carried: Mapping[Op, Mapping[str, lanes.Carried]]   # scf.for → {pointer iter_arg: how the loop carries it}
    trips: Mapping[Op, int]                      # scf.for → static trip count, the same in every program
    shared_dots: Mapping[Op, gemm.SharedDot]     # tt.dot → its GEMM over the programs' distinct tiles
    tilings: Mapping[Op, tiles.Tiling]           # tt.store → a transpose of the buffer, not a scatter
    accesses: Mapping[Op, strided.Access]        # tt.load → a window of a strided view
    inside: frozenset[Op]                        # tt.load/tt.store whose live lanes are all inside (no bounds mask)
    unmasked: frozenset[Op] = frozenset()        # tt.load/tt.store whose mask is dropped: true in every lane, or
    #                                              a window store's whose lanes are exactly its box


@dataclass(frozen=True)
class Launch:
    """What the passes know of the launch: pointer arguments' buffer slots, static scalars, buffers, grid."""

    fn: Function
    pointer_args: Mapping[str, int]
    scalars: Mapping[str, int]
    buffers: Sequence[BufferInfo]
    grid: tuple[int, int, int]

    @property
    def programs(self) -> int:
        return int(np.prod(self.grid))


def _vectorise(launch: Launch, found: dict[str, Any]) -> dict[str, Any]:
    roots = _roots(launch.fn, dict(launch.pointer_args))
    result = found["lanes"]

    def buffer_of(op: Op) -> int | None:
        lanes_of = result.loads[op].lanes if op in result.loads else result.stores.get(op)
        return None if lanes_of is None else lanes_of.buffer

    planned = ((op, vectorise.vectorisable(op, result.counts.get(op), result.carried.get(op, {}), roots, buffer_of))
               for op in straight_line(launch.fn.body) if op.name == "scf.for")
    return {"vectorised": {op: v for op, v in planned if v is not None}}


def _schedule(launch: Launch, found: dict[str, Any]) -> dict[str, Any]:
    parallel = choose_parallel(launch.fn, dict(launch.pointer_args), frozenset(found["vectorised"]))
    return {"parallel": parallel, "vectorised": found["vectorised"] if parallel else {}}


def _lanes(launch: Launch, found: dict[str, Any]) -> dict[str, Any]:
    known = {arg: lanes.Lanes((), slot, np.zeros((), np.int64)) for arg, slot in launch.pointer_args.items()}
    known.update({arg: lanes.Lanes((), None, np.asarray(v, np.int64)) for arg, v in launch.scalars.items()})
    result = lanes.analyse(launch.fn, known, launch.grid)
    return {"lanes": result, "carried": result.carried, "trips": result.trips}


def _bounds(launch: Launch, found: dict[str, Any]) -> dict[str, Any]:
    result = found["lanes"]
    accesses = [(op, load.lanes, load.starts) for op, load in result.loads.items()]
    accesses += [(op, store, result.store_starts.get(op)) for op, store in result.stores.items()
                 if store.buffer is not None]
    return {"inside": frozenset(op for op, where, starts in accesses
                                if lanes.within(where, starts, lanes.access_shape(op),
                                                launch.buffers[where.buffer].size, result.limits.get(op))),
            "unmasked": frozenset(op for op in result.exact_masked if result.limits.get(op) is None)}


def _windows(launch: Launch, found: dict[str, Any]) -> dict[str, Any]:
    loops = {op: v.trips for op, v in found["vectorised"].items()}
    top = straight_line(launch.fn.body)     # (with the branches' sides)
    slices = windows(launch.fn, found["lanes"], launch.programs, loops, top) if found["parallel"] else {}
    slices = {op: w for op, w in slices.items() if op not in found["tilings"]}
    # a store whose mask is exact writes its window's box, every lane of which the mask leaves on: no mask
    boxed = frozenset(op for op in slices if op.name == "tt.store" and op in found["lanes"].exact_masked)
    return {"windows": slices, "hoisted": frozenset(op for op in slices if op.name == "tt.load"),
            "unmasked": found["unmasked"] | boxed}


def _sharing(launch: Launch, found: dict[str, Any]) -> dict[str, Any]:
    # parallel: loads read unchanging buffers, so equal operands give equal tiles
    dots = found["lanes"].dots.items() if found["parallel"] else ()
    planned = ((op, gemm.plan(a, b)) for op, (a, b) in dots)
    return {"shared_dots": {op: dot for op, dot in planned if dot is not None}}


def _tiling(launch: Launch, found: dict[str, Any]) -> dict[str, Any]:
    if not found["parallel"]:
        return {"tilings": {}}
    top = set(launch.fn.body.ops)   # top-level stores, applied after the grid
    laid = ((op, tiles.tiling(op, store, launch.buffers[store.buffer].size, launch.programs))
            for op, store in found["lanes"].stores.items() if op in top)
    return {"tilings": {op: t for op, t in laid if t is not None}}


def _strided(launch: Launch, found: dict[str, Any]) -> dict[str, Any]:
    if not found["parallel"]:   # (parallel: no buffer changes during the grid)
        return {"accesses": {}}
    views = ((op, strided.access(load, launch.buffers[load.lanes.buffer].size))
             for op, load in found["lanes"].loads.items() if op not in found["windows"])
    return {"accesses": {op: a for op, a in views if a is not None}}


#: The passes in order: each reads the launch and what earlier passes found, and adds its own findings.
PASSES: tuple[tuple[str, Callable[[Launch, dict[str, Any]], dict[str, Any]]], ...] = (
    ("lanes", _lanes), ("vectorise", _vectorise), ("schedule", _schedule), ("bounds", _bounds),
    ("tiling", _tiling), ("windows", _windows),
    ("sharing", _sharing), ("strided", _strided),
)


def make(fn: Function, pointer_args: Mapping[str, int], arguments: Sequence[tuple[str, Any]],
         buffers: Sequence[BufferInfo], grid: tuple[int, ...]) -> Plan:
    """Run the passes over ``fn`` for a launch: ``pointer_args`` maps pointer arguments to buffer slots,
    ``arguments`` are the driver's (name, (kind, value, element)) bindings."""
    scalars = {arg: int(value) for arg, (kind, value, element) in arguments
               if kind == "scalar" and element in ("i32", "i64") and isinstance(value, int)}
    launch = Launch(fn, MappingProxyType(dict(pointer_args)), MappingProxyType(scalars), tuple(buffers),
                    tuple(int(g) for g in grid))
    found: dict[str, Any] = _lanes(launch, {})
    cut = live_block.cut(fn, found["lanes"])
    if cut is not None:     # the function on its live lanes, planned from its own lanes
        launch = replace(launch, fn=cut)
        found = _lanes(launch, {})
    for _, run in PASSES[1:]:   # (PASSES[0], the lanes pass, ran above)
        found.update(run(launch, found))
    frozen = MappingProxyType
    return Plan(launch.fn, found["parallel"], frozen(dict(found["vectorised"])), frozen(dict(found["windows"])),
                found["hoisted"],
                frozen({op: frozen(dict(c)) for op, c in found["carried"].items()}), frozen(dict(found["trips"])),
                frozen(found["shared_dots"]), frozen(found["tilings"]), frozen(found["accesses"]), found["inside"],
                found["unmasked"])


# ------------------------------------------------------------------ the schedule


def _used_names(fn: Function) -> set[str]:
    return {name for op in walk(fn.body) for name in op.operands}


def _roots(fn: Function, pointer_args: dict[str, int]) -> dict[str, frozenset[int]]:
    """For every value, the buffers it may point into (an over-approximation)."""
    roots: dict[str, frozenset[int]] = {n: frozenset({b}) for n, b in pointer_args.items()}

    def visit(block) -> None:
        for op in block.ops:
            found = frozenset().union(*(roots.get(n, frozenset()) for n in op.operands))
            for region in op.regions:
                for b in region:
                    for name, _ in b.args:
                        roots[name] = found
                    for inner in walk(b):  # names bound inside region headers (iter_args, while args)
                        for r in inner.results:
                            roots.setdefault(r, frozenset())
            if op.regions:
                bound = [] if op.loop is None else [op.loop.iv, *(n for n, _ in op.loop.iter_args)]
                for name in bound:     # names bound by a loop's header (induction variable, iter_args)
                    if name is not None and name not in roots:
                        roots[name] = found
                for region in op.regions:
                    for b in region:
                        visit(b)
                found = found.union(*(roots.get(r, frozenset()) for inner in (o for region in op.regions
                                      for b in region for o in walk(b)) for r in inner.results))
            for r in op.results:
                roots[r] = found
    visit(fn.body)
    return roots


def straight_line(block, loops: frozenset[Op] = frozenset()) -> list[Op]:
    """The ops every program runs at most once, in order: the block's, and those of its branches (``scf.if``,
    ``cf.cond_br``: in parallel mode both sides run masked) and of the ``loops`` run vectorised (their trips run
    at once, :mod:`.vectorise`), not those of other loops."""
    out = []
    for op in block.ops:
        out.append(op)
        if op.name in ("scf.if", "cf.cond_br") or op in loops:
            out += [o for region in op.regions for b in region for o in straight_line(b, loops)]
    return out


def choose_parallel(fn: Function, pointer_args: dict[str, int], loops: frozenset[Op] = frozenset()) -> bool:
    used = _used_names(fn)
    for op in walk(fn.body):
        if op.name == "tt.atomic_cas" or (op.name == "tt.atomic_rmw" and any(r in used for r in op.results)):
            return False
        if op.name == "tt.atomic_rmw" and op.keyword in ("and", "or", "xor"):
            return False  # no scatter combines bits: these run lane by lane, programs in order
    top_set = set(straight_line(fn.body, loops))
    if any(op.name in WRITES and op not in top_set for op in walk(fn.body)):
        return False
    return _reads_after_writes(fn.body, _roots(fn, pointer_args), set(), loops) is not None


def _reads_after_writes(block, roots: dict[str, frozenset[int]], written: set[int],
                        loops: frozenset[Op]) -> set[int] | None:
    """The buffers written after ``block`` runs (from ``written`` before it), or None where a load may read a
    buffer the program wrote before it. A branch's sides start from the same buffers (only one runs)."""
    for op in block.ops:
        nested = [o for region in op.regions for b in region for o in walk(b)]
        if any(o.name in ("tt.load", "tt.descriptor_load") and roots.get(o.operands[0], frozenset()) & written
               for o in [op, *nested]):
            return None
        if op.name in WRITES:
            target = roots.get(op.operands[0])
            if not target:
                return None
            written = written | target
        if op.name in ("scf.if", "cf.cond_br") or op in loops:
            after = set(written)
            for region in op.regions:
                for b in region:
                    side = _reads_after_writes(b, roots, set(written) if op not in loops else after, loops)
                    if side is None:
                        return None
                    after |= side
            written = after
    return written
