"""The evaluator: runs one program instance's TTIR on JAX values (traced, so it builds a graph).

A :class:`Frame` maps SSA names to values: JAX arrays (scalars are 0-d), :class:`Pointer`s
and the block-pointer/descriptor records of :mod:`.memory`. It also holds the program's
*state*: the buffers (sequential mode: stores update them; parallel mode: read-only, stores
append to a log instead) and the checked-mode record of the first out-of-bounds access.
Each op-family module keeps its own table of handlers (:func:`family`); :mod:`.ops` merges them into the
one explicit op table a :class:`Context` carries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tritonplug_interpret.xla.ttir import Block, Op

Handler = Callable[["Frame", Op], Sequence[Any]]
#: Ops that end a block: their operands are the block's results.
TERMINATORS = frozenset({"scf.yield", "scf.condition", "tt.reduce.return", "tt.scan.return", "tt.return"})
#: Ops that change memory (need the state threaded through control flow).
WRITES = frozenset({"tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.descriptor_store",
                    "tt.descriptor_reduce", "tt.experimental_descriptor_store"})


class Unsupported(NotImplementedError):
    """The translation cannot express this operation (the plugin falls back to the interpreter)."""

    def __init__(self, op: str, why: str = "") -> None:
        super().__init__(f"{op}{': ' + why if why else ''}")
        self.op = op


def family() -> tuple[dict[str, Handler], Callable[..., Callable[[Handler], Handler]]]:
    """An op-family module's table of handlers and the decorator ``@handler("op.name", …)`` that fills it."""
    table: dict[str, Handler] = {}

    def handler(*names: str) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            for n in names:
                if n in table:
                    raise ValueError(f"two handlers for {n}")
                table[n] = fn
            return fn
        return register

    return table, handler


class Deferred:
    """A value made again wherever it is read: a constant (or a launch's scalar). Triton hoists every constant
    to the top of the function; read inside a loop or branch body, a value made once outside would be a
    loop-carried operand there, which XLA can neither fold (``x + 0``, ``where(m, x, 0)``) nor fuse as a
    literal. Made where it is read, it is a literal of that body."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


@dataclass(frozen=True)
class BufferInfo:
    """A buffer slot as the kernel sees it: argument name, element dtype, element count."""

    name: str
    dtype: np.dtype
    size: int


@dataclass
class State:
    """What a program carries through control flow: buffers and the checked-mode record."""

    buffers: list[Any]
    bad_site: Any = None        # int32 scalar: -1 or the first failing access site
    bad_offset: Any = None      # int64 scalar: its byte offset
    bad_lane: Any = None        # int32 scalar: the flat lane index within the access


jax.tree_util.register_pytree_node(
    State, lambda s: ((s.buffers, s.bad_site, s.bad_offset, s.bad_lane), None),
    lambda _, c: State(list(c[0]), c[1], c[2], c[3]))


@dataclass
class Site:
    """A checked access: for the error message."""

    access: str
    buffer: int
    itemsize: int


@dataclass
class Context:
    """Per-translation facts shared by all frames."""

    kernel_name: str
    buffers: list[BufferInfo]
    grid: tuple[int, int, int]
    parallel: bool
    check: bool
    handlers: Mapping[str, Handler] = field(default_factory=dict)   # the op table (ops.TABLE)
    plan: Any = None            # plan.Plan: what the analyses decided before tracing
    sites: list[Site] = field(default_factory=list)
    views: dict[Any, Any] = field(default_factory=dict)     # strided.View → its array, built before the grid
    store_log: list[tuple[str, int, Any, Any, Any]] = field(default_factory=list)  # (kind, buffer, idx, val, mask)
    unroll_budget: int = 0      # ops that unrolled loops may still add (control.UNROLL_BUDGET)


class Frame:
    def __init__(self, ctx: Context, state: State, program_id: Sequence[Any]) -> None:
        self.ctx = ctx
        self.state = state
        self.program_id = program_id
        self.env: dict[str, Any] = {}
        self.hoisted: dict[Op, Any] = {}    # load op → this program's row of a grid-wide slice
        self.overrides: dict[Op, Handler] = {}    # op → the handler to use instead of its op name's
        self.predicate: Any = None   # parallel mode, inside a branch that writes: whether this program takes it
        self.current_op: Op | None = None

    def get(self, name: str) -> Any:
        try:
            value = self.env[name]
        except KeyError:
            raise Unsupported("value", f"{name} is used before it is defined") from None
        return value.make() if type(value) is Deferred else value

    def args(self, op: Op) -> list[Any]:
        return [self.get(n) for n in op.operands]

    def run_block(self, block: Block, args: Sequence[Any] = ()) -> list[Any]:
        """Run ``block`` with its arguments bound; returns its terminator's operands."""
        for (name, _), value in zip(block.args, args, strict=True):
            self.env[name] = value
        for op in block.ops:
            if op.name in TERMINATORS:
                return self.args(op)
            fn = self.overrides.get(op) or self.ctx.handlers.get(op.name)
            if fn is None:
                raise Unsupported(op.name)
            values = fn(self, op)
            if len(values) != len(op.results):
                raise Unsupported(op.name, f"produced {len(values)} values for {len(op.results)} results")
            for name, value in zip(op.results, values, strict=True):
                self.env[name] = value
        return []

    # ------------------------------------------------------------------ checked mode

    def record_check(self, access: str, buffer: int, offsets: Any, mask: Any) -> None:
        """Checked mode: remember the first active lane whose offset leaves the buffer."""
        if not self.ctx.check:
            return
        info = self.ctx.buffers[buffer]
        offsets = jnp.asarray(offsets)
        bad = (offsets < 0) | (offsets >= info.size)
        if mask is not None:
            bad = bad & jnp.broadcast_to(mask, bad.shape)
        if self.predicate is not None:
            bad = bad & self.predicate
        flat = bad.reshape(-1)
        lanes = lax.iota(jnp.int32, flat.shape[0])
        lane = jnp.min(jnp.where(flat, lanes, jnp.int32(flat.shape[0] - 1)))
        any_bad = jnp.any(flat)
        site = len(self.ctx.sites)
        self.ctx.sites.append(Site(access, buffer, info.dtype.itemsize))
        first = self.state.bad_site < 0
        take = first & any_bad
        # the failing lane's offset by a reduction, not an indexed read (a gather per program under vmap)
        flat_offsets = jnp.broadcast_to(offsets, bad.shape).reshape(-1).astype(jnp.int64)
        offset = jnp.max(jnp.where(lanes == lane, flat_offsets, jnp.iinfo(jnp.int64).min)) * info.dtype.itemsize
        self.state.bad_site = jnp.where(take, jnp.int32(site), self.state.bad_site)
        self.state.bad_offset = jnp.where(take, offset, self.state.bad_offset)
        self.state.bad_lane = jnp.where(take, lane, self.state.bad_lane)


def writes_memory(op: Op) -> bool:
    """Whether ``op`` or anything nested in it writes memory."""
    if op.name in WRITES:
        return True
    return any(writes_memory(o) for region in op.regions for b in region for o in b.ops)
