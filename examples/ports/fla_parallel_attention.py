# Launchers ported from flash-linear-attention (fla-core 0.6.0): MIT, Copyright (c) 2023-2026 Songlin Yang, Yu Zhang,
# Zhiyuan Li. The licence's full text: THIRD_PARTY_NOTICES.md.
"""flash-linear-attention (fla-core 0.6.0)'s parallel (flash) attention on JAX: ``parallel_attn_fwd_kernel`` and
the backward's ``parallel_attn_bwd_kernel_preprocess`` / ``_dq`` / ``_dkv``, loaded from the installed
``fla.ops.attn.parallel`` (never copied), launched by FLA's ``parallel_attn_fwd`` / ``parallel_attn_bwd_preprocess``
/ ``parallel_attn_bwd`` ported with ``tritonplug.launch``; ``jax.custom_vjp`` as ``ParallelAttentionFunction``.

FLA's layout: q ``(B, T, HQ, K)``, k ``(B, T, H, K)``, v ``(B, T, H, V)`` with ``HQ`` a multiple of ``H``
(grouped-query attention: query head ``i`` reads key/value head ``i // (HQ // H)``). The kernels are causal
only (the forward masks ``o_q >= o_k`` and never visits later key blocks): ``attention(causal=False)`` is
refused. Varlen (``cu_seqlens``), sliding windows, gates and sinks are refused by ``attention`` too: varlen's
``prepare_chunk_indices`` and the gates' ``chunk_global_cumsum`` are torch code and other kernels; the
launchers keep FLA's lines for them (translated), untested.

Where the launchers differ from FLA's (JAX requires it):

* ``@tritonplug.torch_launcher`` hands the bodies torch-like handles of their arrays and returns arrays (in
  place of ``@dispatch('attn')``, FLA's backend switch); ``torch.empty`` / ``empty_like`` are
  ``tritonplug.empty`` / ``empty_like``, ``torch.float`` is ``jnp.float32``; the type hints name ``jax.Array``;
* ``check_shared_mem`` asks torch for the device's shared memory: here it is read off the compute capability
  JAX (or ``TRITONPLUG_CUDA_ARCH``) gives, H100's 227 KiB for sm_90; without a CUDA device it is false, as
  FLA's is on a machine without one (the smallest tiles);
* einops' ``reduce`` over the query heads of a group is ``jnp.sum`` of a reshape; ``dg_cumsum.add_`` and
  ``torch.exp2`` read the values (``[...]``) and add / exponentiate with ``jnp``.

In a sharded ``jit`` each launcher runs on its device's shard (``@tritonplug.partitioned``): batch ``b`` may be
split, and the heads too when every query head has its own key/value head; under GQA a split of the query
heads would not keep each group with its key/value head, so the heads stay whole (``_rule``). Time (causal
attention reads all earlier keys) and the head dims stay whole.

Differing lines (``tests/test_ports.py`` counts them, comments and blank lines aside): the forward launcher
changes or adds 11 of FLA's 66 lines (7 of them the signature's type hints, 2 the decorators) and drops 10;
``parallel_attn_bwd_preprocess`` changes or adds 4 of 14 and drops 3; the backward changes or adds 21 of 114
(10 type hints, 2 decorators) and drops 20 (``@dispatch``, the torch allocations, einops, ``add_``,
``torch.exp2``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import triton

import tritonplug

_lib = tritonplug.kernels_of("fla.ops.attn.parallel")
parallel_attn_fwd_kernel = tritonplug.launch(_lib.parallel_attn_fwd_kernel)
parallel_attn_bwd_kernel_preprocess = tritonplug.launch(_lib.parallel_attn_bwd_kernel_preprocess)
parallel_attn_bwd_kernel_dq = tritonplug.launch(_lib.parallel_attn_bwd_kernel_dq)
parallel_attn_bwd_kernel_dkv = tritonplug.launch(_lib.parallel_attn_bwd_kernel_dkv)


def prepare_chunk_indices(cu_seqlens, chunk_size):
    """FLA's (varlen only) is torch code: reaching it raises ``KernelImportError`` naming the torch import."""
    return _lib.prepare_chunk_indices(cu_seqlens, chunk_size)


#: FLA's ``Backend`` (shared memory per block a kernel may use) and, per compute capability, the device's
_SHARED_MEM = {"ada": 101376, "ampere": 166912, "hopper": 232448}
_DEVICE_SHARED_MEM = {70: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448,
                      100: 232448, 103: 232448, 120: 101376, 121: 101376}


