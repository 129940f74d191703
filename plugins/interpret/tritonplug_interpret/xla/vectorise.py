"""Row loops run as one vectorised step: an ``scf.for`` whose trips are independent, ``vmap``-ed over its trips.

Off the GPU Liger's backward kernels launch one program that walks every row (RMSNorm's and LayerNorm's
``for row_idx in range(row_start, row_end)``, ``sm_count`` being 1), and cross entropy loops over the
vocabulary in blocks, storing the gradient inside the loop. Run as a ``lax.while_loop`` (or unrolled), each
trip's loads and stores are gathers and scatters of every element, and a store inside a loop forces the
programs into a sequential loop. When the trips do not depend on one another, the loop is the body
``vmap``-ed over its trip index instead: its accesses, like the grid's, are then boxes over (programs, trips)
that :mod:`.windows` reads and writes as slices, and the stores join the grid's store log.

:func:`vectorisable` decides, before tracing, from the pointer-lane evaluator's result (:mod:`.lanes`): the
loop's trip count is known and the same in every program, its body holds no ``tt.dot`` (the GEMM passes own
those) and writes memory only by ``tt.store``; with more than one trip, every iter_arg is a pointer advanced by
a static step (:class:`.lanes.Carried`) or a sum ``acc = acc + term`` (f32/f64 or integer) that nothing else
reads, and no load of the body reads a buffer that its stores write (a later trip would read an earlier one's
writes). A loop of one trip qualifies with any iter_args (its body runs once, as unrolled). The driver's
schedule then counts the body's stores as straight-line (:func:`.plan.straight_line`); :func:`run` is the
``scf.for`` handler's vectorised path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tritonplug_interpret.xla.lanes import Count
from tritonplug_interpret.xla.memory import Pointer
from tritonplug_interpret.xla.program import WRITES, Frame, State
from tritonplug_interpret.xla.ttir import Op, walk

#: Loads the body may hold, each of which reads from some buffers (the schedule's over-approximation).
_LOADS = ("tt.load", "tt.descriptor_load")


@dataclass(frozen=True)
class Vectorised:
    """A loop run as one vectorised step: its trip count, and its sums (iter_arg index → the ``addf``/``addi``);
    ``uneven``: the programs make different numbers of trips (a row loop ``range(pid * R, min(pid * R + R, n))``
    over a program count that does not divide ``n``), ``trips`` the most: each trip runs predicated on
    ``iv < upper`` (the program's own bound), its stores and checks masked, its sums' terms zero."""

    trips: int
    sums: Mapping[int, Op]
    uneven: bool = False


def vectorisable(op: Op, count: Count | None, carried: Mapping[str, Any], roots: Mapping[str, frozenset[int]],
                 buffer_of: Callable[[Op], int | None]) -> Vectorised | None:
    """How ``op`` (an ``scf.for``) runs vectorised over its trips (``count``: the most a program makes, and whether
    every program makes as many), or None (as before: a loop). ``buffer_of``: an access's buffer where the
    pointer-lane evaluator knows it, else the value's ``roots`` (which buffers a value may point into)
    over-approximate it."""
    if op.name != "scf.for" or op.loop is None or op.loop.iv is None or not count or not count.most or not op.regions:
        return None
    trips, uneven = count.most, not count.even
    body = op.regions[0][0]
    ops = list(walk(body))
    if any(o.name == "tt.dot" or (o.name in WRITES and o.name != "tt.store") for o in ops):
        return None
    if trips == 1 and not uneven:
        return Vectorised(1, {})
    names = [n for n, _ in op.loop.iter_args]
    sums = _sums(body, names, op.result_types)
    for index, name in enumerate(names):
        if index not in sums and (name not in carried or carried[name].step is None):
            return None     # carried from trip to trip: not independent
    def buffers(o: Op) -> frozenset[int]:
        known = buffer_of(o)
        return frozenset({known}) if known is not None else roots.get(o.operands[0], frozenset({-1}))

    written = frozenset().union(*(buffers(o) for o in ops if o.name == "tt.store"))
    if any(o.name in _LOADS and buffers(o) & (written | {-1}) for o in ops):
        return None     # a trip might read what an earlier one wrote (or a load whose buffer is unknown)
    return Vectorised(trips, sums, uneven)


def _sums(body, names: list[str], types: tuple[str, ...]) -> dict[int, Op]:
    """The iter_args that the body only adds to: ``acc' = acc + term`` is what it yields, ``acc`` read nowhere else."""
    terminator = body.ops[-1] if body.ops else None
    yields = list(terminator.operands) if terminator is not None and terminator.name == "scf.yield" else []
    uses = Counter(name for o in walk(body) for name in o.operands)
    producers = {r: o for o in body.ops for r in o.results}
    found = {}
    for index, name in enumerate(names):
        add = producers.get(yields[index]) if index < len(yields) else None
        if add is None or add.name not in ("arith.addf", "arith.addi") or len(add.operands) != 2:
            continue
        if name not in add.operands or add.operands[0] == add.operands[1] or uses[name] != 1:
            continue
        if uses[add.results[0]] != 1 or (add.name == "arith.addf" and not _wide(types[index:index + 1])):
            continue    # (an fp16/bf16 sum rounds every trip: summing the trips at once would not)
        found[index] = add
    return found


def _wide(types: tuple[str, ...]) -> bool:
    return len(types) == 1 and types[0].strip().rstrip(">").endswith(("f32", "f64"))


# ------------------------------------------------------------------ runtime


def run(f: Frame, op: Op, plan: Vectorised, start: Callable[[int], list[Any]]) -> list[Any]:
    """The loop's results; ``start(trip)`` binds the iter_args at a trip (as the loop handler does) and returns
    the pointers' values at it. Accesses with a window (``f.hoisted``) get their trip's row."""
    loop, block = op.loop, op.regions[0][0]
    body = block if not block.args else type(block)([], block.ops)
    lower, upper, stride = f.get(loop.lower), f.get(loop.upper), f.get(loop.step)
    inits = [f.get(v) for _, v in loop.iter_args]
    ops = set(block.ops)
    mine = {o: row for o, row in f.hoisted.items() if o in ops}    # (trips, *block) each (one trip: *block)
    log = f.ctx.store_log
    kinds: list[tuple[Any, int]] = []

    before = f.state

    order = list(mine)     # (a pytree's dict keys must sort; ops do not)
    active: list[Any] = [None]     # uneven trips: whether this program makes the trip being traced

    def trip(t: Any, rows: list) -> tuple[list[Any], list[Any], tuple]:
        f.state = State(list(before.buffers), before.bad_site, before.bad_offset, before.bad_lane)
        f.hoisted.update(zip(order, rows, strict=True))
        iv = (jnp.asarray(lower) + t.astype(jnp.asarray(lower).dtype) * stride).astype(jnp.asarray(lower).dtype)
        f.env[loop.iv] = iv
        for (name, _), value in zip(loop.iter_args, start(t), strict=True):
            f.env[name] = value
        begin = len(log)
        outer = f.predicate
        if plan.uneven:     # the trip runs predicated: its stores and checks masked where the program ends sooner
            active[0] = iv < upper
            f.predicate = active[0] if outer is None else outer & active[0]
        try:
            out = f.run_block(body, ())
        finally:
            f.predicate = outer
        entries = log[begin:]
        del log[begin:]
        kinds[:] = [(kind, b) for kind, b, _, _, _ in entries]
        s = f.state
        return out, [(i, v, a) for _, _, i, v, a in entries], (s.bad_site, s.bad_offset, s.bad_lane)

    if plan.trips == 1:
        # (one trip's rows are the program's; f.state keeps the trip's record)
        out, entries, _ = trip(jnp.int32(0), list(mine.values()))
        log.extend((kind, b, *entry) for (kind, b), entry in zip(kinds, entries, strict=True))
        if not plan.uneven:
            return out
        made = start(_trips_made(lower, upper, stride, 1))   # (the pointers where this program's trips end)
        return [m if isinstance(o, Pointer) else jnp.where(active[0], o, i)
                for o, m, i in zip(out, made, inits, strict=True)]
    for index, add in plan.sums.items():   # the trip yields its term; the sum is added after the loop
        name = loop.iter_args[index][0]
        term = add.operands[1] if add.operands[0] == name else add.operands[0]
        f.overrides[add] = lambda frame, o, term=term: [_term(frame.get(term), active[0])]
    try:
        def mapped(t, rows):
            out, entries, record = trip(t, rows)
            return [out[i] for i in plan.sums], entries, record
        terms, entries, record = jax.vmap(mapped)(jnp.arange(plan.trips, dtype=jnp.int32), list(mine.values()))
    finally:
        for add in plan.sums.values():
            f.overrides.pop(add, None)
        f.hoisted.update(mine)
    log.extend((kind, b, *entry) for (kind, b), entry in zip(kinds, entries, strict=True))
    f.state = before
    if f.ctx.check:
        _first_failure(f, record)
    results = start(jnp.int32(plan.trips) if not plan.uneven else _trips_made(lower, upper, stride, plan.trips))
    for index, term in zip(plan.sums, terms, strict=True):
        results[index] = (inits[index] + jnp.sum(term, axis=0)).astype(jnp.asarray(inits[index]).dtype)
    return results


def _term(value: Any, active: Any) -> Any:
    """A sum's term from one trip: zero where the program does not make it (uneven trips)."""
    return value if active is None else jnp.where(active, value, jnp.zeros_like(value))


def _trips_made(lower: Any, upper: Any, stride: Any, most: int) -> Any:
    """How many trips this program makes (uneven trips): its pointers after the loop are bound there."""
    made = (jnp.asarray(upper) - jnp.asarray(lower) + stride - 1) // stride
    return jnp.clip(made, 0, most).astype(jnp.int32)


def _first_failure(f: Frame, record: tuple) -> None:
    """Checked mode: the state's record after the trips, the first trip's failure first (as the loop's order)."""
    sites, offsets, lanes = record
    s = f.state
    trips = np.arange(sites.shape[0], dtype=np.int32)
    failed = (sites >= 0) & (s.bad_site < 0)
    first = jnp.min(jnp.where(failed, trips, sites.shape[0]))
    pick = trips == first
    s.bad_site = jnp.where(jnp.any(failed), jnp.max(jnp.where(pick, sites, -1)), s.bad_site)
    s.bad_offset = jnp.where(jnp.any(failed), jnp.max(jnp.where(pick, offsets, jnp.iinfo(jnp.int64).min)),
                             s.bad_offset)
    s.bad_lane = jnp.where(jnp.any(failed), jnp.max(jnp.where(pick, lanes, -1)), s.bad_lane)
