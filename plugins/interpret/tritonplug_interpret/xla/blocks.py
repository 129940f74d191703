"""Block-level ops: program ids, ranges, shape ops, tt.dot, reductions and scans.

Reductions and scans run their combine region on whole arrays (its ops are elementwise):
a reduction halves the axis log2(n) times, a scan is ``lax.associative_scan``; regions that
are one ``addf``/``maxnumf``/… use the matching XLA reduction directly.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from tritonplug_interpret.xla import gemm
from tritonplug_interpret.xla.program import Frame, Unsupported, family
from tritonplug_interpret.xla.ttir import Op, program_axis
from tritonplug_interpret.xla.types import parse_type

HANDLERS, handler = family()   # this family's part of the op table (ops.TABLE)

def _int_attr(op: Op, name: str, default: int | None = None) -> int:
    value = op.int_attr(name)
    if value is None:
        if default is None:
            raise Unsupported(op.name, f"no attribute {name}")
        return default
    return value


def _array_attr(op: Op, name: str) -> list[int]:
    value = op.array_attr(name)
    if value is None:
        raise Unsupported(op.name, f"attribute {name}={op.attrs.get(name, '')!r}")
    return list(value)


def _axis_word(op: Op) -> int:
    axis = program_axis(op)
    if axis is None:
        raise Unsupported(op.name, f"cannot read the axis of {op.header!r}")
    return axis


@handler("tt.get_program_id")
def _program_id(f: Frame, op: Op):
    return [f.program_id[_axis_word(op)].astype(jnp.int32)]


@handler("tt.get_num_programs")
def _num_programs(f: Frame, op: Op):
    return [jnp.asarray(f.ctx.grid[_axis_word(op)], jnp.int32)]


@handler("tt.make_range")
def _make_range(f: Frame, op: Op):
    return [jnp.arange(_int_attr(op, "start"), _int_attr(op, "end"), dtype=jnp.int32)]


def _shape(op: Op) -> tuple[int, ...]:
    return parse_type(op.result_types[-1]).shape


def _map_pointer(x, fn):
    from tritonplug_interpret.xla.memory import Pointer

    if isinstance(x, Pointer):
        return Pointer(x.buffer, fn(x.offset), x.element)
    return fn(x)


@handler("tt.splat", "tt.broadcast")
def _broadcast(f: Frame, op: Op):
    (x,) = f.args(op)
    shape = _shape(op)
    return [_map_pointer(x, lambda v: jnp.broadcast_to(v, shape))]


@handler("tt.expand_dims")
def _expand_dims(f: Frame, op: Op):
    (x,) = f.args(op)
    axis = _int_attr(op, "axis")
    return [_map_pointer(x, lambda v: jnp.expand_dims(v, axis))]


@handler("tt.reshape")
def _reshape(f: Frame, op: Op):
    (x,) = f.args(op)
    shape = _shape(op)
    return [_map_pointer(x, lambda v: jnp.reshape(v, shape))]


@handler("tt.trans")
def _trans(f: Frame, op: Op):
    (x,) = f.args(op)
    order = _array_attr(op, "order")
    return [_map_pointer(x, lambda v: jnp.transpose(v, order))]


@handler("tt.join")
def _join(f: Frame, op: Op):
    a, b = f.args(op)
    return [jnp.stack([a, b], axis=-1)]


@handler("tt.split")
def _split(f: Frame, op: Op):
    (x,) = f.args(op)
    return [x[..., 0], x[..., 1]]


@handler("tt.cat")
def _cat(f: Frame, op: Op):
    a, b = f.args(op)
    return [jnp.concatenate([a, b], axis=0)]


@handler("tt.gather")
def _gather(f: Frame, op: Op):
    src, idx = f.args(op)
    return [jnp.take_along_axis(src, idx.astype(jnp.int32), axis=_int_attr(op, "axis"), mode="clip")]


@handler("tt.histogram")
def _histogram(f: Frame, op: Op):
    args = f.args(op)
    x = args[0]
    bins = _shape(op)[0]
    ones = jnp.ones(x.shape, jnp.int32) if len(args) < 2 else args[1].astype(jnp.int32)
    inside = (x >= 0) & (x < bins)
    return [jnp.zeros((bins,), jnp.int32).at[jnp.where(inside, x, bins)].add(ones, mode="drop")]


@handler("tt.dot")
def _dot(f: Frame, op: Op):
    a, b, c = f.args(op)
    return [summed_dot(f, op, [(a, b)], c)]


def summed_dot(f: Frame, key: Op, pairs, c):
    """``c + Σ_t a_t @ b_t`` (one dot over the concatenated contraction dimension) for the ``tt.dot``
    ``key``, as one GEMM of the grid's distinct tiles where it can be."""
    a_parts, b_parts = [a for a, _ in pairs], [b for _, b in pairs]
    shared = f.ctx.plan.shared_dots.get(key) if f.ctx.parallel else None
    if shared is not None and all(jnp.ndim(x) == 2 for x in a_parts + b_parts):
        return gemm.dot(shared, a_parts, b_parts, c)
    return gemm.plain_dot(a_parts, b_parts, c)


