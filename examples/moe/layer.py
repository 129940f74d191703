"""The Mixture-of-Experts MLP, in three implementations of one signature: ``moe_mlp(h, p, cfg, choice)``.

Every choice routes alike (:func:`route`: a softmax over the experts in fp32, the ``top_k`` largest,
renormalised to sum to one; Switch Transformer's load-balancing loss) and runs SwiGLU experts
``silu(x @ W_gate) * (x @ W_up) @ W_down``, the gate and up weights held as one ``(experts, hidden, 2 * ffn)``
array. They differ in how tokens reach their experts:

* ``jax``: the routed copies of the tokens gathered into expert order, ``jax.lax.ragged_dot`` for both matmuls
  (XLA's grouped matmul), scattered back.
* ``jax-dense``: GShard's capacity-based dispatch: per group of tokens a ``(tokens, experts, capacity)`` one-hot
  dispatch and combine, and dense ``einsum`` s over every expert's buffer (XLA's other formulation: no gathers,
  but a token past its expert's capacity is dropped).
* ``tritonplug``: vLLM's ``fused_moe_kernel`` through tritonplug (``grouped.gathered_matmul``): the kernel reads
  each token where it lies (the permutation fused into its loads) and writes its rows in (token, slot) order,
  so neither the gather nor the scatter exists; the weighted combine is a sum over the slots.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from . import grouped, kernels
from .config import MoEConfig

CHOICES = ("jax", "jax-dense", "tritonplug")


def route(h: jax.Array, router: jax.Array, cfg: MoEConfig) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(weights, experts, aux)`` for tokens ``h`` ``(tokens, hidden)``: each token's ``top_k`` experts
    ``(tokens, top_k)`` int32 with their renormalised fp32 weights, and the load-balancing loss
    ``experts * sum_e(fraction of routed slots to e * mean probability of e)`` (1.0 when balanced)."""
    probs = jax.nn.softmax(h.astype(jnp.float32) @ router.astype(jnp.float32), axis=-1)
    weights, experts = top_k(probs, cfg.top_k)
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    counts = jnp.zeros((cfg.experts,), jnp.float32).at[experts.reshape(-1)].add(1.0)
    fraction = counts / experts.size
    aux = cfg.experts * jnp.sum(fraction * jnp.mean(probs, axis=0))
    return weights, experts.astype(jnp.int32), aux


def top_k(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """``jax.lax.top_k(x, k)`` (the same values and indices, ties to the lower index) as ``k`` rounds of ``argmax``
    over the last axis. XLA partitions each round along the rows, where its ``TopK`` op is not: under expert
    parallelism (tokens split over devices) ``lax.top_k`` all-gathered every token's scores. ``k`` is a router's
    (2 to 8), so the rounds cost little."""
    values, indices = [], []
    for _ in range(k):
        index = jnp.argmax(x, axis=-1)
        values.append(jnp.take_along_axis(x, index[..., None], axis=-1)[..., 0])
        indices.append(index)
        x = jnp.where(jax.nn.one_hot(index, x.shape[-1], dtype=jnp.bool_), -jnp.inf, x)
    return jnp.stack(values, axis=-1), jnp.stack(indices, axis=-1).astype(jnp.int32)


def swiglu(gate_up: jax.Array) -> jax.Array:
    """``silu(gate) * up`` of the experts' joined gate and up outputs (their last axis, halved)."""
    gate, up = jnp.split(gate_up, 2, axis=-1)
    return jax.nn.silu(gate) * up


def sorted_slots(experts: jax.Array, num_experts: int) -> tuple[jax.Array, jax.Array]:
    """The routed slots (``token * top_k + k``) in expert order, and each expert's count."""
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True).astype(jnp.int32)
    sizes = jnp.zeros((num_experts,), jnp.int32).at[flat].add(1)
    return order, sizes


