"""The host's one adapter over JAX's internals (jax 0.10, 0.11 and 0.12).

Every ``jax._src`` import and every JAX version difference of the host lives here, behind
small named functions; the rest of the host uses JAX's public API only (a ruff rule, TID251,
bans ``jax._src`` outside the ``*_compat`` modules). Differences are probed once, at import:
eager dispatch goes through :data:`apply_primitive` on every call.

What differs between the supported versions, and how it is absorbed:

* state discharge rules: jax 0.10 calls ``rule(in_avals, out_avals, *args, **params)``,
  jax 0.11+ ``rule(ctx, *args, **params)`` with a ``DischargeContext`` carrying the avals;
  :func:`register_discharge_rule` takes the 0.10 form and adapts it.
* dead-code elimination rules: jax 0.10 and 0.11 call ``rule(used_outputs, eqn)``, jax 0.12
  ``rule(used_outputs, live_inputs, eqn)``; :func:`register_dce_rule` takes the two-argument form.

Every rule the host puts into one of JAX's tables (lowering, DCE, discharge, JVP, transpose,
batching, devices during lowering) goes in through a ``register_*`` function here, so a table that
moves or a calling convention that changes is absorbed in this one module.

Everything else used here is the same on all three: ``distributed.global_state`` (``client``, ``process_id``,
``num_processes``, ``coordinator_address``), ``dispatch.apply_primitive`` and
``dispatch.prim_requires_devices_during_lowering``, the ``ReadEffect``/``WriteEffect`` of
``jax._src.state.types``, ``core.typeof`` with ``AbstractRef``, the MLIR bindings of
``jax._src.lib.mlir``, and the two axis contexts a lowering sees (``ShardingContext`` with
``num_devices``/``device_assignment``, ``SPMDAxisContext`` with ``mesh``/``manual_axes``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax._src import array, config, core, dispatch, distributed
from jax._src.interpreters import ad, batching, mlir
from jax._src.interpreters import partial_eval as pe
from jax._src.lib.mlir import ir
from jax._src.state import discharge
from jax._src.state import types as state_types

#: Run one primitive eagerly: JAX compiles it alone (cached by JAX) and runs it. The same
#: function on jax 0.10 and 0.11, bound here once because eager calls go through it every time.
apply_primitive = dispatch.apply_primitive
#: ``jax.extend.core.Primitive`` itself; taken from its home module because importing ``jax.extend``
#: imports all of its submodules (Pallas among them: about 40 ms of a process's first call).
Primitive = core.Primitive
#: The concrete (committed or not, never traced) array types an eager call receives.
CONCRETE_ARRAY_TYPES: tuple[type, ...] = (array.ArrayImpl, np.ndarray)
#: ``jax_enable_x64``'s state: ``ENABLE_X64.value`` is ``jax.config.jax_enable_x64`` (a context's value first) at a
#: third of its cost, for the eager memo's quick key, read on every call.
ENABLE_X64 = config.enable_x64

_DISCHARGE_TAKES_CONTEXT = hasattr(discharge, "DischargeContext")  # jax >= 0.11


def _dce_takes_live_inputs() -> bool:
    """Whether JAX calls DCE rules with the inputs' liveness (jax >= 0.12): read from JAX's own default rule,
    which has the calling convention its caller uses, or else from ``dce_jaxpr``'s ``live_inputs`` argument."""
    default_rule = getattr(pe, "_default_dce_rule", None)
    if default_rule is not None:
        return len(inspect.signature(default_rule).parameters) == 3
    return "live_inputs" in inspect.signature(pe.dce_jaxpr).parameters


_DCE_TAKES_LIVE_INPUTS = _dce_takes_live_inputs()


def ref_effects(ref_operands: Iterable[int]) -> set[Any]:
    """The read and write effects of a primitive that updates the Refs at these operand indices."""
    return {effect(i) for i in ref_operands for effect in (state_types.ReadEffect, state_types.WriteEffect)}


def ref_shape_dtype(aval: Any) -> tuple[tuple[int, ...], str]:
    """(shape, dtype name) of the array a Ref's abstract value (``AbstractRef``) refers to."""
    return tuple(aval.shape), aval.inner_aval.dtype.name


def register_discharge_rule(primitive: Any, rule: Callable[..., tuple[list, list]]) -> None:
    """Register ``rule(in_avals, out_avals, *args, **params)`` as the primitive's state discharge rule.

    jax 0.10 calls discharge rules with the avals as the first two arguments; jax 0.11 passes one
    ``DischargeContext`` (``ctx.in_avals``, ``ctx.out_avals``) instead.
    """
    if _DISCHARGE_TAKES_CONTEXT:
        def from_context(ctx: Any, *args: Any, **params: Any) -> tuple[list, list]:
            return rule(ctx.in_avals, ctx.out_avals, *args, **params)
        discharge.register_discharge_rule(primitive)(from_context)
    else:
        discharge.register_discharge_rule(primitive)(rule)