def check_shared_mem(arch: str = "none", tensor_idx: int = 0) -> bool:
    """FLA's ``check_shared_mem`` without torch: whether the device has ``arch``'s shared memory or more."""
    have = _DEVICE_SHARED_MEM.get(tritonplug.get_compute_capability(tensor_idx), -1)
    return have >= _SHARED_MEM.get(arch.lower(), 102400)


def _rule(q, k, v, g_cumsum=None, sink_bias=None, cu_seqlens=None, chunk_indices=None, o=None, lse=None,
          do=None, backward=False):
    """One group per array given (``None`` s are not operands). ``hq`` is ``h`` when each query head has its
    own key/value head; under GQA both stay whole. Time ``t`` and the head dims ``d``/``e`` stay whole."""
    hq = "h" if q.shape[2] == k.shape[2] else "hq"
    arrays = ((q, f"b t {hq} d"), (k, "b t h d"), (v, "b t h e"), (o, f"b t {hq} e"), (g_cumsum, f"b t {hq}"),
              (lse, f"b t {hq}"), (do, f"b t {hq} e"), (sink_bias, hq), (cu_seqlens, "n"),
              (chunk_indices, "m two"))
    if backward:
        results = [f"b t {hq} d", "b t h d", "b t h e"] + [f"b t {hq}"] * (g_cumsum is not None)
        results += [hq] * (sink_bias is not None)  # a sum over batch and time: b's shards are added
    else:
        results = [f"b t {hq} e", f"b t {hq}"]
    operands = [group for array, group in arrays if array is not None]
    whole = ("t", "d", "e") + (("h", "hq") if hq == "hq" else ())
    whole += tuple(f for f in ("n", "m", "two") if any(f in g.split() for g in operands))
    reduce = ("b",) if backward and sink_bias is not None else ()
    return tritonplug.sharding_rule(f"{', '.join(operands)} -> {', '.join(results)}", need_replication=whole,
                                    reduction_factors=reduce)


def _fwd_rule(q, k, v, g_cumsum, sink_bias, scale, window_size, cu_seqlens, chunk_indices):
    return _rule(q, k, v, g_cumsum, sink_bias, cu_seqlens, chunk_indices)


def _bwd_rule(q, k, v, o, g_cumsum, lse, do, sink_bias, scale, window_size, chunk_size, cu_seqlens, chunk_indices):
    return _rule(q, k, v, g_cumsum, sink_bias, cu_seqlens, chunk_indices, o, lse, do, backward=True)


@tritonplug.partitioned(_fwd_rule)
@tritonplug.torch_launcher
def parallel_attn_fwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    g_cumsum: jax.Array,
    sink_bias: jax.Array | None,
    scale: float,
    window_size: int | None = None,
    cu_seqlens: jax.Array | None = None,
    chunk_indices: jax.Array | None = None,
):
    B, T, H, K, V = *k.shape, v.shape[-1]
    HQ = q.shape[2]
    G = HQ // H
    BT = 128
    if check_shared_mem('hopper', q.device.index):
        BS = min(64, max(16, triton.next_power_of_2(T)))
        BK = min(256, max(16, triton.next_power_of_2(K)))
        BV = min(256, max(16, triton.next_power_of_2(V)))
        num_warps = 8
    elif check_shared_mem('ampere', q.device.index):
        BS = min(32, max(16, triton.next_power_of_2(T)))
        BK = min(256, max(16, triton.next_power_of_2(K)))
        BV = min(128, max(16, triton.next_power_of_2(V)))
        num_warps = 4
    else:
        BS = min(32, max(16, triton.next_power_of_2(T)))
        BK = min(256, max(16, triton.next_power_of_2(K)))
        BV = min(64, max(16, triton.next_power_of_2(V)))
        num_warps = 2
    NK = triton.cdiv(K, BK)
    NV = triton.cdiv(V, BV)

    if chunk_indices is None and cu_seqlens is not None:
        chunk_indices = prepare_chunk_indices(cu_seqlens, BT)
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    assert NK == 1, "The key dimension can not be larger than 256"

    o = tritonplug.empty(B, T, HQ, V, dtype=v.dtype, device=q.device)
    lse = tritonplug.empty(B, T, HQ, dtype=jnp.float32, device=q.device)
    grid = (NV * NT, B * HQ)
    parallel_attn_fwd_kernel[grid](
        q=q,
        k=k,
        v=v,
        o=o,
        g_cumsum=g_cumsum,
        sink_bias=sink_bias,
        lse=lse,
        scale=scale,
        cu_seqlens=cu_seqlens,
        chunk_indices=chunk_indices,
        B=B,
        T=T,
        W=window_size,
        H=H,
        HQ=HQ,
        G=G,
        K=K,
        V=V,
        BT=BT,
        BS=BS,
        BK=BK,
        BV=BV,
        num_warps=num_warps,
    )
    return o, lse


