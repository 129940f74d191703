"""The two ways a partitioned launcher's body reaches each device, chosen by the mesh's axis types.

* **Automatic axes** (JAX's default; Shardy or GSPMD decides shardings after tracing): the call becomes a
  ``jax.experimental.custom_partitioning`` op (:func:`auto`). Shardy propagates shardings through it by the
  bound rule; GSPMD through ``auto``'s ``infer`` (operands → results) and ``propagate`` (a requested result
  sharding → the call). XLA then calls its ``partition``, which settles each factor's mesh axes and hands JAX the
  body, which JAX traces again with the local shapes, so the grid and every shape-derived scalar are the shard's.
* **Explicit axes** (``jax.sharding.AxisType.Explicit``: every operand's type carries its sharding while
  tracing): the same decision is made at trace time and the body runs under ``jax.shard_map``
  (:func:`explicit`). Nothing is left to a Python callback, so such a program exports (``jax.export``) and
  reloads in another process.

Both decide with :func:`tritonplug.calls.sharding_rules.assign` and record what they decided (``state.partitions``,
read by ``tritonplug.inspection.partitions()``): which factors were split over which axes, and which operands
XLA gathers because the rule keeps a factor whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.experimental.custom_partitioning import ArrayMapping, CompoundFactor, SdyShardingRule, custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from tritonplug import settings
from tritonplug.adapters import jax_compat
from tritonplug.calls.sharding_rules import OPERANDS, RESULTS, BoundRule, Dims, Spec, assign, reduced_axes, specs_of
from tritonplug.errors import PartitionError
from tritonplug.process.state import state
from tritonplug.sharding import layouts, offsets

Body = Callable[..., tuple[Any, ...]]


@dataclass(frozen=True)
class PartitionTransfer:
    """An operand that arrives split otherwise than the call needs it: XLA gathers (or moves) it first."""

    operand: str
    factors: tuple[str, ...]  # the factors whose split changes
    before: Spec  # per dimension, the mesh axes it arrived split over
    after: Spec  # ... and those the call splits it over
    bytes_per_device: int  # what each device holds of it after the transfer


@dataclass(frozen=True)
class PartitionRecord:
    """One partitioning decision: made when XLA partitions a program (automatic axes) or at trace time
    (explicit axes); ``tritonplug.inspection.partitions()`` lists the recent ones."""

    function: str
    rule: str
    path: str  # "custom_partitioning" or "shard_map"
    mesh: tuple[tuple[str, int], ...]
    factors: tuple[tuple[str, tuple[str, ...]], ...]  # each split factor and its mesh axes
    reduced_over: tuple[tuple[str, ...], ...]  # per result, the mesh axes it is summed over
    transfers: tuple[PartitionTransfer, ...]


def spec_of(sharding: Any, ndim: int) -> Spec | None:
    """A sharding as per-dimension mesh axes; ``None`` for a sharding not stated over named axes."""
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return None
    entries = list(spec) + [None] * (ndim - len(spec))
    return tuple(() if e is None else ((e,) if isinstance(e, str) else tuple(e)) for e in entries[:ndim])


def partition_spec(spec: Spec) -> PartitionSpec:
    return PartitionSpec(*(None if not axes else axes[0] if len(axes) == 1 else axes for axes in spec))


def sdy_rule(bound: BoundRule) -> SdyShardingRule:
    """The bound rule as Shardy's: every factor named, the implied kept-whole ones listed too, and the sizes of
    those that only compound dimensions hold."""
    def mapping(dims: Dims) -> ArrayMapping:
        return ArrayMapping(*(d[0] if len(d) == 1 else CompoundFactor(*d) for d in dims))
    whole_dims = {d[0] for dims in bound.operand_dims + bound.result_dims for d in dims if len(d) == 1}
    only_compound: dict[str, Any] = {f: bound.sizes[f] for dim in bound.compounds() for f in dim if f not in whole_dims}
    return SdyShardingRule(tuple(mapping(g) for g in bound.operand_dims),
                           tuple(mapping(g) for g in bound.result_dims),
                           need_replication_factors=bound.kept_whole(),
                           reduction_factors=tuple(f for f in sorted(bound.reduction)
                                                   if not any(f in g for g in bound.results)), **only_compound)


def with_sums(body: Body, axes: Sequence[tuple[str, ...]]) -> Body:
    """``body`` whose k-th result is summed over ``axes[k]`` (split reduction factors it lacks: each shard's
    value is a partial sum); half-precision partial sums are added in fp32 and rounded once."""
    if not any(axes):
        return body

    def summed(r: Any, over: tuple[str, ...]) -> Any:
        if not over:
            return r
        if jax.numpy.issubdtype(r.dtype, jax.numpy.floating) and r.dtype.itemsize < 4:  # add bf16/fp16 in fp32
            return jax.lax.psum(r.astype(np.float32), over).astype(r.dtype)
        return jax.lax.psum(r, over)
    return lambda *args: tuple(summed(r, a) for r, a in zip(body(*args), axes, strict=True))


def auto(body: Body, arrays: Sequence[Any], bound: BoundRule, call: CallInfo) -> tuple[Any, ...]:
    """Run ``body`` as a custom-partitioned op (automatic mesh axes); see the module's docstring."""

    def shardings(mesh: Any, groups: Sequence[Dims], chosen: dict) -> tuple[NamedSharding, ...]:
        return tuple(NamedSharding(mesh, partition_spec(s)) for s in specs_of(groups, chosen))

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> tuple[NamedSharding, ...]:
        chosen = assign(bound, dict(mesh.shape), (OPERANDS, _specs(arg_shapes)))
        return shardings(mesh, bound.result_dims, chosen)

    def propagate(mesh: Any, user_shape: Any) -> tuple[NamedSharding, ...]:
        chosen = assign(bound, dict(mesh.shape), (RESULTS, _specs(user_shape)))
        return shardings(mesh, bound.result_dims, chosen)

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> tuple:
        incoming = _specs(arg_shapes)
        chosen = assign(bound, dict(mesh.shape), (RESULTS, _specs(result_shape)), (OPERANDS, incoming))
        record(call, bound, dict(mesh.shape), chosen, incoming, [a.dtype for a in arg_shapes], "custom_partitioning")
        try:
            shapes = layouts.shard_shapes(jax.tree.leaves(arg_shapes), bound.operand_dims, chosen, dict(mesh.shape))
            local = trace_shard(whole(body, call), shapes, call, chosen)
        except PartitionError as exc:
            _failures[:] = [exc]  # XLA reports it wrapped: an eager call raises it as it is (take_failure)
            raise
        if {d.platform for d in mesh.devices.flat} == {"cpu"}:
            check_no_host_callbacks(sorted(host_callbacks(local)), call)
        per_shard = jax_compat.without_internal_refs(with_sums(split(body, call, bound, chosen, dict(mesh.shape)),
                                                               reduced_axes(bound, chosen)))
        return mesh, per_shard, shardings(mesh, bound.result_dims, chosen), shardings(mesh, bound.operand_dims, chosen)

    platform, devices = jax_compat.operand_mesh(arrays)
    if platform == "cpu" and devices > 1:  # refused now, at the call, rather than when XLA partitions it
        check_no_host_callbacks(call.callbacks, call)
    mesh_shape = jax_compat.operand_mesh_shape(arrays)
    if mesh_shape is not None:  # the mesh is known now: a mistake only a shard reveals is raised at the call
        for layout, local in layouts.distinct_shard_shapes(bound, arrays, mesh_shape):
            trace_shard(whole(body, call), local, call, layout)
    op = custom_partitioning(whole(body, call))
    op.def_partition(partition, infer_sharding_from_operands=infer, propagate_user_sharding=propagate,
                     sharding_rule=sdy_rule(bound))
    return tuple(not_differentiable(op, call)(*arrays))


