"""Expert parallelism: the MoE MLP with its experts split over a mesh axis, in one ``jax.jit`` and no ``shard_map``.

    out, aux = jax.jit(lambda h, p: moe_mlp_expert_parallel(h, p, cfg, mesh))(h, p)

On a mesh whose ``axis`` has ``S`` devices, the tokens ``h`` ``(T, hidden)`` split over ``axis`` along ``T``, the
router replicated, ``w_gate_up`` ``(E, hidden, 2 * ffn)`` and ``w_down`` ``(E, ffn, hidden)`` split over
``axis`` by expert (``model.PARAM_SPECS``):

1. Each token is routed (``layer.route``) and dispatched GShard-style within its source shard: the ``T / S``
   tokens of shard ``s`` fill per-expert buffers of ``C`` rows (:func:`capacity`) in token order, then ``k``;
   a slot past its expert's ``C`` is dropped. So ``x_buf`` ``(S, E, C, hidden)`` is split on ``S``, with the
   kept rows' counts ``(S, E)``; no one-hot tensor, a scatter of slot numbers and a gather.
2. Transposed to ``(E, S, C, hidden)`` and constrained split on ``E``: XLA exchanges the buffers with an
   all-to-all.
3. Each device runs its ``E / S`` experts on the ``S * C`` rows they received (:func:`experts`, partitioned by
   expert with ``@tritonplug.partitioned``): one block plan over the rows in use, vLLM's ``fused_moe_kernel``
   for gate/up and down (``grouped.gathered_matmul``), SwiGLU between. Padding rows are not read and come out
   zero.
4. Transposed back and constrained split on ``S`` (the all-to-all back), and each token's ``top_k`` rows
   combined with its routing weights where they were kept.

``jax.grad`` works through it: :func:`experts` is a ``jax.custom_vjp`` whose forward and backward are each
partitioned (a partitioned function itself is not differentiable: ``custom_partitioning`` has no
differentiation rule). The backward keeps the forward's gate/up rows and runs the grouped matmul's backward
kernels (``grouped.gathered_matmul_backward``) without running the forward again.

``token_axes`` (default ``(axis,)``) are the mesh axes the tokens are split over: ``("data", "model")`` on a
(data, model) mesh makes a source shard of each device, ``S`` of them in all, and splits the expert buffers
``(E, S, C, hidden)`` over ``model`` by expert and over ``data`` by source shard, so that the all-to-alls stay
within ``model`` (``axis`` last) and the experts' weight gradients are summed over ``data``. Without a mesh
(``mesh=None``) it is one shard: the same dispatch over all tokens, on one device.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tritonplug

from . import grouped, kernels
from .config import MoEConfig
from .layer import routed, sorted_slots, swiglu

#: the experts (e) and the source shards (s) may be split; each device multiplies all the rows it holds
_WHOLE = ("c", "d", "h", "f")


def capacity(tokens: int, cfg: MoEConfig) -> int:
    """Rows per expert and source shard of ``tokens`` tokens: ``ceil(capacity_factor * tokens * top_k / E)``,
    at least 1 and at most ``tokens`` (an expert gets a token once: ``capacity_factor = E / top_k`` never drops)."""
    return max(1, min(tokens, math.ceil(cfg.capacity_factor * tokens * cfg.top_k / cfg.experts)))


def _plan(counts: jax.Array, capacity: int, cpu: bool) -> kernels.BlockPlan:
    """The block plan over an expert shard's rows ``(experts, shards, capacity)``, flattened: row ``(e, s, c)``
    is in use when ``c < counts[e, s]``, and the rows in use are already in expert order."""
    experts, shards = counts.shape
    rows = experts * shards * capacity
    unused = (jnp.arange(capacity, dtype=jnp.int32) >= counts[..., None]).reshape(-1).astype(jnp.int32)
    order = jnp.argsort(unused, stable=True).astype(jnp.int32)  # the rows in use first, in expert order
    return kernels.block_plan(counts.sum(axis=1), rows, kernels.block_size_m(rows, experts, cpu), order=order)


@tritonplug.partitioned("e s c d, e s, e d h, e f d -> e s c d, e s c h", need_replication=_WHOLE)
def _experts_forward(x, counts, w_gate_up, w_down):
    """``(y, gate_up)`` for one shard's experts: ``x`` ``(e, s, c, d)`` rows, ``counts`` ``(e, s)`` in use."""
    e, s, c, d = x.shape
    cpu, dtype = grouped.on_cpu(), jnp.dtype(x.dtype)
    plan = _plan(counts, c, cpu)
    gate_up = grouped.gathered_matmul(x.reshape(-1, d), w_gate_up, plan, 1, dtype, cpu)
    y = grouped.gathered_matmul(swiglu(gate_up), w_down, plan, 1, dtype, cpu)
    return y.reshape(x.shape), gate_up.reshape(e, s, c, -1)