def register_dce_rule(primitive: Any, rule: Callable[[list[bool], Any], tuple[list[bool], Any]]) -> None:
    """Register ``rule(used_outputs, eqn) -> (used_inputs, eqn or None)`` as the primitive's DCE rule.

    jax 0.12 passes the inputs' liveness as a second argument (``rule(used_outputs, live_inputs, eqn)``);
    the rule here does not need it (it decides from the outputs and the equation).
    """
    if _DCE_TAKES_LIVE_INPUTS:
        def with_live_inputs(used_outputs: list[bool], live_inputs: Any, eqn: Any) -> tuple[list[bool], Any]:
            return rule(used_outputs, eqn)
        # jax 0.12's rules take (used_outputs, live_inputs, eqn); jax 0.10's annotation, checked here, two arguments
        pe.dce_rules[primitive] = with_live_inputs  # type: ignore[assignment]
    else:
        pe.dce_rules[primitive] = rule


def register_lowering(primitive: Any, rule: Callable[..., Any], platform: str) -> None:
    """Register ``rule(ctx, *args, **params)`` as the primitive's MLIR lowering for ``platform``.

    Raises ``NotImplementedError`` for a platform JAX cannot lower for (JAX's own error)."""
    mlir.register_lowering(primitive, rule, platform=platform)


def register_autodiff(primitive: Any, jvp: Callable[..., Any], transpose: Callable[..., Any]) -> None:
    """Register the primitive's JVP and transpose rules (``ad.primitive_jvps``, ``ad.primitive_transposes``)."""
    ad.primitive_jvps[primitive] = jvp
    ad.primitive_transposes[primitive] = transpose


def register_batching_rule(primitive: Any, rule: Callable[..., Any]) -> None:
    """Register ``rule(axis_data, args, dims, **params) -> (outs, out_dims)`` as the primitive's batching
    rule (JAX's "fancy" batcher table: the rule receives the axis data, size included)."""
    batching.fancy_primitive_batchers[primitive] = rule


def require_devices_during_lowering(primitive: Any, required: bool = True) -> None:
    """Make JAX hand the primitive's lowering the real device assignment (jax 0.10 to 0.12).

    Without it a jit's lowering sees only device 0; with it JAX also keys its lowering cache by
    device. ``required=False`` undoes it (``bench/profile_eager.py`` measures the difference).
    """
    if required:
        dispatch.prim_requires_devices_during_lowering.add(primitive)
    else:
        dispatch.prim_requires_devices_during_lowering.discard(primitive)


def is_mutable_ref(value: Any) -> bool:
    """A mutable array reference made by ``jax.new_ref`` (or a tracer of one): its type is an ``AbstractRef``."""
    if isinstance(value, (jax.Array, np.ndarray)):
        return False
    try:
        return isinstance(core.typeof(value), state_types.AbstractRef)
    except TypeError:
        return False


def set_frontend_attributes(results: Sequence[Any], attributes: Mapping[str, Any]) -> None:
    """Attach ``mhlo.frontend_attributes`` (string values) to the operation that produced ``results``.

    XLA keeps frontend attributes through compilation on every jaxlib, so profilers see them.
    """
    owner = results[0].owner if results else None
    if owner is None:
        return
    owner.attributes["mhlo.frontend_attributes"] = ir.DictAttr.get(
        {k: ir.StringAttr.get(str(v)) for k, v in attributes.items()})


def _axis_context(ctx: Any) -> Any:
    return ctx.module_context.axis_context


def assigned_devices(ctx: Any) -> list[Any]:
    """The devices a lowering's program runs on, as far as its axis context says.

    Inside ``shard_map``/``pmap`` (an ``SPMDAxisContext``) the mesh's devices, none for an
    abstract mesh; under jit (a ``ShardingContext``) its device assignment, which JAX fills in
    for primitives in :func:`require_devices_during_lowering` and leaves out otherwise.
    """
    axis_context = _axis_context(ctx)
    mesh = getattr(axis_context, "mesh", None)
    if mesh is not None:
        try:
            return list(mesh.devices.flat)
        except (AttributeError, ValueError):  # an AbstractMesh has no devices (jax raises ValueError)
            return []
    return list(getattr(axis_context, "device_assignment", None) or ())


