"""The analyses that run before anything is traced, as named passes producing one frozen :class:`Plan`.

In order (as Triton's ``add_stages`` lists its passes): ``schedule`` (parallel ``vmap`` over the grid or
programs in order, :func:`choose_parallel`), ``windows`` (top-level accesses as grid-wide slices,
:mod:`.affine`), ``lanes`` (pointer lanes, loop trip counts and carried pointers, :mod:`.lanes`), and in the
parallel schedule ``sharing`` (dots whose tiles repeat over the grid, :mod:`.gemm`), ``tiling`` (stores that tile
their buffer, :mod:`.tiles`) and ``strided`` (loads as windows of strided views, :mod:`.strided`). The plan's
maps are keyed by ``id(op)`` of the function's ops, read-only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from tritonplug_interpret.xla import affine, gemm, lanes, strided, tiles
from tritonplug_interpret.xla.program import WRITES, BufferInfo
from tritonplug_interpret.xla.ttir import Function, Op, walk


@dataclass(frozen=True)
class Plan:
    """What the passes decided; every map is keyed by ``id(op)``."""

    parallel: bool                               # programs vectorised over the grid (else in order)
    windows: Mapping[int, affine.Window]         # top-level access → grid-wide slice
    load_ids: frozenset[int]                     # top-level tt.load ops (their windows are read before the grid)
    carried: Mapping[int, Any]                   # scf.for → {iter_arg: lanes.Carried}
    trips: Mapping[int, int]                     # scf.for → static trip count, the same in every program
    shared_dots: Mapping[int, gemm.SharedDot]    # tt.dot → its GEMM over the programs' distinct tiles
    tilings: Mapping[int, tiles.Tiling]          # tt.store → a transpose of the buffer, not a scatter
    accesses: Mapping[int, strided.Access]       # tt.load → a window of a strided view


def make(fn: Function, pointer_args: Mapping[str, int], arguments: Sequence[tuple[str, Any]],
         buffers: Sequence[BufferInfo], grid: tuple[int, ...]) -> Plan:
    """Run the passes over ``fn`` for a launch: ``pointer_args`` maps pointer arguments to buffer slots,
    ``arguments`` are the driver's (name, (kind, value, element)) bindings."""
    parallel = choose_parallel(fn, pointer_args)                                  # schedule
    forms = {arg: affine.Form(0, (0, 0, 0), (), slot) for arg, slot in pointer_args.items()}
    known = {arg: lanes.Lanes((), slot, np.zeros((), np.int64)) for arg, slot in pointer_args.items()}
    for arg, (kind, value, element) in arguments:
        if kind == "scalar" and element in ("i32", "i64") and isinstance(value, int):
            forms[arg] = affine.Form(int(value), (0, 0, 0), ())
            known[arg] = lanes.Lanes((), None, np.asarray(int(value), np.int64))
    windows = affine.windows(fn, forms, grid) if parallel else {}                 # windows
    found = lanes.analyse(fn, known, grid)                                        # lanes
    shared, tilings, accesses = {}, {}, {}
    if parallel:   # loads read unchanging buffers: equal operands give equal tiles          # sharing
        for key, (a_labels, b_labels) in found.dots.items():
            dot = gemm.plan(a_labels, b_labels)
            if dot is not None:
                shared[key] = dot
        top = {id(op) for op in fn.body.ops}   # top-level stores, applied after the grid    # tiling
        programs = int(np.prod(grid))
        for key, (op, store) in found.stores.items():
            laid = tiles.tiling(op, store, buffers[store.buffer].size, programs) \
                if key in top and key not in windows else None
            if laid is not None:
                tilings[key] = laid
        for key, load in found.loads.items():   # no buffer changes during the grid          # strided
            access = None if key in windows else strided.access(load, buffers[load.lanes.buffer].size)
            if access is not None:
                accesses[key] = access
    frozen = MappingProxyType
    return Plan(parallel, frozen(dict(windows)), frozenset(id(op) for op in fn.body.ops if op.name == "tt.load"),
                frozen(dict(found.carried)), frozen(dict(found.trips)), frozen(shared), frozen(tilings),
                frozen(accesses))


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
                for word in op.header.replace(",", " ").replace("(", " ").split():
                    if word.startswith("%") and word not in roots:
                        roots[word] = found
                for region in op.regions:
                    for b in region:
                        visit(b)
                found = found.union(*(roots.get(r, frozenset()) for inner in (o for region in op.regions
                                      for b in region for o in walk(b)) for r in inner.results))
            for r in op.results:
                roots[r] = found
    visit(fn.body)
    return roots


def straight_line(block) -> list[Op]:
    """The ops every program runs at most once, in order: the block's, and those of its branches (``scf.if``,
    ``cf.cond_br``: in parallel mode both sides run masked), not those of loops."""
    out = []
    for op in block.ops:
        out.append(op)
        if op.name in ("scf.if", "cf.cond_br"):
            out += [o for region in op.regions for b in region for o in straight_line(b)]
    return out


def choose_parallel(fn: Function, pointer_args: dict[str, int]) -> bool:
    used = _used_names(fn)
    for op in walk(fn.body):
        if op.name == "tt.atomic_cas" or (op.name == "tt.atomic_rmw" and any(r in used for r in op.results)):
            return False
        if op.name == "tt.atomic_rmw" and op.header.split(",")[0].strip() in ("and", "or", "xor"):
            return False  # no scatter combines bits: these run lane by lane, programs in order
    top = straight_line(fn.body)
    top_ids = {id(op) for op in top}
    if any(op.name in WRITES and id(op) not in top_ids for op in walk(fn.body)):
        return False
    roots = _roots(fn, pointer_args)
    written: set[int] = set()
    for op in top:
        nested = [op] + [o for region in op.regions for b in region for o in walk(b)]
        for o in nested:
            if o.name in ("tt.load", "tt.descriptor_load") and roots.get(o.operands[0], frozenset()) & written:
                return False
        if op.name in WRITES:
            target = roots.get(op.operands[0])
            if not target:
                return False
            written |= target
    return True