def not_differentiable(op: Body, call: CallInfo) -> Body:
    """``op`` under a JVP rule that refuses, naming the function and the fix: JAX cannot differentiate a
    ``custom_partitioning`` op ("Differentiation rule for 'custom_partitioning' not implemented")."""
    @jax.custom_jvp
    def run(*arrays: Any) -> tuple[Any, ...]:
        return tuple(op(*arrays))

    @run.defjvp
    def refuse(primals: Any, tangents: Any) -> Any:
        raise NotImplementedError(
            f"partitioned {call.function}: jax.grad, jax.jvp and jax.linearize cannot differentiate a partitioned "
            f"function (outside explicit mesh axes it is a custom_partitioning op, which XLA partitions through a "
            f"Python callback and JAX does not differentiate). Give it a derivative: put a jax.custom_vjp around "
            f"it whose forward calls it and whose backward is a partitioned function too (docs/partitioned.md, "
            f"'Composes with'; examples/ports/liger_rms_norm.py), or run it on explicit mesh axes, where it is a "
            f"jax.shard_map that JAX differentiates as it differentiates the function")
    return run


def trace_shard(body: Body, shapes: Sequence[jax.ShapeDtypeStruct], call: CallInfo,
                layout: dict[str, tuple[str, ...]]) -> Any:
    """``body`` traced on one shard's shapes (those of ``layout``, each split factor's mesh axes), as JAX will
    lower it; a mistake in the function that only these shapes reveal is raised naming the function, the shapes
    and the split (at the call where the mesh is known then; else XLA reports it as ``INTERNAL:
    custom_partitioner`` followed by this message, and an eager call raises it as it is)."""
    try:
        return jax.make_jaxpr(body)(*shapes)
    except Exception as exc:
        given = ", ".join(f"{name}: {s.dtype}{list(s.shape)}" for name, s in zip(call.operand_names, shapes,
                                                                                  strict=True))
        split = ", ".join(f"{f!r} over {axes}" for f, axes in sorted(layout.items())) or "nothing"
        raise PartitionError(f"partitioned {call.function}: the function failed when traced with one shard's shapes "
                             f"({given}; split: {split}): {type(exc).__name__}: {exc}") from exc