@tritonplug.torch_launcher
def parallel_attn_bwd_preprocess(
    o: jax.Array,
    do: jax.Array,
):
    V = o.shape[-1]
    delta = tritonplug.empty_like(o[..., 0], dtype=jnp.float32)
    parallel_attn_bwd_kernel_preprocess[(delta.numel(),)](
        o=o,
        do=do,
        delta=delta,
        B=triton.next_power_of_2(V),
        V=V,
    )
    return delta


@tritonplug.partitioned(_bwd_rule)
@tritonplug.torch_launcher
def parallel_attn_bwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    o: jax.Array,
    g_cumsum: jax.Array,
    lse: jax.Array,
    do: jax.Array,
    sink_bias: jax.Array | None = None,
    scale: float = None,
    window_size: int | None = None,
    chunk_size: int = 128,
    cu_seqlens: jax.Array | None = None,
    chunk_indices: jax.Array | None = None,
):
    B, T, H, K, V = *k.shape, v.shape[-1]
    HQ = q.shape[2]
    G = HQ // H
    # dq/dk are reduced over the full value dim in one program (no cross-program accumulation),
    # so BV must span all of V (NV == 1). Don't cap it here -- the forward can, the backward can't.
    if check_shared_mem('hopper'):
        BT = 128
        BS = 64
        BK = max(triton.next_power_of_2(K), 16)
        BV = max(triton.next_power_of_2(V), 16)
        num_warps = 8
    elif check_shared_mem('ampere'):
        BS = 32
        BK = max(triton.next_power_of_2(K), 16)
        BV = max(triton.next_power_of_2(V), 16)
        BT = 128 if K <= 64 else 64
        num_warps = 4
    else:
        BT = 64
        BS = 32
        BK = max(triton.next_power_of_2(K), 16)
        BV = max(triton.next_power_of_2(V), 16)
        num_warps = 2

    if chunk_indices is None and cu_seqlens is not None:
        chunk_indices = prepare_chunk_indices(cu_seqlens, BT)
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    NV = triton.cdiv(V, BV)

    delta = parallel_attn_bwd_preprocess(o, do)

    dq = tritonplug.empty(B, T, HQ, K, dtype=k.dtype if H == HQ else jnp.float32, device=q.device)
    dk = tritonplug.empty(B, T, HQ, K, dtype=k.dtype if H == HQ else jnp.float32, device=q.device)
    dv = tritonplug.empty(B, T, HQ, V, dtype=v.dtype if H == HQ else jnp.float32, device=q.device)
    grid = (NV * NT, B * HQ)

    dg_cumsum, dg_cumsum_k = None, None
    if g_cumsum is not None:
        dg_cumsum = tritonplug.empty(B, T, HQ, dtype=jnp.float32, device=q.device)
        dg_cumsum_k = tritonplug.empty(B, T, HQ, dtype=jnp.float32, device=q.device)

    parallel_attn_bwd_kernel_dq[grid](
        q=q,
        k=k,
        v=v,
        g_cumsum=g_cumsum,
        lse=lse,
        delta=delta,
        do=do,
        dq=dq,
        dg_cumsum=dg_cumsum,
        cu_seqlens=cu_seqlens,
        chunk_indices=chunk_indices,
        scale=scale,
        T=T,
        W=window_size,
        B=B,
        H=H,
        HQ=HQ,
        G=G,
        K=K,
        V=V,
        BT=BT,
        BS=BS,
        BK=BK,
        BV=BV,
        num_warps=num_warps,
    )
    parallel_attn_bwd_kernel_dkv[grid](
        q=q,
        k=k,
        v=v,
        g_cumsum=g_cumsum,
        lse=lse,
        delta=delta,
        do=do,
        dk=dk,
        dv=dv,
        dg_cumsum=dg_cumsum_k,
        cu_seqlens=cu_seqlens,
        chunk_indices=chunk_indices,
        scale=scale,
        T=T,
        W=window_size,
        B=B,
        H=H,
        HQ=HQ,
        G=G,
        K=K,
        V=V,
        BT=BT,
        BS=BS,
        BK=BK,
        BV=BV,
        num_warps=num_warps,
    )
    dk = jnp.sum(dk[...].reshape(B, T, H, G, K), 3)  # reduce(dk, 'b t (h g) k -> b t h k', g=G, reduction='sum')
    dv = jnp.sum(dv[...].reshape(B, T, H, G, V), 3)  # reduce(dv, 'b t (h g) v -> b t h v', g=G, reduction='sum')
    if g_cumsum is not None:
        dg_cumsum = dg_cumsum[...] + dg_cumsum_k[...]

    dsink_bias = None
    if sink_bias is not None:
        p_sink_bias = jnp.exp2(sink_bias[...][None, None, :] - lse[...])
        dsink_bias = -(p_sink_bias * delta).sum((0, 1))

    return dq, dk, dv, dg_cumsum, dsink_bias


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *, scale: float | None = None, causal: bool = True,
              g: jax.Array | None = None, window_size: int | None = None, cu_seqlens: jax.Array | None = None,
              sink_bias: jax.Array | None = None) -> jax.Array:
    """FLA's ``parallel_attn(q, k, v, scale=scale)``: causal softmax attention, q ``(B, T, HQ, K)``, k
    ``(B, T, H, K)``, v ``(B, T, H, V)`` (GQA when ``H`` divides ``HQ``), ``scale`` by default ``K ** -0.5``;
    returns o ``(B, T, HQ, V)`` in q's dtype, differentiable in q, k and v. ``g``, ``window_size``,
    ``cu_seqlens`` and ``sink_bias`` (FLA's options) and ``causal=False`` are refused (see the module)."""
    refused = {"g": g, "window_size": window_size, "cu_seqlens": cu_seqlens, "sink_bias": sink_bias}
    given = [name for name, value in refused.items() if value is not None]
    if given:
        raise NotImplementedError(f"fla_parallel_attention.attention: {', '.join(given)} not ported (FLA's "
                                  "gates, sliding window, varlen and sinks need more of FLA than these kernels)")
    if not causal:
        raise NotImplementedError("fla_parallel_attention.attention: FLA's parallel attention kernels are causal "
                                  "only (no key after the query is ever visited); causal=False is not available")
    if q.ndim != 4 or k.shape != v.shape[:3] + k.shape[3:] or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"attention: want q (B, T, HQ, K), k (B, T, H, K), v (B, T, H, V); got q {q.shape}, "
                         f"k {k.shape}, v {v.shape}")
    HQ, H = q.shape[2], k.shape[2]
    if H == 0 or HQ % H != 0:
        raise ValueError(f"The number of query heads ({HQ}) must be divisible by the number of key/value heads ({H}).")
    return _attention(q, k, v, k.shape[-1] ** -0.5 if scale is None else float(scale))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _attention(q, k, v, scale):
    return _fwd(q, k, v, scale)[0]


