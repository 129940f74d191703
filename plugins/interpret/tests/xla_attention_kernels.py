"""Attention backward as users write it (FlashAttention-2's dK/dV and dQ passes in one kernel), for the XLA path.

Shaped like Triton's tutorial backward: per program one key block (dK, dV: a statically short loop over the
masked diagonal query blocks, then a loop whose length depends on the program) and one query block (dQ likewise),
three or four dots per step. The tutorial took 25 s to compile on the XLA path when every short loop was unrolled.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _dkdv_steps(dk, dv, q_ptr, do_ptr, lse_ptr, delta_ptr, k, v, start_n, start_m, steps,
                HEAD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL_BLOCK: tl.constexpr):
    rn = start_n + tl.arange(0, BN)
    rd = tl.arange(0, HEAD)
    m0 = start_m
    for _ in range(steps):
        rm = m0 + tl.arange(0, BM)
        q_t = tl.load(q_ptr + rm[None, :] * HEAD + rd[:, None])           # [HEAD, BM]
        lse = tl.load(lse_ptr + rm)
        p_t = tl.math.exp2(tl.dot(k, q_t) - lse[None, :])                 # [BN, BM]
        if CAUSAL_BLOCK:
            p_t = tl.where(rm[None, :] >= rn[:, None], p_t, 0.0)
        do = tl.load(do_ptr + rm[:, None] * HEAD + rd[None, :])           # [BM, HEAD]
        dv += tl.dot(p_t.to(do.dtype), do)
        dp_t = tl.dot(v, tl.trans(do)).to(tl.float32)
        ds_t = p_t * (dp_t - tl.load(delta_ptr + rm)[None, :])
        dk += tl.dot(ds_t.to(q_t.dtype), tl.trans(q_t))
        m0 += BM
    return dk, dv


@triton.jit
def _dq_steps(dq, q, do, lse, delta, k_ptr, v_ptr, start_m, start_n, steps,
              HEAD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL_BLOCK: tl.constexpr):
    rm = start_m + tl.arange(0, BM)
    rd = tl.arange(0, HEAD)
    n0 = start_n
    for _ in range(steps):
        rn = n0 + tl.arange(0, BN)
        k_t = tl.load(k_ptr + rn[None, :] * HEAD + rd[:, None])
        v_t = tl.load(v_ptr + rn[None, :] * HEAD + rd[:, None])
        p = tl.math.exp2(tl.dot(q, k_t) - lse[:, None])
        if CAUSAL_BLOCK:
            p = tl.where(rm[:, None] >= rn[None, :], p, 0.0)
        ds = p * (tl.dot(do, v_t).to(tl.float32) - delta[:, None])
        dq += tl.dot(ds.to(k_t.dtype), tl.trans(k_t))
        n0 += BN
    return dq


@triton.jit
def attention_bwd_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, seq_len, sm_scale,
                         dq_ptr, dk_ptr, dv_ptr, HEAD: tl.constexpr, BLOCK: tl.constexpr, SLICE: tl.constexpr):
    """Causal attention backward; ``k`` pre-scaled by sm_scale/ln 2, ``lse`` in base 2; one key block and one query
    block of BLOCK rows per program (axis 0), one batch*head per program along axis 1."""
    pid = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    base = bh * seq_len * HEAD
    q_ptr += base
    k_ptr += base
    v_ptr += base
    do_ptr += base
    lse_ptr += bh * seq_len
    delta_ptr += bh * seq_len
    rd = tl.arange(0, HEAD)
    start = pid * BLOCK
    rows = start + tl.arange(0, BLOCK)
    tile = rows[:, None] * HEAD + rd[None, :]
    k = tl.load(k_ptr + tile)
    v = tl.load(v_ptr + tile)
    dk = tl.zeros([BLOCK, HEAD], tl.float32)
    dv = tl.zeros([BLOCK, HEAD], tl.float32)
    dk, dv = _dkdv_steps(dk, dv, q_ptr, do_ptr, lse_ptr, delta_ptr, k, v, start, start, SLICE,
                         HEAD, BLOCK // SLICE, BLOCK, True)
    after = start + BLOCK
    dk, dv = _dkdv_steps(dk, dv, q_ptr, do_ptr, lse_ptr, delta_ptr, k, v, start, after,
                         (seq_len - after) // (BLOCK // SLICE), HEAD, BLOCK // SLICE, BLOCK, False)
    tl.store(dv_ptr + base + tile, dv)
    tl.store(dk_ptr + base + tile, dk * sm_scale)
    q = tl.load(q_ptr + tile)
    do = tl.load(do_ptr + tile)
    lse = tl.load(lse_ptr + rows)
    delta = tl.load(delta_ptr + rows)
    dq = tl.zeros([BLOCK, HEAD], tl.float32)
    dq = _dq_steps(dq, q, do, lse, delta, k_ptr, v_ptr, start, start, SLICE, HEAD, BLOCK, BLOCK // SLICE, True)
    dq = _dq_steps(dq, q, do, lse, delta, k_ptr, v_ptr, start, 0, start // (BLOCK // SLICE),
                   HEAD, BLOCK, BLOCK // SLICE, False)
    tl.store(dq_ptr + base + tile, dq * 0.6931471824645996)
