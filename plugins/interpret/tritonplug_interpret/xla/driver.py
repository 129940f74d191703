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
from tritonplug_interpret.xla import affine, control, gemm, lanes, memory, strided, tiles
from tritonplug_interpret.xla.checks import raise_if_bad
from tritonplug_interpret.xla.ops import TABLE
from tritonplug_interpret.xla.program import (
    TERMINATORS,
    WRITES,
    BufferInfo,
    Context,
    Frame,
    State,
    Unsupported,
)
from tritonplug_interpret.xla.ttir import Function, Op, walk
from tritonplug_interpret.xla.types import jnp_dtype, parse_type


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


class Translation:
    """A launch bound to a TTIR function: ``__call__(operands, results)`` returns the new results."""

    def __init__(self, fn: Function, launch: Launch, check: bool) -> None:
        missing = unsupported_ops(fn)
        if missing:
            raise Unsupported(missing[0])
        self.fn = fn
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
        self.parallel = choose_parallel(fn, pointer_args)
        self.windows: dict[int, affine.Window] = {}
        self.load_ids = {id(op) for op in fn.body.ops if op.name == "tt.load"}
        forms = {arg: affine.Form(0, (0, 0, 0), (), slot) for arg, slot in pointer_args.items()}
        known = {arg: lanes.Lanes((), slot, np.zeros((), np.int64)) for arg, slot in pointer_args.items()}
        for arg, (kind, value, element) in self.arguments:
            if kind == "scalar" and element in ("i32", "i64") and isinstance(value, int):
                forms[arg] = affine.Form(int(value), (0, 0, 0), ())
                known[arg] = lanes.Lanes((), None, np.asarray(int(value), np.int64))
        grid = tuple(int(g) for g in launch.grid)
        if self.parallel:
            self.windows = affine.windows(fn, forms, grid)
        found = lanes.analyse(fn, known, grid)
        self.carried = found.carried
        self.trips = found.trips
        self.shared_dots: dict[int, gemm.SharedDot] = {}
        if self.parallel:   # loads read unchanging buffers: equal operands give equal tiles
            for key, (a_labels, b_labels) in found.dots.items():
                shared = gemm.plan(a_labels, b_labels)
                if shared is not None:
                    self.shared_dots[key] = shared
        self.tilings: dict[int, tiles.Tiling] = {}
        if self.parallel:   # top-level stores, applied after the grid
            top = {id(op) for op in fn.body.ops}
            for key, (op, store) in found.stores.items():
                laid = tiles.tiling(op, store, self.buffers[store.buffer].size, _size(grid)) \
                    if key in top and key not in self.windows else None
                if laid is not None:
                    self.tilings[key] = laid
        self.accesses: dict[int, strided.Access] = {}
        if self.parallel:   # windows of views only here: in parallel mode no buffer changes during the grid
            for key, load in found.loads.items():
                access = None if key in self.windows else strided.access(load, self.buffers[load.lanes.buffer].size)
                if access is not None:
                    self.accesses[key] = access

    def trial(self) -> None:
        """Trace one program on abstract values, so anything the translation cannot express shows now.

        One program, not the grid: every program runs the same ops, and tracing one unbatched costs a fraction
        of the batched trace the lowering does anyway (while loops under ``vmap`` are traced to a fixed point)."""
        shapes = [jax.ShapeDtypeStruct(s.shape, jnp.dtype(s.dtype)) for s in self.launch.operands]
        outs = [jax.ShapeDtypeStruct(s.shape, jnp.dtype(s.dtype)) for s in self.launch.results]

        def one(operands: Sequence[Any], results: Sequence[Any]) -> None:
            with jax.enable_x64(True):
                buffers = [jnp.reshape(a, (-1,)) for a in list(operands) + list(results)]
                ctx = self._context()
                rows = self._hoisted(ctx, buffers, self._total()) if self.parallel else {}
                self._program(ctx, self._start(buffers), jnp.int32(0), {k: r[0] for k, r in rows.items()})

        if self._total():
            jax.eval_shape(one, shapes, outs)

    def __call__(self, operands: Sequence[Any], results: Sequence[Any]) -> list[Any]:
        with jax.enable_x64(True):
            return self._run(operands, results)

    def _total(self) -> int:
        return _size(self.launch.grid)

    def _context(self) -> Context:
        return Context(self.launch.kernel_name, self.buffers, tuple(int(g) for g in self.launch.grid),
                       self.parallel, self.check, windows=dict(self.windows), accesses=dict(self.accesses),
                       carried=dict(self.carried), trips=dict(self.trips), shared_dots=dict(self.shared_dots),
                       tilings=dict(self.tilings), unroll_budget=control.UNROLL_BUDGET, handlers=TABLE)

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
                frame.env[arg] = memory.Pointer(a, jnp.int64(0), b)
            else:
                frame.env[arg] = jnp.asarray(a, jnp_dtype(b))
        frame.run_block(self.fn.body)
        return frame

    def _hoisted(self, ctx: Context, buffers: list[Any], total: int) -> dict[int, Any]:
        """Grid-wide slices of the top-level loads (a row per program) and the strided views, before the grid."""
        loads = {key: w for key, w in ctx.windows.items() if key in self.load_ids}
        rows = {key: affine.read(buffers[w.buffer], w, total) for key, w in loads.items()}
        for access in ctx.accesses.values():
            if access.view not in ctx.views:
                ctx.views[access.view] = strided.build_view(buffers[access.view.buffer], access.view)
        return rows

    def _parallel(self, ctx: Context, buffers: list[Any], total: int):
        rows = self._hoisted(ctx, buffers, total)

        def program(linear, hoisted):
            ctx.store_log.clear()
            frame = self._program(ctx, self._start(buffers), linear, hoisted)
            logged = [(idx, val, act) for _, _, idx, val, act in ctx.store_log]
            ctx.static_log = [(kind, b) for kind, b, _, _, _ in ctx.store_log]
            s = frame.state
            return logged, (s.bad_site, s.bad_offset, s.bad_lane)

        logged, record = jax.vmap(program)(jnp.arange(total, dtype=jnp.int32), rows)
        buffers = list(buffers)
        for (kind, b), (idx, val, act) in zip(ctx.static_log, logged, strict=True):
            buffers[b] = memory.apply_scatter(buffers[b], kind, idx, val, act)
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


__all__ = ["Translation", "choose_parallel", "unsupported_ops"]