_failures: list[PartitionError] = []


def take_failure() -> PartitionError | None:
    """The per-shard failure that the last partitioning raised (and XLA reported as ``INTERNAL:
    custom_partitioner``), forgotten once taken."""
    return _failures.pop() if _failures else None


def host_callbacks(closed: Any) -> set[str]:
    """The primitives of a traced body that call back into Python (``jax.debug.print``/``callback``,
    ``jax.pure_callback``, ``io_callback``), at any depth."""
    return {name for name in jax_compat.primitive_names(closed) if "callback" in name or name == "debug_print"}


#: The CPU backend's (``tritonplug-interpret``'s) checked-mode variable.
CHECK_VARIABLE = "TRITONPLUG_INTERPRET_CHECK"


def check_no_host_callbacks(found: Sequence[str], call: CallInfo) -> None:
    """Refuse, on XLA:CPU, a per-shard body that would call back into Python (``found``: its callback primitives):
    JAX lowers a custom-partitioned body as a module of its own and drops its host callbacks, and XLA:CPU then
    crashes when the program runs (jax 0.10-0.12). Such callbacks are ``jax.debug.callback``/``print`` in the
    function, and the CPU backend's checked mode (``TRITONPLUG_INTERPRET_CHECK``), which reports through one."""
    fix = ("or run it on explicit mesh axes (AxisType.Explicit under jax.set_mesh: the call then runs under "
           "jax.shard_map, where callbacks work)")
    if found:
        raise NotImplementedError(
            f"partitioned {call.function}: the function calls back into Python ({', '.join(found)}: "
            f"jax.debug.print or a callback), which XLA:CPU cannot run inside a custom-partitioned op over several "
            f"devices (it crashes); move the callback out of the function, {fix}")
    checked = settings.lookup(CHECK_VARIABLE)  # the CPU backend's setting, declared when it loaded
    if checked is not None and checked.get():
        raise NotImplementedError(
            f"partitioned {call.function}: the CPU backend's checked mode ({CHECK_VARIABLE}=1) "
            f"reports through jax.debug.callback, which XLA:CPU cannot run inside a custom-partitioned op (it "
            f"crashes); turn checked mode off for this sharded program, {fix}")