@tritonplug.partitioned("e s c d, e s, e d h, e f d, e s c h, e s c d -> e s c d, e d h, e f d",
                        need_replication=_WHOLE, reduction_factors=("s",))
def _experts_backward(x, counts, w_gate_up, w_down, gate_up, dy):
    """``(dx, dw_gate_up, dw_down)`` for one shard's experts, from the forward's ``gate_up`` rows (the weights'
    gradients summed over the source shards' split, if any)."""
    e, s, c, d = x.shape
    cpu = grouped.on_cpu()
    plan = _plan(counts, c, cpu)
    act, swiglu_vjp = jax.vjp(swiglu, gate_up.reshape(-1, gate_up.shape[-1]))
    d_act, dw_down = grouped.gathered_matmul_backward(act, w_down, plan, 1, cpu, dy.reshape(-1, d))
    (d_gate_up,) = swiglu_vjp(d_act)
    dx, dw_gate_up = grouped.gathered_matmul_backward(x.reshape(-1, d), w_gate_up, plan, 1, cpu, d_gate_up)
    return dx.reshape(x.shape), dw_gate_up.astype(w_gate_up.dtype), dw_down.astype(w_down.dtype)


@jax.custom_vjp
def experts(x: jax.Array, counts: jax.Array, w_gate_up: jax.Array, w_down: jax.Array) -> jax.Array:
    """The experts' SwiGLU MLP on their buffers: ``x`` ``(E, S, C, hidden)``, ``counts`` ``(E, S)`` (the rows in
    use of each buffer; the others come out zero), split by expert wherever ``x`` and the weights are."""
    return _experts_forward(x, counts, w_gate_up, w_down)[0]


def _experts_fwd(x, counts, w_gate_up, w_down):
    y, gate_up = _experts_forward(x, counts, w_gate_up, w_down)
    return y, (x, counts, w_gate_up, w_down, gate_up)


def _experts_bwd(residuals, dy):
    dx, dw_gate_up, dw_down = _experts_backward(*residuals, dy)
    return dx, None, dw_gate_up, dw_down


experts.defvjp(_experts_fwd, _experts_bwd)


