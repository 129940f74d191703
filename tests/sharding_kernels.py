"""Kernels and partitioned launchers for the sharding suite (``sharding_suite.py``), each with its rule.

Every launcher derives its grid and its shape scalars from the arrays it is given, so inside a sharded jit
they are the shard's; the suite compares each against the unsharded call and a ``jnp`` reference.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

import tritonplug

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from fused_attention import attention as _attention  # noqa: E402
from kernels import add_kernel  # noqa: E402


@triton.jit
def add_rows_kernel(x_ptr, y_ptr, n_cols, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask)
    tl.store(out_ptr + row * n_cols + offs, x + tl.load(y_ptr + row * n_cols + offs, mask=mask), mask=mask)


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def column_sum_kernel(x_ptr, n_rows, n_cols, out_ptr, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    acc = tl.zeros((BLOCK,), tl.float32)
    for row in range(0, n_rows):
        acc += tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + cols, acc, mask=mask)


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, seq, out_ptr, HALF: tl.constexpr):
    pid = tl.program_id(0)  # one (batch, head, position) row of x
    pos = pid % seq
    offs = tl.arange(0, HALF)
    base = pid * 2 * HALF
    x1 = tl.load(x_ptr + base + offs)
    x2 = tl.load(x_ptr + base + HALF + offs)
    cos = tl.load(cos_ptr + pos * HALF + offs)
    sin = tl.load(sin_ptr + pos * HALF + offs)
    tl.store(out_ptr + base + offs, x1 * cos - x2 * sin)
    tl.store(out_ptr + base + HALF + offs, x2 * cos + x1 * sin)


@tritonplug.partitioned("n, n -> n")
def add_flat(x, y):
    return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_type=jax.typeof(x),
                                  grid=(tritonplug.cdiv(x.size, 16),), BLOCK=16)


@tritonplug.partitioned("r c, r c -> r c")
def add_rows(x, y):
    rows, cols = x.shape
    return tritonplug.triton_call(x, y, cols, kernel=add_rows_kernel, out_type=jax.typeof(x),
                                  grid=(rows, tritonplug.cdiv(cols, 16)), BLOCK=16)


@tritonplug.partitioned("... d, d -> ... d, ...", need_replication=("d",))
def rms_norm(x, w, eps=1e-6):
    """Normalises over the last axis, which must stay whole; the leading axes may be split."""
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    y, rstd = tritonplug.triton_call(
        x.reshape(rows, d), w, n_cols=d, eps=eps, kernel=rms_norm_kernel,
        out_type=(jax.ShapeDtypeStruct((rows, d), x.dtype), jax.ShapeDtypeStruct((rows,), jnp.float32)),
        grid=(rows,), BLOCK=triton.next_power_of_2(d))
    return y.reshape(x.shape), rstd.reshape(x.shape[:-1])


@tritonplug.partitioned("r c -> c", reduction_factors=("r",))
def column_sum(x):
    """Sums over rows: a row shard's sum is partial, and the shards' sums are added (``psum``)."""
    rows, cols = x.shape
    return tritonplug.triton_call(x, rows, cols, kernel=column_sum_kernel,
                                  out_type=jax.ShapeDtypeStruct((cols,), jnp.float32),
                                  grid=(tritonplug.cdiv(cols, 16),), BLOCK=16)


@tritonplug.partitioned("b h s d, s half, s half -> b h s d", need_replication=("d", "half"))
def rope(x, cos, sin):
    b, h, s, d = x.shape
    return tritonplug.triton_call(x, cos, sin, s, kernel=rope_kernel, out_type=jax.typeof(x), grid=(b * h * s,),
                                  HALF=d // 2)


@tritonplug.partitioned("b h s d, b h s d, b h s d -> b h s d", need_replication=("s", "d"))
def attention(q, k, v, causal=False, block=16):
    return _attention(q, k, v, causal=causal, block_m=block, block_n=block)


# ----- forward and backward under jax.custom_vjp, each partitioned ------------------------------------------

@tritonplug.partitioned("... d, d -> ... d, ...", need_replication=("d",))
def _rms_fwd(x, w):
    return rms_norm.fn(x, w)


@tritonplug.partitioned("... d, d, ..., ... d -> ... d, d", need_replication=("d",), reduction_factors=("...",))
def _rms_bwd(x, w, rstd, dy):
    """dx per row (split with the rows); dw summed over rows (partial per shard, added across shards)."""
    xhat = x.astype(jnp.float32) * rstd[..., None]
    wdy = w.astype(jnp.float32) * dy.astype(jnp.float32)
    dx = (wdy - xhat * jnp.mean(xhat * wdy, axis=-1, keepdims=True)) * rstd[..., None]
    dw = jnp.sum((dy.astype(jnp.float32) * xhat).reshape(-1, x.shape[-1]), axis=0)
    # the row-local part is a Triton call too, so the backward's shape scalars are the shard's
    dx = add_rows.fn(dx.reshape(-1, x.shape[-1]), jnp.zeros_like(dx.reshape(-1, x.shape[-1]))).reshape(x.shape)
    return dx.astype(x.dtype), dw.astype(w.dtype)


@jax.custom_vjp
def rms_norm_vjp(x, w):
    return _rms_fwd(x, w)[0]


def _vjp_fwd(x, w):
    y, rstd = _rms_fwd(x, w)
    return y, (x, w, rstd)


def _vjp_bwd(res, dy):
    return _rms_bwd(*res, dy)


rms_norm_vjp.defvjp(_vjp_fwd, _vjp_bwd)


def rms_norm_reference(x, w, eps=1e-6):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps) * w).astype(x.dtype)


def rope_reference(x, cos, sin):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