def explicit(body: Body, arrays: Sequence[Any], bound: BoundRule, call: CallInfo, mesh: Any) -> tuple[Any, ...]:
    """Run ``body`` under ``jax.shard_map`` (explicit mesh axes: the operands' shardings are known now)."""
    types = [jax.typeof(a) for a in arrays]
    incoming = [spec_of(t.sharding, t.ndim) for t in types]
    chosen = assign(bound, dict(mesh.shape), (OPERANDS, incoming))
    record(call, bound, dict(mesh.shape), chosen, incoming, [t.dtype for t in types], "shard_map")
    trace_shard(whole(body, call), layouts.shard_shapes(types, bound.operand_dims, chosen, dict(mesh.shape)), call,
                chosen)
    in_specs = [partition_spec(s) for s in specs_of(bound.operand_dims, chosen)]
    arrays = [a if spec == partition_spec(s or ()) else jax.sharding.reshard(a, NamedSharding(mesh, spec))
              for a, spec, s in zip(arrays, in_specs, incoming, strict=True)]
    out_specs = tuple(partition_spec(s) for s in specs_of(bound.result_dims, chosen))
    mapped = jax.shard_map(with_sums(split(body, call, bound, chosen, dict(mesh.shape)), reduced_axes(bound, chosen)),
                           mesh=mesh, in_specs=tuple(in_specs),
                           out_specs=out_specs, check_vma=False)
    return tuple(mapped(*arrays))


class CallInfo:
    """What the records and errors name: the function and its arrays; the callback primitives its body holds
    (traced with the whole arrays), which XLA:CPU cannot run per shard; the factors its rule names, which
    ``tritonplug.shard_offset`` may be asked, and whether the call is inside the user's own ``shard_map``."""

    def __init__(self, function: str, operand_names: Sequence[str], result_names: Sequence[str],
                 callbacks: Iterable[str] = (), factors: Sequence[str] = (), manual: bool = False) -> None:
        self.function, self.operand_names, self.result_names = function, tuple(operand_names), tuple(result_names)
        self.callbacks = tuple(sorted(callbacks))
        self.factors, self.manual = tuple(factors), manual


def whole(body: Body, call: CallInfo) -> Body:
    """``body`` on whole arrays (the call's trace, the program on one device): ``shard_offset`` is 0."""
    return offsets.scoped(body, offsets.Scope(call.function, call.factors, manual=call.manual))


def split(body: Body, call: CallInfo, bound: BoundRule, chosen: dict[str, tuple[str, ...]],
          mesh: dict[str, int]) -> Body:
    """``body`` on one shard of the call split as ``chosen`` says: ``shard_offset`` from the mesh position."""
    return offsets.scoped(body, offsets.Scope(call.function, call.factors, dict(bound.sizes), dict(chosen), mesh,
                                              call.manual))


def _specs(shapes: Any) -> list[Spec | None]:
    return [spec_of(getattr(s, "sharding", None), len(s.shape)) for s in jax.tree.leaves(shapes)]


def record(call: CallInfo, bound: BoundRule, mesh: dict[str, int], chosen: dict[str, tuple[str, ...]],
           incoming: Sequence[Spec | None], dtypes: Sequence[Any], path: str) -> None:
    """Note what was decided for one partitioning: the split factors and every operand XLA must gather or
    move because the call's spec differs from the one it arrived with."""
    transfers = []
    wanted = specs_of(bound.operand_dims, chosen)
    for index, (dims, before, after, dtype) in enumerate(zip(bound.operand_dims, incoming, wanted, dtypes,
                                                             strict=True)):
        if before is None or tuple(before) == tuple(after):
            continue
        shape = tuple(math.prod(bound.sizes[f] for f in dim) for dim in dims)
        pieces = math.prod(mesh[a] for axes in after for a in axes)
        transfers.append(PartitionTransfer(
            operand=call.operand_names[index], factors=tuple(f for dim, b, a in zip(dims, before, after, strict=True)
                                                           if tuple(b) != tuple(a) for f in dim),
            before=tuple(before), after=tuple(after),
            bytes_per_device=math.prod(shape) * np.dtype(dtype).itemsize // max(pieces, 1)))
    state.partitions.append(PartitionRecord(
        function=call.function, rule=bound.rule.text, path=path, mesh=tuple(mesh.items()),
        factors=tuple(sorted((f, axes) for f, axes in chosen.items())),
        reduced_over=reduced_axes(bound, chosen), transfers=tuple(transfers)))