def _dispatch(h, chosen, capacity: int, num_experts: int):
    """One source shard: ``h`` ``(t, d)`` with its experts ``chosen`` ``(t, k)`` → its buffers ``(E, C, d)``,
    the rows kept per expert ``(E,)`` and each slot's place in its expert's buffer ``(t, k)`` (``>= C``:
    dropped). Slots take places in token order, then ``k``."""
    top_k = chosen.shape[1]
    flat = chosen.reshape(-1)
    slots = flat.shape[0]
    order, sizes = sorted_slots(chosen, num_experts)  # the slots by expert, in slot order within each
    starts = jnp.cumsum(sizes) - sizes
    place = jnp.zeros((slots,), jnp.int32).at[order].set(jnp.arange(slots, dtype=jnp.int32) - starts[flat[order]])
    row = jnp.where(place < capacity, flat * capacity + place, num_experts * capacity)  # dropped: out of range
    slot_of_row = jnp.full((num_experts * capacity,), slots, jnp.int32).at[row].set(
        jnp.arange(slots, dtype=jnp.int32), mode="drop")
    used = slot_of_row < slots
    x = jnp.where(used[:, None], h[jnp.where(used, slot_of_row // top_k, 0)], 0)
    return x.reshape(num_experts, capacity, -1), jnp.minimum(sizes, capacity), place.reshape(chosen.shape)


def _combine(y, weights, chosen, place, dtype):
    """One source shard: ``sum_k weights[t, k] * y[chosen[t, k], place[t, k]]`` over the kept slots, in fp32."""
    capacity = y.shape[1]
    rows = y[chosen, jnp.minimum(place, capacity - 1)].astype(jnp.float32)  # (t, k, d)
    kept = jnp.where(place < capacity, weights, 0.0)
    return jnp.sum(rows * kept[..., None], axis=1).astype(dtype)


def experts_expert_parallel(h: jax.Array, weights: jax.Array, chosen: jax.Array, p: dict, cfg: MoEConfig,
                            mesh: jax.sharding.Mesh | None = None, axis: str = "model",
                            token_axes: Sequence[str] | None = None) -> jax.Array:
    """The experts' part of the layer for routed tokens (``layer.IMPLEMENTATIONS``' signature): ``h``
    ``(T, hidden)``, ``weights``/``chosen`` ``(T, top_k)``; the experts split over ``mesh``'s ``axis``, the
    tokens over ``token_axes`` (see the module's docstring)."""
    tokens, hidden = h.shape
    token_axes, shards = source_shards(tokens, cfg, mesh, axis, token_axes)
    cap = capacity(tokens // shards, cfg)
    others = tuple(a for a in token_axes if a != axis) or None

    def split(x):  # (T, ...) -> (S, T / S, ...): a group of tokens per source shard
        return x.reshape(shards, tokens // shards, *x.shape[1:])

    def on(x, *spec):  # by source shard (the first dimension), or as `spec` says
        spec = spec or (token_axes,)
        return x if mesh is None else jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))

    dispatch = functools.partial(_dispatch, capacity=cap, num_experts=cfg.experts)
    x_buf, counts, place = (on(x) for x in jax.vmap(dispatch)(on(split(h)), on(split(chosen))))
    x_buf = on(x_buf.transpose(1, 0, 2, 3), axis, others)  # (E, S, C, d) by expert: the all-to-all
    y_buf = experts(x_buf, on(counts.T, axis, others), p["w_gate_up"], p["w_down"])
    y_buf = on(on(y_buf, axis, others).transpose(1, 0, 2, 3))  # (S, E, C, d) by source shard: the all-to-all back
    combine = functools.partial(_combine, dtype=h.dtype)
    return jax.vmap(combine)(y_buf, on(split(weights)), on(split(chosen)), place).reshape(tokens, hidden)


def source_shards(tokens: int, cfg: MoEConfig, mesh: jax.sharding.Mesh | None, axis: str,
                  token_axes: Sequence[str] | None) -> tuple[tuple[str, ...], int]:
    """``token_axes`` (default ``(axis,)``) and the source shards they make (1 without a mesh), after checking
    that they are axes of ``mesh`` including ``axis``, that they divide the ``tokens`` and ``axis`` the experts."""
    token_axes = tuple(token_axes or (axis,))
    if mesh is not None and (axis not in token_axes or not set(token_axes) <= set(mesh.axis_names)):
        raise ValueError(f"expert parallelism: token_axes {token_axes} must be axes of the mesh {dict(mesh.shape)} "
                         f"and include the experts' axis {axis!r}")
    shards = 1 if mesh is None else math.prod(mesh.shape[a] for a in token_axes)
    if tokens % shards or (mesh is not None and cfg.experts % mesh.shape[axis]):
        raise ValueError(f"expert parallelism: the tokens ({tokens}) must be a multiple of the source shards "
                         f"({shards}) and the experts ({cfg.experts}) of the size of {axis!r}")
    return token_axes, shards


def moe_mlp_expert_parallel(h: jax.Array, p: dict, cfg: MoEConfig, mesh: jax.sharding.Mesh | None = None,
                            axis: str = "model", token_axes: Sequence[str] | None = None
                            ) -> tuple[jax.Array, jax.Array]:
    """``layer.moe_mlp`` with the experts split over ``mesh``'s ``axis``: ``(out, aux)`` for ``h``
    ``(..., hidden)`` (its tokens split over ``token_axes``, default ``axis``), ``h``'s shape and dtype, and the
    load-balancing loss."""
    return routed(experts_expert_parallel, h, p, cfg, mesh, axis, token_axes)