@handler("gpu.barrier", "ttg.barrier", "llvm.intr.assume")
def _ignored(f: Frame, op: Op):
    """No effect on results here: a program's block is one array operation, so a barrier orders
    nothing; assumptions are hints. (``tt.print``/``tt.assert`` have no handler: kernels that print
    or assert run in the interpreter, which does both.)"""
    return []


# ------------------------------------------------------------------ reductions and scans

# maxnumf/minnumf ignore a NaN operand (tl.max/tl.min): nanmax/nanmin, NaN only where every value is NaN;
# maximumf/minimumf propagate it (propagate_nan=ALL)
_SIMPLE_REDUCE = {"arith.addf": jnp.sum, "arith.addi": jnp.sum, "arith.maxnumf": jnp.nanmax,
                  "arith.maximumf": jnp.max, "arith.minnumf": jnp.nanmin, "arith.minimumf": jnp.min,
                  "arith.maxsi": jnp.max, "arith.minsi": jnp.min, "arith.mulf": jnp.prod, "arith.muli": jnp.prod,
                  "arith.andi": jnp.all, "arith.ori": jnp.any}


def _simple_combiner(op: Op):
    """The one elementwise op of a single-operand region ``r = op(a, b); return r``, if that is all it is."""
    block = op.regions[0][0]
    if len(block.args) != 2 or len(block.ops) != 2:
        return None
    body, ret = block.ops
    a, b = block.args[0][0], block.args[1][0]
    if ret.operands != body.results or sorted(body.operands) != sorted([a, b]):
        return None
    return _SIMPLE_REDUCE.get(body.name)


def _combine(f: Frame, op: Op):
    block = op.regions[0][0]
    n = len(block.args) // 2

    def combine(left, right):
        return f.run_block(block, list(left) + list(right))

    return combine, n


@handler("tt.reduce")
def _reduce(f: Frame, op: Op):
    xs = f.args(op)
    axis = _int_attr(op, "axis")
    simple = _simple_combiner(op) if len(xs) == 1 else None
    if simple is not None and not (simple in (jnp.all, jnp.any) and xs[0].dtype != jnp.bool_):
        return [simple(xs[0], axis=axis).astype(xs[0].dtype)]
    combine, _ = _combine(f, op)
    size = xs[0].shape[axis]
    while size > 1:
        if size % 2:
            raise Unsupported("tt.reduce", f"axis of odd size {size}")
        half = size // 2
        left = [lax.slice_in_dim(x, 0, half, axis=axis) for x in xs]
        right = [lax.slice_in_dim(x, half, size, axis=axis) for x in xs]
        xs = combine(left, right)
        size = half
    return [jnp.squeeze(x, axis) for x in xs]


@handler("tt.scan")
def _scan(f: Frame, op: Op):
    xs = f.args(op)
    axis = _int_attr(op, "axis")
    reverse = op.attrs.get("reverse", "false").startswith("true")
    combine, n = _combine(f, op)
    out = lax.associative_scan(lambda a, b: tuple(combine(list(a), list(b))), tuple(xs), reverse=reverse,
                               axis=axis)
    return list(out)
