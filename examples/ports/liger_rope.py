# Launchers ported from Liger-Kernel 0.8.5: BSD-2-Clause, Copyright 2024 LinkedIn Corporation, All Rights Reserved.
# Its conditions, and the licence's full text and disclaimer: THIRD_PARTY_NOTICES.md.
"""Liger-Kernel 0.8.5's RoPE (rotary position embedding, HF Llama layout) on JAX: ``_triton_rope``,
loaded from the installed ``liger_kernel.ops.rope`` (never copied), rotating ``q`` and ``k`` in place,
launched by Liger's launchers ported with ``tritonplug.launch``; ``jax.custom_vjp``.

Where the launchers differ from Liger's ``rope_forward`` / ``rope_backward`` (JAX requires it): only in
``@tritonplug.torch_launcher(writes=(...))``, which hands the bodies torch-like handles of their arrays
(``.transpose``, ``.squeeze``, ``.unsqueeze``, ``.contiguous``, ``.stride``), ``q``/``k`` (``dq``/``dk``)
over ``jax.new_ref`` s since the kernel rotates them in place, and returns arrays. ``transpose`` is a
copy in JAX (no strided views); inside ``jit``, XLA folds it with the caller's own transposes (a model
that holds ``q`` as (batch, seq, heads, dim) and swaps axes for the Hugging Face layout).

In a sharded ``jit`` each launcher runs on its device's shard: batch, heads and positions may be split, the
head dim and the rotary width stay whole (``_rope_rule``). The rule depends on the call (whether cos/sin have
a row per batch row, whether k has q's heads), so
``@tritonplug.partitioned`` is given a function that picks each call's rule.

Differing lines (``tests/test_ports.py`` counts them, comments and blank lines aside): each launcher
changes or adds 2 of Liger's 54 lines (the two decorators) and drops none.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import triton

import tritonplug

_lib = tritonplug.kernels_of("liger_kernel.ops.rope")
# inline="auto": launched, or inlined as XLA ops where tritonplug.tune measured that faster (docs/using.md)
_triton_rope = tritonplug.launch(tritonplug.set_inline(_lib._triton_rope, "auto"))
_resolve_rotary_dim = _lib._resolve_rotary_dim


def _rope_rule(backward):
    """Batch ``b``, heads ``h`` and positions ``s`` are row-local (the kernel rotates each (batch, position) row
    of every head with that position's cos/sin row); the head dim ``d`` and the rotary width ``r`` stay whole
    (the rotation pairs a row's two halves). cos/sin's batch is ``b`` when it is q's (the kernel then reads each
    batch row's own positions, which must split with q's), else 1; k's heads are q's ``h`` when there are as
    many (no GQA), so that both split over the same mesh axis."""
    def rule(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
        c = "b" if cos.ndim > 2 and cos.shape[0] == q.shape[0] else "c"
        table = [c, "s", "r"] if cos.ndim > 2 else ["s", "r"]
        if cos.ndim == 4:  # with a size-1 heads axis, which the launcher squeezes
            table.insert(unsqueeze_dim if cos.shape[unsqueeze_dim] == 1 else 1, "u")
        returned = f"{c if cos.ndim > 2 else 'u'} s r"  # cos/sin as the forward returns them: 3-d
        qk = "b h s d, b " + ("h" if k.shape[1] == q.shape[1] else "hk") + " s d"
        operands = [qk, " ".join(table), " ".join(table)] + ["...1"] * (position_ids is not None)
        results = [qk] + ([] if backward else [returned, returned])
        return tritonplug.sharding_rule(f"{', '.join(operands)} -> {', '.join(results)}", need_replication=("d", "r"))
    return rule


@tritonplug.partitioned(_rope_rule(backward=False))
@tritonplug.torch_launcher(writes=("q", "k"))
def rope_forward(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
    # Support 2D, 3D, and 4D cos/sin shapes
    if cos.ndim == 4:
        if cos.shape[unsqueeze_dim] == 1:
            cos = cos.squeeze(unsqueeze_dim)
            sin = sin.squeeze(unsqueeze_dim)
        elif cos.shape[1] == 1:
            cos = cos.squeeze(1)
            sin = sin.squeeze(1)
        else:
            cos = cos.squeeze()
            sin = sin.squeeze()
    if cos.ndim == 2:
        cos = cos.unsqueeze(0)
        sin = sin.unsqueeze(0)

    # transpose it back to the physical shape because Triton looks at the physical storage
    # note: q and k are incontiguous before the transformation and will become contiguous after transpose
    q = q.transpose(1, 2)
    k = k.transpose(1, 2)

    batch_size, seq_len, n_q_head, head_dim = q.shape
    n_kv_head = k.shape[2]
    rotary_dim = _resolve_rotary_dim(cos, head_dim, rotary_dim)

    pad_hd = triton.next_power_of_2(head_dim)
    pad_rd = triton.next_power_of_2(rotary_dim)
    pad_n_q_head = triton.next_power_of_2(n_q_head)
    pad_n_kv_head = triton.next_power_of_2(n_kv_head)
    BLOCK_SIZE = max(pad_n_q_head, pad_n_kv_head)

    n_row = batch_size * seq_len

    # ensure tensors passed into the kernel are contiguous. It will be no-op if they are already contiguous
    q = q.contiguous()
    k = k.contiguous()
    cos = cos.contiguous()
    sin = sin.contiguous()
    cos_batch_size = cos.shape[0]

    _triton_rope[(n_row,)](
        q,
        q.stride(1),
        k,
        k.stride(1),
        cos,
        cos.stride(-2),
        sin,
        sin.stride(-2),
        seq_len,
        batch_size,
        cos_batch_size,
        n_q_head,
        n_kv_head,
        head_dim,
        pad_n_q_head,
        pad_n_kv_head,
        pad_hd,
        pad_rd,
        rotary_dim,
        BLOCK_SIZE=BLOCK_SIZE,
        BACKWARD_PASS=False,
    )
    return q.transpose(1, 2), k.transpose(1, 2), cos, sin


@tritonplug.partitioned(_rope_rule(backward=True))
@tritonplug.torch_launcher(writes=("dq", "dk"))
def rope_backward(dq, dk, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
    if cos.ndim == 4:
        if cos.shape[unsqueeze_dim] == 1:
            cos = cos.squeeze(unsqueeze_dim)
            sin = sin.squeeze(unsqueeze_dim)
        elif cos.shape[1] == 1:
            cos = cos.squeeze(1)
            sin = sin.squeeze(1)
        else:
            cos = cos.squeeze()
            sin = sin.squeeze()
    if cos.ndim == 2:
        cos = cos.unsqueeze(0)
        sin = sin.unsqueeze(0)

    dq = dq.transpose(1, 2)
    dk = dk.transpose(1, 2)

    batch_size, seq_len, n_q_head, head_dim = dq.shape
    cos_batch_size = cos.shape[0]
    n_kv_head = dk.shape[2]
    rotary_dim = _resolve_rotary_dim(cos, head_dim, rotary_dim)

    pad_hd = triton.next_power_of_2(head_dim)
    pad_rd = triton.next_power_of_2(rotary_dim)
    pad_n_q_head = triton.next_power_of_2(n_q_head)
    pad_n_kv_head = triton.next_power_of_2(n_kv_head)
    BLOCK_SIZE = max(pad_n_q_head, pad_n_kv_head)

    n_row = batch_size * seq_len

    # ensure dq and dk are contiguous
    dq = dq.contiguous()
    dk = dk.contiguous()
    cos = cos.contiguous()
    sin = sin.contiguous()

    # backward is similar to forward except swapping few ops
    _triton_rope[(n_row,)](
        dq,
        dq.stride(1),
        dk,
        dk.stride(1),
        cos,
        cos.stride(-2),
        sin,
        sin.stride(-2),
        seq_len,
        batch_size,
        cos_batch_size,
        n_q_head,
        n_kv_head,
        head_dim,
        pad_n_q_head,
        pad_n_kv_head,
        pad_hd,
        pad_rd,
        rotary_dim,
        BLOCK_SIZE=BLOCK_SIZE,
        BACKWARD_PASS=True,
    )
    return dq.transpose(1, 2), dk.transpose(1, 2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def liger_rope(q, k, cos, sin, rotary_dim=None):
    """``LigerRopeFunction.apply(q, k, cos, sin)``: q (bsz, n_q_head, seq, hd), k (bsz, n_kv_head, seq, hd)."""
    return rope_forward(q, k, cos, sin, rotary_dim=rotary_dim)[:2]


def _fwd(q, k, cos, sin, rotary_dim):
    q, k, cos2, sin2 = rope_forward(q, k, cos, sin, rotary_dim=rotary_dim)
    return (q, k), (cos, sin, cos2, sin2)


def _bwd(rotary_dim, res, grads):
    cos, sin, cos2, sin2 = res
    dq, dk = rope_backward(*grads, cos2, sin2, rotary_dim=rotary_dim)
    return dq, dk, jnp.zeros_like(cos), jnp.zeros_like(sin)


liger_rope.defvjp(_fwd, _bwd)


def rope_reference(q, k, cos, sin):
    """HF Llama's ``apply_rotary_pos_emb`` with ``unsqueeze_dim=1``."""
    cos, sin = cos[:, None], sin[:, None]

    def rotate_half(x):
        half = x.shape[-1] // 2
        return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def main(bsz: int = 2, seq: int = 8, n_q: int = 4, n_kv: int = 2, hd: int = 16) -> None:
    kq, kk, kd1, kd2 = jax.random.split(jax.random.key(2), 4)
    q = jax.random.normal(kq, (bsz, n_q, seq, hd), jnp.float32)
    k = jax.random.normal(kk, (bsz, n_kv, seq, hd), jnp.float32)
    freqs = jnp.arange(seq, dtype=jnp.float32)[:, None] / (100.0 ** (jnp.arange(hd // 2) / (hd // 2)))
    emb = jnp.concatenate([freqs, freqs], axis=-1)[None]
    cos, sin = jnp.cos(emb), jnp.sin(emb)
    got, want = jax.jit(liger_rope)(q, k, cos, sin), rope_reference(q, k, cos, sin)
    for name, g, w in zip(("q", "k"), got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)
    dq_, dk_ = jax.random.normal(kd1, q.shape), jax.random.normal(kd2, k.shape)
    loss = lambda fn: lambda q, k: sum(jnp.sum(o * d) for o, d in zip(fn(q, k, cos, sin), (dq_, dk_), strict=True))  # noqa: E731
    got = jax.jit(jax.grad(loss(liger_rope), argnums=(0, 1)))(q, k)
    want = jax.grad(loss(rope_reference), argnums=(0, 1))(q, k)
    for name, g, w in zip(("dq", "dk"), got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)
    print(f"Liger RoPE q{q.shape} k{k.shape}: q, k, dq and dk match jax.grad of the jnp reference")


if __name__ == "__main__":
    main()
