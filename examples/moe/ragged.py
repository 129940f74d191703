"""Expert parallelism without capacity buffers: the tokens sorted by expert and exchanged by a ragged all-to-all.

    out, aux = jax.jit(lambda h, p: moe_mlp_ragged(h, p, cfg, mesh))(h, p)

The ``tritonplug-ep-ragged`` choice. ``parallel.py`` (``tritonplug-ep``) pads each (expert, source shard) to a
capacity of rows and drops what does not fit; here nothing is dropped or padded on the wire. On a mesh whose
``axis`` has ``S`` devices, each of its ``E / S`` experts, inside one ``jax.shard_map`` (per device):

1. The device's tokens are routed (``layer.route``, outside) and their ``t * top_k`` slots sorted by expert
   (``x``: the tokens' rows in that order), so the rows for each destination device lie together, expert by expert.
2. The per-expert counts go by ``all_to_all`` to the experts' devices; each device then knows what it receives,
   lays it out expert by expert (all sources' rows of its first expert, then its second, ...) and tells each source
   where its rows land (another ``all_to_all``, of offsets).
3. :func:`exchange` (``jax.lax.ragged_all_to_all``: a slice per expert, cut in :func:`pieces`) moves the rows;
   the device's experts run on them as one grouped matmul each (``grouped.grouped_matmul``: vLLM's kernel, our
   dW), SwiGLU between, the rows past the received ones never read and zero.
4. The results go back the same way (the slices and offsets swapped), are put back in slot order and combined
   with the routing weights.

The receive buffer holds ``S * t * top_k`` rows, the most any device can receive (every source routing every
slot to it): memory for balance never being needed, not time (the kernels read only the rows received).
``jax.grad`` differentiates through it (``ragged_all_to_all`` transposes to itself with the offsets swapped;
``grouped_matmul`` is a ``custom_vjp``). XLA:CPU has no ``ragged-all-to-all``: there :func:`exchange` runs the
same semantics as an ``all_to_all`` of slices padded to the operand's length and a scatter (``_exchange_padded``),
chosen per lowering platform (``lax.platform_dependent``), so CPU meshes test every offset computed here.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from . import grouped
from .config import MoEConfig
from .layer import combine_slots, routed, sorted_slots, swiglu
from .parallel import source_shards


def _exclusive_cumsum(x: jax.Array, axis: int = 0) -> jax.Array:
    return jnp.cumsum(x, axis=axis) - x


def _exchange_padded(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *, axis_name):
    """``ragged_all_to_all``'s documented semantics from ``all_to_all``: each slice sent padded to the operand's
    length, written at its receiver-side offset by a scatter (rows past ``recv_sizes`` dropped)."""
    rows = jnp.arange(operand.shape[0], dtype=jnp.int32)
    take = input_offsets[:, None] + rows  # (slices, rows): slice i's rows in the operand
    sent = (rows < send_sizes[:, None])[(...,) + (None,) * (operand.ndim - 1)]
    slices = jnp.where(sent, operand[jnp.minimum(take, operand.shape[0] - 1)], 0)
    got = jax.lax.all_to_all(slices, axis_name, 0, 0, tiled=True)  # by source device, then its slices
    at = jax.lax.all_to_all(output_offsets, axis_name, 0, 0, tiled=True)[:, None] + rows
    at = jnp.where(rows < recv_sizes[:, None], at, output.shape[0])  # out of range: dropped
    return output.at[at.reshape(-1)].set(got.reshape(-1, *operand.shape[1:]), mode="drop")


#: the updates XLA's GPU ragged all-to-all is given, at least: its kernel runs one block of 128 threads per update,
#: so one slice per expert (64) left most of an H200 idle (1.8 ms to move 512 MiB, 0.6 TB/s)
_UPDATES = 2048


def pieces(input_offsets, send_sizes, output_offsets, recv_sizes, count: int):
    """The same exchange in ``count`` times as many slices: slice ``i`` of ``n`` rows as ``count`` pieces of
    ``ceil(n / count)`` rows (the last ones shorter or empty), each slice's pieces adjacent, so a peer's slices stay
    together. Sender and receiver cut alike: both know each slice's size."""
    def cut(sizes):  # each piece's start within its slice, and its size
        chunk = (-(-sizes // count))[:, None]
        start = jnp.arange(count, dtype=sizes.dtype) * chunk
        return start.reshape(-1), jnp.clip(sizes[:, None] - start, 0, chunk).reshape(-1)
    start, send = cut(send_sizes)
    return (jnp.repeat(input_offsets, count) + start, send, jnp.repeat(output_offsets, count) + start,
            cut(recv_sizes)[1])


def exchange(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *, axis_name):
    """``jax.lax.ragged_all_to_all`` (its arguments and semantics), on XLA:CPU through :func:`_exchange_padded`;
    on GPUs with each slice cut in :func:`pieces` (at least ``_UPDATES`` updates in all).
    Inside ``shard_map(..., check_vma=False)``: with the check, JAX (0.11 on) types ``ragged_all_to_all``'s result as
    its ``output`` argument (not varying over the axis), so the two platforms' branches would not type alike."""
    args = (operand, output, input_offsets, send_sizes, output_offsets, recv_sizes)
    count = max(1, -(-_UPDATES // input_offsets.shape[0]))

    def real(operand, output, *sizes):
        return jax.lax.ragged_all_to_all(operand, output, *pieces(*sizes, count), axis_name=axis_name)
    padded = functools.partial(_exchange_padded, axis_name=axis_name)
    return jax.lax.platform_dependent(*args, cpu=padded, default=real)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def slot_rows(h, order, inverse, top_k: int):
    """``h[order // top_k]``: the token row of each slot in ``order`` (a permutation of the ``t * top_k`` slots,
    ``inverse`` its :func:`inverse`). Its gradient is a gather by ``inverse`` and a sum over ``k``, not the
    scatter-add XLA derives (atomics, every token hit ``top_k`` times: 2 ms of a 14 ms layer at Qwen3's shape on
    an H200)."""
    return h[order // top_k]


def _slot_rows_fwd(h, order, inverse, top_k):
    return slot_rows(h, order, inverse, top_k), inverse


def _slot_rows_bwd(top_k, inverse, g):
    rows = g[inverse].reshape(-1, top_k, g.shape[-1])
    return jnp.sum(rows, axis=1, dtype=jnp.float32).astype(g.dtype), None, None


slot_rows.defvjp(_slot_rows_fwd, _slot_rows_bwd)


@jax.custom_vjp
def unsorted(y, order, inverse):
    """``y``'s rows back in slot order, ``zeros_like(y).at[order].set(y)``, as a gather by ``inverse`` (the
    permutation ``order``'s :func:`inverse`); its gradient the gather by ``order`` (XLA's own would scatter both
    ways)."""
    return y[inverse]


def _unsorted_fwd(y, order, inverse):
    return unsorted(y, order, inverse), order


def _unsorted_bwd(order, g):
    return g[order], None, None


unsorted.defvjp(_unsorted_fwd, _unsorted_bwd)


def inverse(order):
    """The inverse of the permutation ``order``: ``inverse[order[i]] == i`` (one scatter of integers, computed once
    for :func:`slot_rows`' gradient and :func:`unsorted`)."""
    return jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype), unique_indices=True)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 4))
def move(operand, rows: int, there, back, axis: str):
    """:func:`exchange` of ``operand``'s rows into ``rows`` zero rows by ``there`` (its offsets and sizes); its
    gradient the cotangent moved back by ``back``, the same exchange reversed (the layer knows both). JAX's own
    transpose of ``ragged_all_to_all`` would compute ``back``'s offsets again, by two ``all_to_all`` s each time."""
    return exchange(operand, jnp.zeros((rows, *operand.shape[1:]), operand.dtype), *there, axis_name=axis)


def _move_fwd(operand, rows, there, back, axis):
    return move(operand, rows, there, back, axis), (operand.shape[0], there, back)


def _move_bwd(rows, axis, residuals, g):
    operand_rows, there, back = residuals
    return move(g, operand_rows, back, there, axis), None, None


move.defvjp(_move_fwd, _move_bwd)


def _experts_on_device(h, weights, chosen, w_gate_up, w_down, *, axis: str, num_experts: int):
    """One device's part: its tokens ``h`` ``(t, d)`` with their routing ``(t, top_k)``, its experts' weights
    ``(E / S, ...)``; the tokens' outputs ``(t, d)``."""
    shards = jax.lax.axis_size(axis)
    local = num_experts // shards
    top_k, slots = chosen.shape[1], chosen.size
    order, sizes = sorted_slots(chosen, num_experts)
    starts = _exclusive_cumsum(sizes)  # each expert's slice in `x`
    back_to_slots = inverse(order)
    x = slot_rows(h, order, back_to_slots, top_k)
    # what each source sends to this device's experts, (source, expert), and where each such slice lies at its
    # source: one all_to_all of both
    received, came_from = jax.lax.all_to_all(jnp.stack([sizes, starts], axis=1), axis, 0, 0, tiled=True).T
    per_source = received.reshape(shards, local)
    local_sizes = per_source.sum(axis=0)  # laid out expert by expert, then source
    placed = (_exclusive_cumsum(local_sizes)[None, :] + _exclusive_cumsum(per_source, axis=0)).reshape(-1)
    lands_at = jax.lax.all_to_all(placed, axis, 0, 0, tiled=True)  # where this device's slices land
    there, back = (starts, sizes, lands_at, received), (placed, received, came_from, sizes)
    x = move(x, shards * slots, there, back, axis)
    y = grouped.grouped_matmul(swiglu(grouped.grouped_matmul(x, w_gate_up, local_sizes)), w_down, local_sizes)
    y = move(y, slots, back, there, axis)
    return combine_slots(unsorted(y, order, back_to_slots), weights, h.dtype)


def experts_ragged(h: jax.Array, weights: jax.Array, chosen: jax.Array, p: dict, cfg: MoEConfig,
                   mesh: jax.sharding.Mesh | None = None, axis: str = "model",
                   token_axes: Sequence[str] | None = None) -> jax.Array:
    """The experts' part of the layer for routed tokens (``layer.IMPLEMENTATIONS``' signature): ``h``
    ``(T, hidden)``, ``weights``/``chosen`` ``(T, top_k)``; the experts split over ``mesh``'s ``axis``, the
    tokens over ``token_axes`` (default ``(axis,)``; they must include ``axis``). Without a mesh: one device."""
    token_axes = tuple(token_axes or (axis,))
    if mesh is None:  # one device, the same program
        names = tuple(dict.fromkeys((*token_axes, axis)))
        mesh = jax.make_mesh((1,) * len(names), names, axis_types=(jax.sharding.AxisType.Auto,) * len(names),
                             devices=jax.devices()[:1])
    source_shards(h.shape[0], cfg, mesh, axis, token_axes)
    body = functools.partial(_experts_on_device, axis=axis, num_experts=cfg.experts)
    tokens, experts = P(token_axes), P(axis)
    return jax.shard_map(body, mesh=mesh, in_specs=(tokens, tokens, tokens, experts, experts), out_specs=tokens,
                         check_vma=False)(h, weights, chosen, p["w_gate_up"], p["w_down"])


def moe_mlp_ragged(h: jax.Array, p: dict, cfg: MoEConfig, mesh: jax.sharding.Mesh | None = None,
                   axis: str = "model", token_axes: Sequence[str] | None = None) -> tuple[jax.Array, jax.Array]:
    """``layer.moe_mlp`` with the experts split over ``mesh``'s ``axis`` and the tokens exchanged by a ragged
    all-to-all: ``(out, aux)`` for ``h`` ``(..., hidden)``, ``h``'s shape and dtype, and the load-balancing loss."""
    return routed(experts_ragged, h, p, cfg, mesh, axis, token_axes)
