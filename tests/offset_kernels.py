"""Kernels that take a global index, partitioned along it with ``tritonplug.shard_offset`` (``offset_suite.py``).

* ``positions``: each element's global position along ``n``: the shard's offset + the local index.
* ``vocab_parallel_cross_entropy``: Megatron's vocabulary-parallel loss. Each shard holds a block of the
  vocabulary's logits and the global target ids; its kernel sums ``exp(logit - row max)`` over its block and
  reads the target's logit where the target falls in ``[offset, offset + local vocab)`` (0 elsewhere). The rule
  makes ``v`` a reduction factor, so both per-row partial results are added over the shards (``psum``); the
  row max comes from ``jnp.max`` outside the kernel (XLA's all-reduce).
* ``rope_positions``: RoPE with the angles computed in the kernel from the position ``offset + local index``,
  so the sequence may be split.

Each offset reaches its kernel as a 0-d int32 array: a pointer the kernel loads.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

import tritonplug


@triton.jit
def positions_kernel(offset_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    local = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + row * n + local, tl.load(offset_ptr) + local, mask=local < n)


@tritonplug.partitioned("b n -> b n")
def positions(x):
    """int32, ``x``'s shape: every row holds the global index of each element along ``n``."""
    rows, n = x.shape
    return tritonplug.triton_call(tritonplug.shard_offset("n"), n=n, kernel=positions_kernel,
                                  out_type=jax.ShapeDtypeStruct((rows, n), jnp.int32),
                                  grid=(rows, tritonplug.cdiv(n, 16)), BLOCK=16)


#: the same function with ``n`` kept whole: an operand split along it is gathered, and the offset is 0
positions_kept_whole = tritonplug.partitioned("b n -> b n", need_replication=("n",))(positions.fn)


def positions_reference(x):
    return jnp.broadcast_to(jnp.arange(x.shape[1], dtype=jnp.int32), x.shape)


@triton.jit
def cross_entropy_parts_kernel(logits_ptr, target_ptr, max_ptr, offset_ptr, sum_ptr, picked_ptr, n_vocab,
                               BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_vocab
    x = tl.load(logits_ptr + row * n_vocab + cols, mask=mask, other=0.0)
    tl.store(sum_ptr + row, tl.sum(tl.where(mask, tl.exp(x - tl.load(max_ptr + row)), 0.0), axis=0))
    local = tl.load(target_ptr + row) - tl.load(offset_ptr)  # the target's index in this shard's block
    here = (local >= 0) & (local < n_vocab)
    picked = tl.load(logits_ptr + row * n_vocab + tl.where(here, local, 0))
    tl.store(picked_ptr + row, tl.where(here, picked, 0.0))


@tritonplug.partitioned("b v, b, b -> b, b", reduction_factors=("v",))
def cross_entropy_parts(logits, target, row_max):
    """Per row: the sum of ``exp(logit - row_max)`` and the target's logit, each a partial sum over ``v``."""
    rows, n_vocab = logits.shape
    row = jax.ShapeDtypeStruct((rows,), jnp.float32)
    return tritonplug.triton_call(logits, target, row_max, tritonplug.shard_offset("v"), n_vocab=n_vocab,
                                  kernel=cross_entropy_parts_kernel, out_type=(row, row), grid=(rows,),
                                  BLOCK=triton.next_power_of_2(n_vocab))


def vocab_parallel_cross_entropy(logits, target):
    """Mean cross entropy of ``logits`` (rows × vocabulary, the vocabulary split) against global ``target`` ids."""
    row_max = jax.lax.stop_gradient(jnp.max(logits, axis=-1))
    sum_exp, picked = cross_entropy_parts(logits, target, row_max)
    return jnp.mean(jnp.log(sum_exp) + row_max - picked)


def cross_entropy_reference(logits, target):
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.mean(lse - jnp.take_along_axis(logits, target[:, None], axis=-1)[:, 0])


LOG_BASE = math.log(10000.0)


@triton.jit
def rope_positions_kernel(x_ptr, offset_ptr, out_ptr, seq, heads, log_base, HALF: tl.constexpr):
    pid = tl.program_id(0)  # one (batch, position, head) row of x
    position = (tl.load(offset_ptr) + (pid // heads) % seq).to(tl.float32)
    i = tl.arange(0, HALF)
    angle = position * tl.exp(-(2.0 * i.to(tl.float32) / (2 * HALF)) * log_base)
    cos, sin = tl.cos(angle), tl.sin(angle)
    start = pid * 2 * HALF
    x1 = tl.load(x_ptr + start + i)
    x2 = tl.load(x_ptr + start + HALF + i)
    tl.store(out_ptr + start + i, x1 * cos - x2 * sin)
    tl.store(out_ptr + start + HALF + i, x2 * cos + x1 * sin)


@tritonplug.partitioned("b s h d -> b s h d", need_replication=("d",))
def rope_positions(x):
    """RoPE of ``x`` (batch, sequence, heads, head dim) at positions ``0 .. sequence - 1``; ``s`` may be split."""
    batch, seq, heads, dim = x.shape
    return tritonplug.triton_call(x, tritonplug.shard_offset("s"), seq=seq, heads=heads, log_base=LOG_BASE,
                                  kernel=rope_positions_kernel, out_type=jax.typeof(x),
                                  grid=(batch * seq * heads,), HALF=dim // 2)


def rope_reference(x):
    _, seq, _, dim = x.shape
    inv = jnp.exp(-(2.0 * jnp.arange(dim // 2, dtype=jnp.float32) / dim) * LOG_BASE)
    angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv  # (s, d/2)
    cos, sin = jnp.cos(angle)[None, :, None], jnp.sin(angle)[None, :, None]
    x1, x2 = x[..., :dim // 2], x[..., dim // 2:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
