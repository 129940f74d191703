"""A call of a partitioned function, partitioned by its rule: the function traced with the whole arrays, the rule
bound to their shapes, then run on one of the two paths (``tritonplug.sharding.paths``), chosen by the mesh's
axis types, under ``custom_vmap`` so that ``jax.vmap`` adds a batch factor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from tritonplug.calls import sharding_rules as rules
from tritonplug.sharding import offsets, paths


def call(rule: rules.Rule, body: paths.Body, arrays: Sequence[Any], names: Sequence[str], function: str,
         closure: Callable[[], list[str]] = list, factors: Sequence[str] | None = None) -> tuple:
    """``body`` (arrays in, a tuple of arrays out) partitioned by ``rule``: checked against the shapes, then
    run on one of the two paths, under ``custom_vmap`` so that ``jax.vmap`` adds a batch factor (explicit axes
    included: the batched body runs under ``shard_map`` on each device's part of the batch). ``closure()`` names
    the arrays the function closes over, for the error that refuses them. ``factors``: those ``shard_offset``
    may be asked (the rule's named ones; the batched rule passes the user's rule's)."""
    factors = offsets.named_factors(rule.operands + rule.results) if factors is None else tuple(factors)
    manual = bool(getattr(jax.sharding.get_abstract_mesh(), "manual_axes", ()))  # inside the user's shard_map
    # traced with unsharded types: under vmap over explicit axes, the whole batched body would loop over a split axis
    whole = offsets.scoped(body, offsets.Scope(function, factors, manual=manual))
    closed, results = jax.make_jaxpr(whole, return_shape=True)(*[jax.ShapeDtypeStruct(a.shape, a.dtype)
                                                                  for a in arrays])
    if closed.consts and _explicit_mesh(arrays) is None:  # custom_partitioning takes no constants (shard_map does)
        _refuse_closure(function, closed.consts, closure())
    result_names = [f"result {k}" for k in range(len(results))]
    bound = rules.bind(rule, [tuple(a.shape) for a in arrays], [tuple(r.shape) for r in results], names,
                       result_names)
    info = paths.CallInfo(function, names, result_names, paths.host_callbacks(closed), factors, manual)

    @jax.custom_batching.custom_vmap
    def run(*arrs: Any) -> tuple[Any, ...]:
        return _dispatch(body, arrs, bound, info)

    @run.def_vmap
    def batched(axis_size: int, in_batched: Sequence[bool], *arrs: Any) -> tuple[tuple[Any, ...], tuple[bool, ...]]:
        batch_rule = _with_batch_factor(bound, in_batched)
        vbody = jax.vmap(body, in_axes=tuple(0 if b else None for b in in_batched))
        outs = call(batch_rule, lambda *xs: tuple(vbody(*xs)), arrs, names, function, factors=factors)
        return outs, tuple(True for _ in outs)

    if _explicit_mesh(arrays) is None:
        return tuple(run(*arrays))

    # custom_vmap does not linearize: under explicit axes jax.grad differentiates the shard_map itself
    @jax.custom_jvp
    def differentiable(*arrs: Any) -> tuple[Any, ...]:
        return tuple(run(*arrs))

    @differentiable.defjvp
    def jvp(primals: Any, tangents: Any) -> Any:
        return jax.jvp(lambda *arrs: _dispatch(body, arrs, bound, info), primals, tangents)

    return tuple(differentiable(*arrays))


def _refuse_closure(function: str, consts: Sequence[Any], named: list[str]) -> None:
    shapes = ", ".join(f"{jax.typeof(c).dtype}{list(jax.typeof(c).shape)}" for c in consts)
    which = f" ({', '.join(named)})" if named else " (none of its own names: one a function it calls closes over, " \
                                                   "or a NumPy array it makes)"
    raise TypeError(f"partitioned {function}: the function closes over {len(consts)} array(s){which}: {shapes}. A "
                    f"partitioned function's arrays are its arguments, each with a group in the rule (a closed-over "
                    f"array cannot be split or placed): pass it as an argument and give it a group, e.g. its "
                    f"factors listed in need_replication to keep it whole on every device; make a constant with "
                    f"jax.numpy inside the function")


def _explicit_mesh(arrays: Sequence[Any]) -> Any | None:
    """The mesh with explicit axes that the operands' types (or the context) are sharded over, if any."""
    mesh = jax.sharding.get_abstract_mesh()
    types = [jax.typeof(a) for a in arrays]
    explicit = [t.sharding.mesh for t in types
                if getattr(t, "sharding", None) is not None and t.sharding.mesh._any_axis_explicit]
    if explicit:
        return explicit[0]
    return None if mesh.empty or not mesh._any_axis_explicit else mesh


def _dispatch(body: paths.Body, arrays: Sequence[Any], bound: rules.BoundRule, info: paths.CallInfo) -> tuple:
    mesh = _explicit_mesh(arrays)
    if mesh is None:
        return paths.auto(body, arrays, bound, info)
    if mesh._any_axis_auto:
        raise NotImplementedError(
            f"partitioned {info.function}: the mesh {dict(mesh.shape)} mixes explicit axes {list(mesh.explicit_axes)} "
            f"and automatic ones {list(mesh.auto_axes)}; a partitioned launcher runs on a mesh whose axes are all "
            f"explicit or all automatic")
    if mesh.are_all_axes_manual:
        return tuple(paths.whole(body, info)(*arrays))
    return paths.explicit(body, arrays, bound, info, mesh)


def _with_batch_factor(bound: rules.BoundRule, in_batched: Sequence[bool]) -> rules.Rule:
    """The bound rule with a new leading factor on the batched operands and on every result."""
    used = {f for g in bound.operands + bound.results for f in g}
    factor = next(f"vmap{k}" for k in range(len(used) + 1) if f"vmap{k}" not in used)
    operands = tuple(((factor,), *g) if b else g for g, b in zip(bound.operand_dims, in_batched, strict=True))
    results = tuple(((factor,), *g) for g in bound.result_dims)
    return rules.Rule(rules.text_of(operands, results), operands, results, bound.need_replication, bound.reduction)


def is_array(leaf: Any) -> bool:
    """Whether a leaf of a call's arguments is an operand (a ``jax.Array`` or NumPy array; numbers are constants)."""
    return isinstance(leaf, (jax.Array, np.ndarray))
