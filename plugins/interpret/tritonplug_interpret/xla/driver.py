"""The program-grid driver: binds a launch to the TTIR function and runs every program.

Two schedules, chosen from the IR before anything is traced:

* **parallel** — programs are vectorised with ``jax.vmap`` over the flattened grid. Loads
  read the buffers as they were before the kernel; each store or atomic (they must all be at
  the function's top level, and no load may read a buffer after the program wrote it) is
  logged per program and applied after the grid as one scatter per store site, in program
  order. An ``atomic_add`` of every program therefore sums all of them.
* **sequential** — programs run one after another in a ``lax.fori_loop`` carrying the
  buffers, each program vectorised over its block, exactly as Triton's interpreter orders
  them: stores inside loops, loads after stores, atomics whose old value is used, and
  ``atomic_cas``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tritonplug.records import ArrayParam, ConstexprParam, Launch, ScalarParam, TensorDescriptorParam
from tritonplug_interpret import compat
from tritonplug_interpret.xla import control, memory, plan, strided
from tritonplug_interpret.xla.checks import raise_if_bad
from tritonplug_interpret.xla.ops import TABLE
from tritonplug_interpret.xla.program import (
    TERMINATORS,
    BufferInfo,
    Context,
    Deferred,
    Frame,
    State,
    Unsupported,
)
from tritonplug_interpret.xla.ttir import Function, walk
from tritonplug_interpret.xla.types import jnp_dtype, parse_type
from tritonplug_interpret.xla.windows import read_window


def _flat_params(params: Sequence[Any], names: Sequence[str]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []

    def visit(p: Any, name: str) -> None:
        if isinstance(p, tuple):
            for i, q in enumerate(p):
                visit(q, f"{name}[{i}]")
        elif isinstance(p, TensorDescriptorParam):
            out.extend((name, q) for q in _descriptor_params(p, name))
        elif not isinstance(p, ConstexprParam):
            out.append((name, p))

    all_names = list(names) + [f"arg{i}" for i in range(len(names), len(params))]
    for p, name in zip(params, all_names, strict=False):
        visit(p, name)
    return out


def _descriptor_params(p: TensorDescriptorParam, name: str) -> list[Any]:
    """A host-side descriptor as the arguments its TTIR takes after the descriptor-to-pointer rewrite."""
    parts = compat.descriptor_arguments(p.shape, p.strides, p.padding, p.round_f32_to_tf32)
    if parts is None:
        raise Unsupported("tt.func", f"argument {name}: this Triton does not decompose host-side descriptors")
    return [ArrayParam(p.buffer) if q is compat.DESCRIPTOR_BASE else
            ScalarParam(bool(q), "i1") if isinstance(q, bool) else ScalarParam(int(q), "i64") for q in parts]


def unsupported_ops(fn: Function) -> list[str]:
    """Op names this translator has no handler for."""
    return sorted({op.name for op in walk(fn.body) if op.name not in TABLE and op.name not in TERMINATORS})


class Translation:
    """A launch bound to a TTIR function: ``__call__(operands, results)`` returns the new results."""

    def __init__(self, fn: Function, launch: Launch, check: bool) -> None:
        missing = unsupported_ops(fn)
        if missing:
            raise Unsupported(missing[0])
        self.launch = launch
        self.check = check
        n_ops = len(launch.operands)
        alias_of = {int(i): int(o) for i, o in launch.aliases}
        specs = list(launch.operands) + list(launch.results)
        self.slot_of = [n_ops + alias_of[b] if b in alias_of else b for b in range(len(specs))]
        flat = _flat_params(launch.params, launch.arg_names)
        if len(flat) != len(fn.args):
            raise Unsupported("tt.func", f"{len(fn.args)} arguments for {len(flat)} runtime parameters")
        self.arguments: list[tuple[str, Any]] = []
        names = {}
        pointer_args: dict[str, int] = {}
        for (arg, ty_text), (name, param) in zip(fn.args, flat, strict=True):
            ty = parse_type(ty_text)
            if isinstance(param, ArrayParam):
                if not ty.is_pointer:
                    raise Unsupported("tt.func", f"argument {name} is an array but the kernel takes {ty_text}")
                slot = self.slot_of[int(param.buffer)]
                names.setdefault(slot, name)
                pointer_args[arg] = slot
                self.arguments.append((arg, ("ptr", slot, ty.pointee)))
            elif isinstance(param, ScalarParam):
                self.arguments.append((arg, ("scalar", _scalar_bits(param), ty.element)))
            else:
                raise Unsupported("tt.func", f"parameter {name} is {param!r}")
        self.buffers = [BufferInfo(names.get(s, f"buffer {s}"), np.dtype(spec.dtype), _size(spec.shape))
                        for s, spec in enumerate(specs)]
        self.plan = plan.make(fn, pointer_args, self.arguments, self.buffers, tuple(int(g) for g in launch.grid))
        self.fn = self.plan.fn      # (its block cut to the live lanes, where :mod:`.live_block` could)
        self.parallel = self.plan.parallel

        def grid(operands: list[Any], results: list[Any]) -> list[Any]:
            return self._run(operands, results)

        grid.__name__ = grid.__qualname__ = launch.kernel_name   # names the nested computation in the HLO
        self._traced = jax.jit(grid)

    def trial(self) -> None:
        """Trace the whole grid on abstract values, so anything the translation cannot express shows now.

        The lowering then reuses this trace: ``__call__`` goes through the same ``jax.jit`` wrapper, whose trace JAX
        caches by the arguments' types, so the translation runs once per kernel object, not twice."""
        shapes = [jax.ShapeDtypeStruct(s.shape, jnp.dtype(s.dtype)) for s in self.launch.operands]
        outs = [jax.ShapeDtypeStruct(s.shape, jnp.dtype(s.dtype)) for s in self.launch.results]
        with jax.enable_x64(True):
            jax.eval_shape(self._traced, shapes, outs)

    def __call__(self, operands: Sequence[Any], results: Sequence[Any]) -> list[Any]:
        with jax.enable_x64(True):
            return self._traced(list(operands), list(results))

    def _total(self) -> int:
        return _size(self.launch.grid)

    def _context(self) -> Context:
        return Context(self.launch.kernel_name, self.buffers, tuple(int(g) for g in self.launch.grid),
                       self.parallel, self.check, plan=self.plan, unroll_budget=control.UNROLL_BUDGET,
                       handlers=TABLE)

    def _run(self, operands: Sequence[Any], results: Sequence[Any]) -> list[Any]:
        launch = self.launch
        n_ops = len(operands)
        buffers = [jnp.reshape(a, (-1,)) for a in list(operands) + list(results)]
        total = self._total()
        if total == 0:
            return list(results)
        ctx = self._context()
        if self.parallel:
            buffers, record = self._parallel(ctx, buffers, total)
        else:
            buffers, record = self._sequential(ctx, buffers, total)
        if self.check:
            raise_if_bad(ctx, record, ctx.grid)
        return [jnp.reshape(buffers[n_ops + o], spec.shape) for o, spec in enumerate(launch.results)]

    def _start(self, buffers: list[Any]) -> State:
        return State(list(buffers), jnp.int32(-1), jnp.int64(0), jnp.int32(0))

    def _program(self, ctx: Context, state: State, linear: Any, hoisted: dict | None = None) -> Frame:
        gx, gy, _ = ctx.grid
        pid = (linear % gx, (linear // gx) % gy, linear // (gx * gy))
        frame = Frame(ctx, state, pid)
        frame.hoisted = dict(hoisted or {})
        for arg, (kind, a, b) in self.arguments:
            if kind == "ptr":
                frame.env[arg] = Deferred(lambda a=a, b=b: memory.Pointer(a, jnp.int64(0), b))
            else:
                frame.env[arg] = Deferred(lambda a=a, b=b: jnp.asarray(a, jnp_dtype(b)))   # baked: a literal
        frame.run_block(self.fn.body)
        return frame

    def _hoisted(self, ctx: Context, buffers: list[Any], total: int) -> dict[Any, Any]:
        """Grid-wide slices of the top-level loads (a row per program) and the strided views, before the grid."""
        rows = {op: read_window(buffers[w.buffer], w) for op, w in self.plan.windows.items()
                if op in self.plan.hoisted}
        # a vectorised loop's (programs * trips) rows as (programs, trips, *block): each program's trips
        rows = {op: r.reshape(total, -1, *r.shape[1:]) if r.shape[0] != total else r for op, r in rows.items()}
        for access in self.plan.accesses.values():
            if access.view not in ctx.views:
                ctx.views[access.view] = strided.build_view(buffers[access.view.buffer], access.view)
        return rows

    def _parallel(self, ctx: Context, buffers: list[Any], total: int):
        rows = self._hoisted(ctx, buffers, total)
        order = list(rows)     # (a pytree's dict keys must sort; ops do not)

        def program(linear, hoisted):
            ctx.store_log.clear()
            frame = self._program(ctx, self._start(buffers), linear, dict(zip(order, hoisted, strict=True)))
            logged = [(idx, val, act) for _, _, idx, val, act in ctx.store_log]
            ctx.static_log = [(kind, b) for kind, b, _, _, _ in ctx.store_log]
            s = frame.state
            return logged, (s.bad_site, s.bad_offset, s.bad_lane)

        logged, record = jax.vmap(program)(jnp.arange(total, dtype=jnp.int32), [rows[op] for op in order])
        buffers = list(buffers)
        whole = memory.whole_stores(buffers, [(kind, b, val, act) for (kind, b), (_, val, act)
                                              in zip(ctx.static_log, logged, strict=True)])
        for (kind, b), (idx, val, act) in zip(ctx.static_log, logged, strict=True):
            if b not in whole:
                buffers[b] = memory.apply_scatter(buffers[b], kind, idx, val, act)
        for b, contents in whole.items():
            buffers[b] = contents
        return buffers, record

    def _sequential(self, ctx: Context, buffers: list[Any], total: int):
        def body(i, carry):
            state, program = carry
            before = state.bad_site
            frame = self._program(ctx, state, i)
            s = frame.state
            program = jnp.where((before < 0) & (s.bad_site >= 0), i, program)
            return s, program

        state, program = lax.fori_loop(0, total, body, (self._start(buffers), jnp.int32(-1)))
        record = (state.bad_site[None], state.bad_offset[None], state.bad_lane[None], program[None])
        return state.buffers, record


def _scalar_bits(param: ScalarParam) -> Any:
    """The scalar as the signless value the kernel sees (unsigned values reinterpreted as signed)."""
    if param.dtype in ("u32", "u64"):
        bits = int(param.value) & ((1 << int(param.dtype[1:])) - 1)
        width = int(param.dtype[1:])
        return bits - (1 << width) if bits >= 1 << (width - 1) else bits
    return param.value


def _size(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


__all__ = ["Translation", "unsupported_ops"]
