"""scf.for / scf.while / scf.if as lax.while_loop and lax.cond.

Loop-carried values may be pointers (pytrees whose buffer is static). The program's state
(buffers in sequential mode, the checked-mode record) is carried too when the region can
change it. Under ``vmap`` JAX batches these: a while loop whose trip count differs between
programs runs until every program is done, each keeping its own values.

A pointer iter_arg that :mod:`.lanes` found to stay ``base + pattern`` is carried as its lane-0
offset only, or not at all when the loop advances it by a static step (``base = init + trip *
step``), so the loop carries no per-lane offsets and each load's window start is one number.

An ``scf.for`` whose trip count :mod:`.lanes` knows (the same in every program) and whose body is
short is unrolled: XLA runs a while loop's body op by op, unrolled it fuses and schedules the
trips together. In an unrolled loop, ``acc += tt.dot(a, b)`` into an accumulator nothing else
reads records each trip's operands and adds one dot of the concatenated operands after the loop
(a matmul's k-loop becomes one dot with the whole k).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
from jax import lax

from tritonplug_interpret.xla import blocks, vectorise
from tritonplug_interpret.xla.memory import Pointer, select_pointers
from tritonplug_interpret.xla.program import Frame, State, Unsupported, family, writes_memory
from tritonplug_interpret.xla.ttir import Op, walk

HANDLERS, handler = family()   # this family's part of the op table (ops.TABLE)

#: A ``scf.for`` whose trip count is known (and the same in every program) is unrolled when
#: trips × body ops stays below this ...
UNROLL_OPS = 512
#: ... and the function's unrolled loops together stay below this (XLA's compile time grows with the copies) ...
UNROLL_BUDGET = 2048
#: ... and trips × the body's dots that are not summed (see :func:`_accumulated_dots`) stays below this.
UNROLL_DOTS = 8


def _unrolled(f: Frame, block, trips: int, sums: list) -> bool:
    """Whether to unroll a loop of ``trips`` static trips (and take its size from the function's budget).

    Unrolled, XLA fuses the trips' elementwise work and a k-loop's products become one dot (``sums``), or
    one GEMM per trip over the programs' shared tiles; but each product that is not summed is a dot per trip
    to compile (Triton's attention backward, 8 trips of 2 such dots in each of two loops, took 25 s to compile
    unrolled, 4 s as while loops)."""
    size = trips * len(block.ops)
    if size > UNROLL_OPS or size > f.ctx.unroll_budget:
        return False
    if trips * (sum(op.name == "tt.dot" for op in walk(block)) - len(sums)) > UNROLL_DOTS:
        return False
    f.ctx.unroll_budget -= size
    return True


def _carried_state(f: Frame, op: Op) -> tuple[bool, bool]:
    """(carry the buffers, carry the check record)."""
    return (not f.ctx.parallel and writes_memory(op)), f.ctx.check


def _pack(f: Frame, carry_buffers: bool, carry_check: bool) -> tuple:
    s = f.state
    return (list(s.buffers) if carry_buffers else None,
            (s.bad_site, s.bad_offset, s.bad_lane) if carry_check else None)


def _unpack(f: Frame, packed: tuple) -> None:
    buffers, check = packed
    state = State(list(f.state.buffers), f.state.bad_site, f.state.bad_offset, f.state.bad_lane)
    if buffers is not None:
        state.buffers = list(buffers)
    if check is not None:
        state.bad_site, state.bad_offset, state.bad_lane = check
    f.state = state


def _like(value: Any, template: Any) -> Any:
    """Give a loop-carried value the dtype of its initial value (weak-typed scalars drift)."""
    if hasattr(template, "dtype") and hasattr(value, "dtype") and value.dtype != template.dtype:
        return value.astype(template.dtype)
    return value


def _lane0(value: Any) -> Any:
    offset = jnp.asarray(value.offset)
    return jnp.reshape(offset, (-1,))[0] if offset.ndim else offset


def _carry_kind(carried: Any, value: Any) -> str:
    """How the loop carries an iter_arg: ``value`` (as is), ``base`` (a pointer's lane-0 offset) or
    ``none`` (a pointer whose base advances by a static step: computed from the trip count)."""
    if carried is None or not isinstance(value, Pointer):
        return "value"
    return "base" if carried.step is None else "none"


def _pointer_at(carried: Any, like: Pointer, base: Any) -> Pointer:
    pattern = jnp.asarray(carried.pattern())
    return Pointer(like.buffer, jnp.asarray(base, jnp.int64) + pattern, like.element)


@handler("scf.for")
def _for(f: Frame, op: Op):
    loop = op.loop
    if loop is None:
        raise Unsupported("scf.for", f"cannot read {op.header!r}")
    iv, lb, ub, step, bindings = loop.iv, loop.lower, loop.upper, loop.step, loop.iter_args
    names = [n for n, _ in bindings]
    init = [f.get(v) for _, v in bindings]
    lanes = f.ctx.plan.carried.get(op, {})     # lanes.Carried of the pointer iter_args that keep their lanes
    kinds = [_carry_kind(lanes.get(n), v) for n, v in zip(names, init, strict=True)]
    bases = [_lane0(v) if k != "value" else None for k, v in zip(kinds, init, strict=True)]
    lower, upper, stride = f.get(lb), f.get(ub), f.get(step)
    block = op.regions[0][0]
    carry_buffers, carry_check = _carried_state(f, op)
    outer_state = f.state

    def bind(trip, values):
        """The iter_args' values at ``trip`` from the carried ``values``."""
        out, carried = [], iter(values)
        for n, kind, v0, base0 in zip(names, kinds, init, bases, strict=True):
            if kind == "none":
                out.append(_pointer_at(lanes[n], v0, base0 + trip.astype(jnp.int64) * lanes[n].step))
            elif kind == "base":
                out.append(_pointer_at(lanes[n], v0, next(carried).offset))
            else:
                out.append(next(carried))
        return out

    def carry(values):
        return [Pointer(v.buffer, _lane0(v), v.element) if kind == "base" else v
                for v, kind in zip(values, kinds, strict=True) if kind != "none"]

    def cond(state):
        return state[0] < upper

    def body(state):
        i, trip, values, packed = state
        _unpack(f, packed)
        f.env[iv] = i
        for n, v in zip(names, bind(trip, values), strict=True):
            f.env[n] = v
        out = carry(f.run_block(_body_without_args(block), ()))
        out = [_like(o, t) for o, t in zip(out, values, strict=True)]
        return i + stride, trip + 1, out, _pack(f, carry_buffers, carry_check)

    vectorised = f.ctx.plan.vectorised.get(op)
    if vectorised is not None:     # independent trips: the body vmap-ed over them (.vectorise)
        return vectorise.run(f, op, vectorised, lambda trip: bind(trip, carry(init)))
    start = (jnp.asarray(lower), jnp.int32(0), carry(init), _pack(f, carry_buffers, carry_check))
    static_trips = f.ctx.plan.trips.get(op)
    sums: list[_Sum] = _accumulated_dots(block, names) if static_trips is not None else []
    if static_trips is not None and _unrolled(f, block, static_trips, sums):
        for s in sums:
            _defer(f, s)
        state = start      # a short loop of known length: unrolled (XLA runs a while loop's body op by op)
        for _ in range(static_trips):
            state = body(state)
        _, trips, results, packed = state
    else:
        sums = []
        if static_trips is not None:   # the same count in every program: an unbatched condition under vmap
            def cond(state):            # (a batched one selects every carried value at every trip)
                return state[1] < static_trips
        _, trips, results, packed = lax.while_loop(cond, body, start)
    f.state = outer_state
    _unpack(f, packed)
    out = bind(trips, results)
    for s in sums:
        f.overrides.pop(s.dot, None)
        f.overrides.pop(s.add, None)
        if not s.terms:
            continue
        pairs = [(a, b) for a, b, _ in s.terms]
        if s.add is None:       # acc = dot(a, b, acc): acc + Σ a_t b_t
            out[s.index] = blocks.summed_dot(f, s.dot, pairs, out[s.index])
        else:                   # acc = acc + dot(a, b, c): acc + (Σ c_t + Σ a_t b_t)
            offset = s.terms[0][2]
            for _, _, c in s.terms[1:]:
                offset = offset + c
            out[s.index] = out[s.index] + blocks.summed_dot(f, s.dot, pairs, offset)
    return out


@dataclass
class _Sum:
    """``acc = tt.dot(a, b, acc)``, or ``acc = acc + tt.dot(a, b, c)`` (``add``: the ``arith.addf``), of an
    unrolled loop: each trip only records ``(a, b, c)`` and leaves ``acc`` as it is; after the loop
    ``acc`` gets one dot of them all."""

    dot: Op
    add: Op | None
    index: int          # of the iter_arg
    acc: str            # its name
    terms: list = field(default_factory=list)


def _defer(f: Frame, s: _Sum) -> None:
    def record(frame: Frame, op: Op):
        a, b, c = frame.args(op)
        s.terms.append((a, b, c))
        return [c]

    def keep(frame: Frame, op: Op):
        return [frame.get(s.acc)]

    f.overrides[s.dot] = record
    if s.add is not None:
        f.overrides[s.add] = keep


def _accumulated_dots(block, names: list[str]) -> list[_Sum]:
    """The loop body's accumulations of ``tt.dot`` products into an iter_arg that nothing else reads."""
    terminator = block.ops[-1] if block.ops else None
    yields = list(terminator.operands) if terminator is not None and terminator.name == "scf.yield" else []
    uses = Counter(name for op in walk(block) for name in op.operands)
    producers = {r: op for op in block.ops for r in op.results}
    found = []
    for index, name in enumerate(names):
        final = producers.get(yields[index]) if index < len(yields) else None
        if final is None or uses[name] != 1 or uses[final.results[0]] != 1 or len(final.results) != 1:
            continue
        if not _wide_float(final.result_types):
            continue  # an fp16/bf16 accumulator rounds every step: summing the steps in one dot would not
        if final.name == "tt.dot" and len(final.operands) == 3 and final.operands[2] == name:
            found.append(_Sum(final, None, index, name))
        elif final.name == "arith.addf" and name in final.operands and len(final.operands) == 2:
            other = final.operands[1] if final.operands[0] == name else final.operands[0]
            product = producers.get(other)
            if product is not None and product.name == "tt.dot" and uses[other] == 1 and other != name:
                found.append(_Sum(product, final, index, name))
    return found


def _wide_float(types: tuple[str, ...]) -> bool:
    """Whether a result type is a tensor of f32 or f64 (where one dot over all steps differs from the
    step-by-step sums only by the order of the additions)."""
    return len(types) == 1 and types[0].rstrip(">").endswith(("xf32", "xf64"))


def _body_without_args(block):
    return block if not block.args else type(block)([], block.ops)


@handler("scf.if", "cf.cond_br")
def _if(f: Frame, op: Op):
    (pred,) = f.args(op)[:1]
    if f.ctx.parallel and writes_memory(op):
        return _predicated(f, op, jnp.asarray(pred).astype(bool))
    carry_buffers, carry_check = _carried_state(f, op)
    outer_state = f.state
    start = _pack(f, carry_buffers, carry_check)
    n_results = len(op.results)

    def branch(index: int):
        def run(packed):
            _unpack(f, packed)
            if index < len(op.regions):
                out = f.run_block(op.regions[index][0], ())
            else:
                out = []
            if len(out) != n_results:
                raise Unsupported("scf.if", "a branch yields the wrong number of values")
            return list(out), _pack(f, carry_buffers, carry_check)
        return run

    results, packed = lax.cond(jnp.asarray(pred).astype(bool), branch(0), branch(1), start)
    f.state = outer_state
    _unpack(f, packed)
    return list(results)


def _predicated(f: Frame, op: Op, cond):
    """Parallel mode: both branches run, each access masked by whether the program takes its branch (stores
    are logged and applied after the grid, so a branch's writes are its masked log entries); the results
    are selected. Under ``vmap`` a ``lax.cond`` runs both branches too, but could not log their stores."""
    outer = f.predicate
    outs = []
    for index, take in ((0, cond), (1, ~cond)):
        f.predicate = take if outer is None else outer & take
        outs.append(f.run_block(op.regions[index][0], ()) if index < len(op.regions) else [])
    f.predicate = outer
    if any(len(out) != len(op.results) for out in outs):
        raise Unsupported(op.name, "a branch yields the wrong number of values")
    return [select_pointers(cond, a, b) if isinstance(a, Pointer) else jnp.where(cond, a, b)
            for a, b in zip(*outs, strict=True)]


@handler("cf.br")
def _bind(f: Frame, op: Op):
    """A branch's block arguments (see :mod:`.cfg`): the values it passes."""
    return f.args(op)


@handler("scf.while")
def _while(f: Frame, op: Op):
    bindings = op.loop.iter_args
    names = [n for n, _ in bindings]
    init = [f.get(v) for _, v in bindings]
    before, after = op.regions[0][0], op.regions[1][0]
    carry_buffers, carry_check = _carried_state(f, op)
    outer_state = f.state

    def run_before(values):
        for n, v in zip(names, values, strict=True):
            f.env[n] = v
        out = f.run_block(_body_without_args(before), ())
        return jnp.asarray(out[0]).astype(bool), list(out[1:])

    go, forwarded = run_before(init)
    template = list(forwarded)

    def cond(carry):
        return carry[0]

    def body(carry):
        _, values, packed = carry
        _unpack(f, packed)
        new_inputs = f.run_block(after, values)
        go, out = run_before(new_inputs)
        out = [_like(o, t) for o, t in zip(out, template, strict=True)]
        return go, out, _pack(f, carry_buffers, carry_check)

    _, results, packed = lax.while_loop(cond, body, (go, forwarded, _pack(f, carry_buffers, carry_check)))
    f.state = outer_state
    _unpack(f, packed)
    return list(results)
