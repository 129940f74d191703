"""Mamba-2's state-space duality (SSD) layer in plain ``jnp``: the baseline the Triton port is measured against.

:func:`ssd` takes ``mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined``'s arguments and computes its
result: with ``dt' = clip(softplus(dt + dt_bias))`` (softplus only when ``dt_softplus``) and per head ``h``

    state_t = exp(dt'_t A_h) state_{t-1} + dt'_t x_t B_t^T        (p x n per head; B and C shared by a group)
    y_t     = state_t C_t + D_h x_t,  then  y_t * silu(z_t)  when ``z`` is given.

It is computed the chunked way (the Mamba-2 paper's ``ssd_minimal_discrete``, arranged for XLA): the sequence cut
into chunks of ``chunk_size``; inside a chunk the quadratic (attention-like) form, a ``(chunk, chunk)`` matrix per
head; across chunks a recurrence on the chunk states, itself done as one small ``(chunks, chunks)`` matmul. Nothing
of size ``seq x seq`` exists. Precision follows mamba-ssm's kernels: ``dt``, its cumulative sums and every decay in
fp32; the matmul operands in the inputs' dtype (bf16) with fp32 accumulation (``C B^T`` kept in fp32, the decayed
scores, the chunk states passed to the output and the decayed inputs cast to the inputs' dtype before their
matmul, as the kernels cast them); the output in ``x``'s dtype. Groups (``B``/``C`` shared by ``heads / groups``
heads) stay a dimension of their own: no per-head copy of ``B`` or ``C``.

Autodiff gives the backward. The core runs under ``jax.checkpoint`` keeping only matmul results: the
``(chunk, chunk)`` decays and scores, elementwise in a few small arrays, are recomputed in the backward rather
than stored, which is both leaner and, on a GPU, no slower than reading them back. Past :data:`WITHIN_ELEMENTS`
the chunks' quadratic part goes in steps, so that the backward's working set does not grow with the sequence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp

F32 = jnp.float32


def ssd(x, dt, A, B, C, chunk_size: int, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
        cu_seqlens=None, dt_softplus: bool = False, dt_limit: Sequence[float] = (0.0, float("inf")),
        return_final_states: bool = False, return_varlen_states: bool = False):
    """``y`` ``(batch, seq, heads, head_dim)`` in ``x``'s dtype, or ``(y, final_states)`` with
    ``return_final_states`` (``(b, h, p, n)`` fp32: the state after the last step); the arguments as
    ``mamba_chunk_scan_combined``'s, in its order: ``x`` ``(b, l, h, p)``, ``dt`` ``(b, l, h)``, ``A`` ``(h,)``,
    ``B``/``C`` ``(b, l, g, n)`` with ``h % g == 0``, ``D`` ``(h,)`` or ``(h, p)``, ``z`` like ``x``, ``dt_bias``
    ``(h,)``, ``initial_states`` ``(b, h, p, n)`` (the state before the first step; default zeros), ``seq_idx``
    ``(b, l)`` integers: sequences packed in a row, each step's id, non-decreasing (the state restarts from zero
    where the id changes; the initial states are id 0's, as mamba-ssm's kernels take them). ``l`` need not be a
    multiple of ``chunk_size``. ``return_varlen_states`` is not supported (``cu_seqlens``, read only for it, is
    ignored, as by mamba-ssm). Bad arguments
    raise ``ValueError`` naming the argument, before anything is computed."""
    lo, hi = _check(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_limit)
    _check_states(x, B, initial_states, seq_idx, return_final_states, return_varlen_states)
    b, seq, h, p = x.shape
    g, n = B.shape[2:]
    step = _dt(dt, dt_bias, dt_softplus, lo, hi)
    pad = -seq % chunk_size
    if pad:  # padded steps have dt' = 0: they neither decay the state nor add to it
        x, step, B, C = (jnp.pad(a, [(0, 0), (0, pad)] + [(0, 0)] * (a.ndim - 2)) for a in (x, step, B, C))
    chunks = (seq + pad) // chunk_size
    if seq_idx is not None:  # the padding continues the last sequence
        seq_idx = jnp.pad(jnp.asarray(seq_idx, jnp.int32), [(0, 0), (0, pad)], mode="edge")
        seq_idx = seq_idx.reshape(b, chunks, chunk_size)
    r = h // g
    xc = x.reshape(b, chunks, chunk_size, g, r, p)
    Bc = B.reshape(b, chunks, chunk_size, g, n)
    Cc = C.reshape(b, chunks, chunk_size, g, n)
    # dt' and the decays' cumulative sums as (b, chunks, g, r, chunk): the time axis last, next to the matmuls'
    step = jnp.moveaxis(step.reshape(b, chunks, chunk_size, g, r), 2, -1)
    init = None if initial_states is None else initial_states.astype(F32).reshape(b, g, r, p, n)
    y, final = _chunked(xc, step, A.astype(F32).reshape(g, r), Bc, Cc, init, seq_idx, bool(return_final_states))
    y = y.reshape(b, chunks * chunk_size, h, p)[:, :seq]
    x = x[:, :seq]
    if D is not None:
        D = D.astype(F32)
        y = y + x.astype(F32) * (D[:, None] if D.ndim == 1 else D)
    if z is not None:
        y = y * jax.nn.silu(z.astype(F32))
    return (y.astype(x.dtype), final.reshape(b, h, p, n)) if return_final_states else y.astype(x.dtype)


def _dt(dt, dt_bias, softplus: bool, lo: float, hi: float) -> jax.Array:
    """``dt'`` in fp32: ``dt + dt_bias``, softplus'd (linear above 20, as mamba-ssm's kernel), clipped to
    ``[lo, hi]`` with a zero gradient where clipped."""
    step = dt.astype(F32)
    if dt_bias is not None:
        step = step + dt_bias.astype(F32)
    if softplus:
        step = jnp.where(step <= 20.0, jax.nn.softplus(jnp.minimum(step, 20.0)), step)
    if lo > -math.inf or hi < math.inf:
        step = jnp.where(step < lo, lo, jnp.where(step > hi, hi, step))
    return step


def _chunked_core(xc, step, A, Bc, Cc, init, seq, final: bool):
    """The SSD of chunked inputs: ``xc`` ``(b, c, L, g, r, p)``, ``step`` ``(b, c, g, r, L)`` fp32, ``A`` ``(g, r)``
    fp32, ``Bc``/``Cc`` ``(b, c, L, g, n)``, ``init`` ``(b, g, r, p, n)`` fp32 or None, ``seq`` ``(b, c, L)``
    int32 sequence ids or None; ``(y, last)``: ``y`` ``(b, c, L, g, r, p)`` fp32 without ``D`` and ``z``, and with
    ``final`` the state after the last chunk ``(b, g, r, p, n)`` fp32 (else None).

    With ``seq`` (non-decreasing) a term links two steps only within one sequence: a chunk's state holds only its
    last sequence's steps, a chunk state reaches a later chunk only if that chunk's predecessor ends in the same
    sequence, and a step reads the state entering its chunk only if it continues the sequence the previous chunk
    ended in (id 0 before the first chunk: the initial states')."""
    dtype = xc.dtype
    cum = jnp.cumsum(step * A[..., None], axis=-1)  # (b, c, g, r, L): within-chunk cumulative log-decay
    y = _within_chunks(xc, step, cum, Bc, Cc, seq)
    # each chunk's own contribution to the state at its end: sum_s exp(cum_last - cum_s) dt'_s x_s B_s^T
    to_end = jnp.moveaxis(jnp.exp(cum[..., -1:] - cum) * step, -1, 2)  # (b, c, L, g, r)
    if seq is not None:
        to_end = jnp.where((seq == seq[..., -1:])[..., None, None], to_end, 0.0)
    decayed = (xc * to_end[..., None]).astype(dtype)
    states = jnp.einsum("bclgn,bclgrp->bcgrpn", Bc, decayed, preferred_element_type=F32)
    # the state entering chunk k: sum_{j < k} exp(total_{j+1} + ... + total_{k-1}) states_j, as one matmul
    totals = jnp.moveaxis(cum[..., -1], 1, -1)  # (b, g, r, c): each chunk's log-decay
    decays = _chunk_decays(totals)
    if seq is not None:
        ends = seq[..., -1]  # (b, c): the sequence each chunk ends in
        before_ends = jnp.pad(ends[:, :-1], [(0, 0), (1, 0)])  # the chunk before's (0 before the first)
        # [k, j]: chunk j's state reaches chunk k where chunk k - 1 ends in j's sequence
        decays = jnp.where((before_ends[:, :, None] == ends[:, None, :])[:, None, None], decays, 0.0)
    entering = jnp.einsum("bgrkj,bjgrpn->bkgrpn", decays, states, preferred_element_type=F32)
    last = None
    if final:  # the state after chunk c-1: sum_j exp(totals[j+1] + ... + totals[c-1]) states_j
        after = jnp.exp(jnp.flip(_exclusive_cumsum(jnp.flip(totals, -1)), -1))  # the chunks after j, summed
        if seq is not None:
            after = jnp.where((ends == ends[:, -1:])[:, None, None], after, 0.0)
        last = jnp.einsum("bgrj,bjgrpn->bgrpn", after, states, preferred_element_type=F32)
    if init is not None:  # the initial state, decayed by every chunk before
        before = jnp.exp(_exclusive_cumsum(totals))  # (b, g, r, c)
        through = jnp.exp(jnp.sum(totals, -1))  # (b, g, r)
        if seq is not None:  # id 0's
            before = jnp.where((before_ends == 0)[:, None, None], before, 0.0)
            through = jnp.where((ends[:, -1] == 0)[:, None, None], through, 0.0)
        entering = entering + jnp.moveaxis(before, -1, 1)[..., None, None] * init[:, None]
        last = None if last is None else last + through[..., None, None] * init
    y_in = jnp.einsum("bclgn,bcgrpn->bclgrp", Cc, entering.astype(Cc.dtype), preferred_element_type=F32)
    reads = jnp.moveaxis(jnp.exp(cum), -1, 2)  # (b, c, L, g, r)
    if seq is not None:
        reads = jnp.where((seq == before_ends[..., None])[..., None, None], reads, 0.0)
    return y + y_in * reads[..., None], last


def _exclusive_cumsum(totals: jax.Array) -> jax.Array:
    """``[..., k] = totals[..., 0] + ... + totals[..., k-1]`` (0 at ``k = 0``), each a sum of its own terms."""
    return jnp.concatenate([jnp.zeros_like(totals[..., :1]), jnp.cumsum(totals[..., :-1], axis=-1)], axis=-1)


_chunked = jax.checkpoint(_chunked_core, policy=jax.checkpoint_policies.dots_saveable, static_argnums=(7,))

#: The ``(chunk, chunk)`` tensors of the quadratic part hold at most this many elements at a time (over the batch,
#: the heads and the chunks done together): beyond it the chunks are done in that many steps (``lax.map``), each
#: step's backward recomputing its own, so that the backward's working set stays bounded as the sequence grows.
#: At 64 heads, chunk 256 and 2 sequences this is 8 chunks (2048 steps of the sequence) at a time.
WITHIN_ELEMENTS = 1 << 26


def _within_chunks(xc, step, cum, Bc, Cc, seq):
    """Each chunk's output from its own inputs: ``y[l] = sum_{s <= l} (C_l . B_s) exp(cum_l - cum_s) dt'_s x_s``,
    fp32 ``(b, c, L, g, r, p)``; in steps of :data:`WITHIN_ELEMENTS` where the chunks are many."""
    b, c, L, g, r, _ = xc.shape
    per_chunk = b * g * r * L * L
    together = max(1, min(c, WITHIN_ELEMENTS // per_chunk))
    while c % together:
        together -= 1
    if together == c:
        return _quadratic(xc, step, cum, Bc, Cc, seq)
    steps = c // together

    def split(a):  # (b, c, ...) -> (steps, b, together, ...)
        return jnp.moveaxis(a.reshape(b, steps, together, *a.shape[2:]), 1, 0)

    y = jax.lax.map(lambda args: jax.checkpoint(_quadratic)(*args),
                    (split(xc), split(step), split(cum), split(Bc), split(Cc), None if seq is None else split(seq)))
    return jnp.moveaxis(y, 0, 1).reshape(xc.shape)


def _quadratic(xc, step, cum, Bc, Cc, seq):
    """:func:`_within_chunks` of chunks done together: the ``(chunk, chunk)`` decayed scores, one matmul (with
    ``seq``, only steps of one sequence see each other)."""
    L = xc.shape[2]
    scores = jnp.einsum("bclgn,bcsgn->bcgls", Cc, Bc, preferred_element_type=F32)
    causal = jnp.arange(L)[:, None] >= jnp.arange(L)[None, :]
    if seq is not None:
        causal = causal & (seq[..., :, None] == seq[..., None, :])[:, :, None, None]  # (b, c, 1, 1, L, L)
    gap = jnp.where(causal, cum[..., :, None] - cum[..., None, :], -jnp.inf)  # masked before exp: no inf * 0
    weights = (scores[:, :, :, None] * jnp.exp(gap) * step[..., None, :]).astype(xc.dtype)  # (b, c, g, r, L, L)
    return jnp.einsum("bcgrls,bcsgrp->bclgrp", weights, xc, preferred_element_type=F32)


def _chunk_decays(totals: jax.Array) -> jax.Array:
    """``(..., c, c)``: ``[k, j] = exp(totals[j+1] + ... + totals[k-1])`` for ``j < k``, else 0, from the chunks'
    log-decays ``totals`` ``(..., c)``. Each entry is a sum of its own terms (a masked cumulative sum), not a
    difference of two long prefix sums, which would lose the small sums of nearby chunks to rounding."""
    c = totals.shape[-1]
    k, j = jnp.arange(c)[:, None], jnp.arange(c)[None, :]
    # terms[..., i, j] = totals[i] for j < i < k: cumulative over i, then read at i = k - 1
    terms = jnp.where(j < k, totals[..., :, None], 0.0)  # [..., i, j] = totals[i] where j < i
    sums = jnp.cumsum(terms, axis=-2)  # [..., i, j] = sum of totals[j+1..i]
    before = jnp.concatenate([jnp.zeros_like(sums[..., :1, :]), sums[..., :-1, :]], axis=-2)  # sum to k - 1
    return jnp.where(j < k, jnp.exp(before), 0.0)  # before is 0 where masked: no overflow to hide


def _check_states(x, B, initial_states, seq_idx, return_final_states, return_varlen_states) -> None:
    """``initial_states``' shape and dtype; the options this SSD does not have refused, each by its name."""
    if return_varlen_states:  # mamba-ssm reads cu_seqlens only for these, and so ignores it here too
        raise NotImplementedError(f"ssd: `return_varlen_states` is not supported (the port has it: "
                                  f"examples/ports/mamba_ssd.py), got {return_varlen_states!r}")
    if seq_idx is not None and (getattr(seq_idx, "shape", None) != x.shape[:2]
                                or not jnp.issubdtype(seq_idx.dtype, jnp.integer)):
        raise ValueError(f"ssd: `seq_idx` must be integers of shape {x.shape[:2]} (batch, seq), got "
                         f"{getattr(seq_idx, 'shape', type(seq_idx).__name__)} {getattr(seq_idx, 'dtype', '')}")
    if not isinstance(return_final_states, bool):
        raise ValueError(f"ssd: `return_final_states` must be a bool, got {return_final_states!r}")
    if initial_states is None:
        return
    want = (x.shape[0], x.shape[2], x.shape[3], B.shape[3])
    if getattr(initial_states, "shape", None) != want:
        raise ValueError(f"ssd: `initial_states` must be shape {want} (batch, heads, head_dim, state), got "
                         f"{getattr(initial_states, 'shape', type(initial_states).__name__)}")
    if not jnp.issubdtype(initial_states.dtype, jnp.floating):
        raise ValueError(f"ssd: `initial_states` must be a floating-point array, got dtype {initial_states.dtype}")


def _check(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_limit) -> tuple[float, float]:
    """Each argument's shape against ``x``'s and ``B``'s; the clip bounds as floats."""
    def fail(name: str, expected: str, got) -> None:
        raise ValueError(f"ssd: `{name}` must be {expected}, got {got}")

    if getattr(x, "ndim", None) != 4:
        fail("x", "(batch, seq, heads, head_dim)", f"shape {getattr(x, 'shape', type(x).__name__)}")
    b, seq, h, p = x.shape
    if getattr(B, "ndim", None) != 4 or B.shape[:2] != (b, seq):
        fail("B", f"(batch, seq, groups, state) = ({b}, {seq}, g, n)", f"shape {getattr(B, 'shape', None)}")
    g = B.shape[2]
    if g == 0 or h % g:
        fail("B", f"groups dividing the {h} heads", f"{g} groups")
    expected = {"dt": (b, seq, h), "A": (h,), "C": B.shape, "z": x.shape, "dt_bias": (h,)}
    for name, value in (("dt", dt), ("A", A), ("C", C), ("z", z), ("dt_bias", dt_bias)):
        if (value is not None or name in ("dt", "A", "C")) and getattr(value, "shape", None) != expected[name]:
            fail(name, f"shape {expected[name]}", f"shape {getattr(value, 'shape', type(value).__name__)}")
    if D is not None and getattr(D, "shape", None) not in ((h,), (h, p)):
        fail("D", f"shape ({h},) or ({h}, {p})", f"shape {getattr(D, 'shape', type(D).__name__)}")
    for name, value in (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D), ("z", z),
                        ("dt_bias", dt_bias)):
        if value is not None and not jnp.issubdtype(value.dtype, jnp.floating):
            fail(name, "a floating-point array", f"dtype {value.dtype}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        fail("chunk_size", "a positive int", repr(chunk_size))
    try:
        lo, hi = (float(v) for v in dt_limit)
    except (TypeError, ValueError):
        fail("dt_limit", "a pair of numbers (low, high)", repr(dt_limit))
    if not lo <= hi:
        fail("dt_limit", "(low, high) with low <= high", repr(dt_limit))
    return lo, hi