def automatic_mesh_axes(ctx: Any) -> dict[str, int] | None:
    """Inside ``shard_map``/``pmap``: the mesh axes (name → size) left automatic, not manual; None outside."""
    axis_context = _axis_context(ctx)
    mesh = getattr(axis_context, "mesh", None)
    if mesh is None:
        return None
    manual: Collection[str] = getattr(axis_context, "manual_axes", frozenset())
    return {name: size for name, size in dict(mesh.shape).items() if name not in manual}


def partition_count(ctx: Any) -> int:
    """How many pieces XLA would split the lowered operation into: the product of the automatic
    mesh axes inside ``shard_map``, the number of devices under jit (1 on one device)."""
    automatic = automatic_mesh_axes(ctx)
    if automatic is not None:
        return math.prod(automatic.values())
    return getattr(_axis_context(ctx), "num_devices", 1) or 1


@dataclass(frozen=True)
class DistributedRuntime:
    """This process's view of ``jax.distributed``: the coordination-service client and where it points."""

    client: Any  # jaxlib DistributedRuntimeClient: key_value_set_bytes, key_value_try_get_bytes, ...
    process_id: int
    num_processes: int
    coordinator_address: str


def distributed_runtime() -> DistributedRuntime | None:
    """The coordination-service client of ``jax.distributed.initialize``, or ``None`` when this process did not
    initialise ``jax.distributed`` (or has shut it down)."""
    state = distributed.global_state
    client = getattr(state, "client", None)
    if client is None:
        return None
    return DistributedRuntime(client, int(state.process_id), int(state.num_processes),
                              str(state.coordinator_address or "?"))


def lowering_platform(platform: str) -> str:
    """The platform name lowering rules are registered under: ``gpu`` (what a CUDA or ROCm device and
    ``jax.default_backend()`` may report) becomes ``cuda`` or ``rocm``, whichever is present."""
    from jax._src import xla_bridge

    try:
        return xla_bridge.canonicalize_platform(platform)
    except RuntimeError:
        return platform


def without_internal_refs(fn: Callable[..., Any]) -> Callable[..., tuple[Any, ...]]:
    """``fn`` (arrays in, a tuple of arrays out) with the mutable arrays it makes inside (``jax.new_ref``)
    turned into plain values, so that it lowers where JAX lowers a body alone, without the jit pipeline that
    would discharge them: ``custom_partitioning``'s per-shard body ("Cannot lower jaxpr with effects"). A
    launcher that writes an output in place (``torch_launcher(writes=...)``) makes such refs."""
    from jax._src.interpreters import pxla

    def run(*args: Any) -> tuple[Any, ...]:
        closed = jax.make_jaxpr(fn)(*args)
        if any(isinstance(e, core.InternalMutableArrayEffect) for e in closed.effects):
            closed = pxla._discharge_internal_refs(closed)
        return tuple(core.eval_jaxpr(closed.jaxpr, closed.consts, *args))
    return run


def primitive_names(closed: Any) -> set[str]:
    """The name of every primitive in a (closed) jaxpr, at any depth: ``cond`` branches, ``jit`` bodies, loops."""
    names: set[str] = set()
    todo = [getattr(closed, "jaxpr", closed)]
    while todo:
        jaxpr = todo.pop()
        names.update(e.primitive.name for e in jaxpr.eqns)
        todo.extend(core.subjaxprs(jaxpr))
    return names


def eval_context() -> Any:
    """A context in which JAX runs operations on concrete arrays as they come, even while a jit traces the caller
    (``tritonplug.check_rule`` at a partitioned function's first call): ``jax._src.core.eval_context``. Unlike
    ``jax.ensure_compile_time_eval`` it does not fold constants inside the traces made under it."""
    return core.eval_context()


def operand_mesh_shape(values: Sequence[Any]) -> dict[str, int] | None:
    """The axis sizes of the mesh the operands' types name while tracing (automatic axes included); ``None``
    when they name none."""
    for value in values:
        mesh = getattr(getattr(jax.typeof(value), "sharding", None), "mesh", None)
        if mesh is not None and not mesh.empty:
            return {str(name): int(size) for name, size in mesh.shape.items()}
    return None


def operand_mesh(values: Sequence[Any]) -> tuple[str | None, int]:
    """The platform and device count of the mesh the operands' types name while tracing (jit records it even for
    automatic axes, whose specs it leaves out); ``(None, 1)`` when they name none (single-device or NumPy)."""
    for value in values:
        mesh = getattr(getattr(jax.typeof(value), "sharding", None), "mesh", None)
        if mesh is not None and not mesh.empty:
            device = getattr(mesh, "abstract_device", None)
            return getattr(device, "platform", None), int(mesh.size)
    return None, 1