def _fwd(q, k, v, scale):
    o, lse = parallel_attn_fwd(q=q, k=k, v=v, g_cumsum=None, sink_bias=None, scale=scale)  # as FLA calls it
    return o.astype(q.dtype), (q, k, v, o, lse)


def _bwd(scale, res, do):
    q, k, v, o, lse = res
    dq, dk, dv, _, _ = parallel_attn_bwd(q, k, v, o, None, lse, do, None, scale)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


_attention.defvjp(_fwd, _bwd)


def attention_reference(q, k, v, scale=None):
    """Causal softmax attention in fp32, each query head reading key/value head ``i // (HQ // H)``."""
    G = q.shape[2] // k.shape[2]
    scale = k.shape[-1] ** -0.5 if scale is None else scale
    k, v = (jnp.repeat(a.astype(jnp.float32), G, axis=2) for a in (k, v))
    s = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k) * scale
    T = q.shape[1]
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, axis=-1), v).astype(q.dtype)


def main(B: int = 2, T: int = 40, HQ: int = 4, H: int = 2, K: int = 16) -> None:
    kq, kk, kv, kd = jax.random.split(jax.random.key(7), 4)
    q = jax.random.normal(kq, (B, T, HQ, K), jnp.float32)
    k = jax.random.normal(kk, (B, T, H, K), jnp.float32)
    v = jax.random.normal(kv, (B, T, H, K), jnp.float32)
    do = jax.random.normal(kd, q.shape, jnp.float32)
    np.testing.assert_allclose(jax.jit(attention)(q, k, v), attention_reference(q, k, v), rtol=1e-5, atol=1e-5)
    got = jax.jit(jax.grad(lambda q, k, v: jnp.sum(attention(q, k, v) * do), argnums=(0, 1, 2)))(q, k, v)
    want = jax.grad(lambda q, k, v: jnp.sum(attention_reference(q, k, v) * do), argnums=(0, 1, 2))(q, k, v)
    for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)
    print(f"FLA parallel attention q{q.shape} k{k.shape} (GQA): o, dq, dk and dv match jax.grad of causal "
          "softmax attention in jnp")


if __name__ == "__main__":
    main()
