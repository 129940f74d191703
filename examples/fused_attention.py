"""Fused attention forward (flash-attention style): softmax(Q Kᵀ · scale) V without
materialising the attention matrix, one program per (query block, batch × head)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import tritonplug

if __package__ in (None, ""):
    from _common import backend_name, on_gpu, platform
else:
    from ._common import backend_name, on_gpu, platform


@triton.jit
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, seq_len, scale, o_ptr,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * seq_len * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < seq_len,
                other=0.0)
    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    end = tl.minimum((start_m + 1) * BLOCK_M, seq_len) if CAUSAL else seq_len
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < seq_len
        k = tl.load(k_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        valid = offs_n[None, :] < seq_len
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= offs_n[None, :])
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < seq_len)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False, block_m: int = 64,
              block_n: int = 64) -> jax.Array:
    """q, k, v: [batch, heads, seq, head_dim], contiguous."""
    batch, heads, seq, dim = q.shape
    return tritonplug.triton_call(
        q, k, v, seq, 1.0 / math.sqrt(dim), kernel=attention_fwd_kernel,
        out_type=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=(tritonplug.cdiv(seq, block_m), batch * heads),
        num_warps=4, num_stages=2, HEAD_DIM=dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal)


def reference(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v.astype(jnp.float32))


def main() -> None:
    shape = (4, 16, 2048, 64) if on_gpu() else (1, 2, 80, 16)
    dtype = jnp.float16 if on_gpu() else jnp.float32
    blocks = {} if on_gpu() else {"block_m": 16, "block_n": 16}
    q, k, v = (jax.random.normal(key, shape, dtype) for key in jax.random.split(jax.random.key(3), 3))
    for causal in (False, True):
        out = jax.jit(lambda q, k, v, c=causal: attention(q, k, v, c, **blocks))(q, k, v)
        np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(reference(q, k, v, causal)),
                                   rtol=2e-2, atol=2e-2)
    print(f"fused attention {shape} on {platform()!r} by backend {backend_name()!r}: matches the jnp reference "
          f"(causal and not)")


if __name__ == "__main__":
    main()