def experts_jax(h, weights, experts, p, cfg: MoEConfig):
    order, sizes = sorted_slots(experts, cfg.experts)
    x = h[order // cfg.top_k]
    y = jax.lax.ragged_dot(swiglu(jax.lax.ragged_dot(x, p["w_gate_up"], sizes)), p["w_down"], sizes)
    slots = jnp.zeros_like(y).at[order].set(y)
    return combine_slots(slots, weights, h.dtype)


def experts_jax_dense(h, weights, experts, p, cfg: MoEConfig):
    """GShard's dispatch, in groups of ``cfg.dispatch_group`` tokens (the one-hot tensors grow with the square
    of a group's tokens), each expert taking ``capacity`` tokens of a group."""
    tokens = h.shape[0]
    group = math.gcd(tokens, cfg.dispatch_group)
    split = lambda a: a.reshape(tokens // group, group, *a.shape[1:])  # noqa: E731
    out = jax.vmap(_dense_group, in_axes=(0, 0, 0, None, None))(split(h), split(weights), split(experts), p, cfg)
    return out.reshape(h.shape)


def _dense_group(h, weights, experts, p, cfg: MoEConfig):
    tokens = h.shape[0]
    capacity = max(1, min(tokens, math.ceil(cfg.capacity_factor * tokens * cfg.top_k / cfg.experts)))
    one_hot = jax.nn.one_hot(experts, cfg.experts, dtype=jnp.int32)  # (tokens, top_k, experts)
    # a slot's place in its expert's buffer: the slots before it (token-major, then k) routed to that expert
    position = jnp.cumsum(one_hot.reshape(-1, cfg.experts), axis=0).reshape(one_hot.shape) - 1
    kept = one_hot * (position < capacity)
    place = jax.nn.one_hot(jnp.sum(position * kept, axis=-1), capacity, dtype=h.dtype)  # (tokens, top_k, capacity)
    dispatch = jnp.einsum("tke,tkc->tec", kept.astype(h.dtype), place)
    combine = jnp.einsum("tke,tkc,tk->tec", kept.astype(jnp.float32), place.astype(jnp.float32), weights)
    x = jnp.einsum("tec,td->ecd", dispatch, h)
    y = jnp.einsum("ecf,efd->ecd", swiglu(jnp.einsum("ecd,edf->ecf", x, p["w_gate_up"])), p["w_down"])
    return jnp.einsum("tec,ecd->td", combine.astype(h.dtype), y, preferred_element_type=jnp.float32).astype(h.dtype)


def experts_tritonplug(h, weights, experts, p, cfg: MoEConfig):
    order, sizes = sorted_slots(experts, cfg.experts)
    cpu = grouped.on_cpu()
    rows = h.shape[0] * cfg.top_k
    plan = kernels.block_plan(sizes, rows, kernels.block_size_m(rows, cfg.experts, cpu), order=order)
    gate_up = grouped.gathered_matmul(h, p["w_gate_up"], plan, cfg.top_k, jnp.dtype(h.dtype), cpu)
    slots = grouped.gathered_matmul(swiglu(gate_up), p["w_down"], plan, 1, jnp.dtype(h.dtype), cpu)
    return combine_slots(slots, weights, h.dtype)


def combine_slots(slots: jax.Array, weights: jax.Array, dtype) -> jax.Array:
    """``sum_k weight[t, k] * slots[t * top_k + k]`` in fp32, back in ``dtype``."""
    slots = slots.reshape(*weights.shape, slots.shape[-1]).astype(jnp.float32)
    return jnp.sum(slots * weights[..., None], axis=1).astype(dtype)


IMPLEMENTATIONS = {"jax": experts_jax, "jax-dense": experts_jax_dense, "tritonplug": experts_tritonplug}


def moe_mlp(h: jax.Array, p: dict, cfg: MoEConfig, choice: str) -> tuple[jax.Array, jax.Array]:
    """The MoE MLP of ``h`` ``(..., hidden)`` with a layer's params ``p`` (``router`` ``(hidden, experts)``,
    ``w_gate_up`` ``(experts, hidden, 2 * expert_ffn)``, ``w_down`` ``(experts, expert_ffn, hidden)``): the
    output, ``h``'s shape and dtype, and the load-balancing loss."""
    if choice not in IMPLEMENTATIONS:
        raise ValueError(f"moe_mlp: `choice` must be one of {CHOICES}, got {choice!r}")
    return routed(IMPLEMENTATIONS[choice], h, p, cfg)


def routed(experts: Callable[..., jax.Array], h: jax.Array, p: dict, cfg: MoEConfig, *args
           ) -> tuple[jax.Array, jax.Array]:
    """``h`` ``(..., hidden)``'s tokens routed (:func:`route`) and given to ``experts(tokens, weights, chosen, p,
    cfg, *args)`` (an implementation's signature): its output in ``h``'s shape, and the load-balancing loss."""
    flat = h.reshape(-1, h.shape[-1])
    weights, chosen, aux = route(flat, p["router"], cfg)
    return experts(flat, weights, chosen, p, cfg, *args).reshape(h.shape), aux
