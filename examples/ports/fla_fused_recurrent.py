# Launchers ported from flash-linear-attention (fla-core 0.6.0): MIT, Copyright (c) 2023-2026 Songlin Yang, Yu Zhang,
# Zhiyuan Li. The licence's full text: THIRD_PARTY_NOTICES.md.
"""flash-linear-attention (fla-core 0.6.0)'s ``fused_recurrent`` forward on JAX: the kernel
``fused_recurrent_fwd_kernel`` (heuristics + autotune, ``None`` for absent gates and states),
loaded from the installed ``fla.ops.common.fused_recurrent`` (never copied), launched by FLA's
``fused_recurrent_fwd`` ported with ``tritonplug.launch``.

Where the launcher differs from FLA's (JAX requires it):

* ``@tritonplug.torch_launcher`` hands the body torch-like handles of its arrays (``q.new_empty``) and
  returns arrays; ``torch.float32`` is ``jnp.float32``; ``o.sum(0)`` is ``jnp.sum(o[...], 0)``;
* the type hints name ``jax.Array`` instead of ``torch.Tensor``.

In a sharded ``jit`` the launcher runs on its device's shard: batch and heads may be split, time (the
recurrence scans all of it) and the key and value dims stay whole (``_recurrent_rule``). Which arrays a call
passes (gates, states, ``cu_seqlens``) sets the rule's operands, so
``@tritonplug.partitioned`` is given a function that picks each call's rule.

Differing lines (``tests/test_ports.py`` counts them, comments and blank lines aside): the launcher
changes or adds 15 of FLA's 58 lines (12 of them the signature's type hints, 1 the rule's decorator) and
drops 13.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import tritonplug

_lib = tritonplug.kernels_of("fla.ops.common.fused_recurrent")
fused_recurrent_fwd_kernel = tritonplug.launch(_lib.fused_recurrent_fwd_kernel)
_fused_recurrent_tiling = _lib._fused_recurrent_tiling


def _recurrent_rule(q, k, v, g, g_gamma, gk, gv, scale, initial_state, output_final_state, reverse, state_v_first,
                    cu_seqlens):
    """One group per array given (``None`` s are not operands). Batch ``b`` and heads ``h`` are row-local; the
    scan runs over all of time ``t`` and each head's state is ``dk x dv``: those stay whole. With ``cu_seqlens``
    the sequences are packed along ``t`` (``b`` is 1), and their states' ``n`` stays whole too."""
    n = "b" if cu_seqlens is None else "n"
    state = f"{n} h dv dk" if state_v_first else f"{n} h dk dv"
    arrays = ((q, "b t h dk"), (k, "b t h dk"), (v, "b t h dv"), (g, "b t h"), (g_gamma, "h"), (gk, "b t h dk"),
              (gv, "b t h dv"), (initial_state, state), (cu_seqlens, "m"))
    operands = [group for array, group in arrays if array is not None]
    results = ["b t h dv"] + [state] * output_final_state
    whole = ("t", "dk", "dv") + (("n",) if n == "n" and state in operands + results else ())
    return tritonplug.sharding_rule(f"{', '.join(operands)} -> {', '.join(results)}", need_replication=whole)


@tritonplug.partitioned(_recurrent_rule)
@tritonplug.torch_launcher
def fused_recurrent_fwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    g: jax.Array | None = None,
    g_gamma: jax.Array | None = None,
    gk: jax.Array | None = None,
    gv: jax.Array | None = None,
    scale: float | None = None,
    initial_state: jax.Array | None = None,
    output_final_state: bool = False,
    reverse: bool = False,
    state_v_first: bool = False,
    cu_seqlens: jax.Array | None = None,
):
    B, T, H, K, V = *k.shape, v.shape[-1]
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    BK, BV, NK, NV = _fused_recurrent_tiling(K, V)

    h0 = initial_state
    if output_final_state:
        if state_v_first:
            ht = q.new_empty(N, H, V, K, dtype=jnp.float32)
        else:
            ht = q.new_empty(N, H, K, V, dtype=jnp.float32)
    else:
        ht = None
    o = q.new_empty((NK, *v.shape) if NK > 1 else v.shape, dtype=jnp.float32)

    grid = (NV * NK * N * H,)
    fused_recurrent_fwd_kernel[grid](
        q=q,
        k=k,
        v=v,
        g=g,
        g_gamma=g_gamma,
        gk=gk,
        gv=gv,
        o=o,
        h0=h0,
        ht=ht,
        cu_seqlens=cu_seqlens,
        scale=scale,
        T=T,
        B=B,
        H=H,
        K=K,
        V=V,
        BK=BK,
        BV=BV,
        USE_G=g is not None,
        USE_G_GAMMA=g_gamma is not None,
        USE_GK=gk is not None,
        USE_GV=gv is not None,
        REVERSE=reverse,
        STATE_V_FIRST=state_v_first,
    )
    if NK > 1:
        o = jnp.sum(o[...], 0)
    return o, ht


def fused_recurrent_reference(q, k, v, g=None, scale=None, initial_state=None):
    """``h_t = exp(g_t) h_{t-1} + k_t v_t^T``, ``o_t = h_t^T (scale q_t)``, per batch and head (fp32)."""
    B, T, H, K = k.shape
    scale = K ** -0.5 if scale is None else scale
    h = jnp.zeros((B, H, K, v.shape[-1]), jnp.float32) if initial_state is None else initial_state
    gates = jnp.zeros((B, T, H), jnp.float32) if g is None else g

    def step(h, inputs):
        q_t, k_t, v_t, g_t = inputs
        h = h * jnp.exp(g_t)[..., None, None] + k_t[..., :, None] * v_t[..., None, :]
        return h, jnp.einsum("bhkv,bhk->bhv", h, q_t * scale)

    xs = tuple(jnp.moveaxis(a.astype(jnp.float32), 1, 0) for a in (q, k, v, gates))
    h, o = jax.lax.scan(step, h, xs)
    return jnp.moveaxis(o, 0, 1), h


def main(B: int = 2, T: int = 12, H: int = 2, K: int = 16, V: int = 32) -> None:
    kq, kk, kv, kg, kh = jax.random.split(jax.random.key(3), 5)
    q = jax.random.normal(kq, (B, T, H, K), jnp.float32)
    k = jax.random.normal(kk, (B, T, H, K), jnp.float32) / K
    v = jax.random.normal(kv, (B, T, H, V), jnp.float32)
    g = jax.nn.log_sigmoid(jax.random.normal(kg, (B, T, H), jnp.float32))
    h0 = jax.random.normal(kh, (B, H, K, V), jnp.float32)
    scale = K ** -0.5
    o, ht = jax.jit(lambda q, k, v: fused_recurrent_fwd(q, k, v, scale=scale))(q, k, v)
    assert ht is None
    np.testing.assert_allclose(o, fused_recurrent_reference(q, k, v, scale=scale)[0], rtol=1e-4, atol=1e-4)
    run = jax.jit(lambda q, k, v, g, h0: fused_recurrent_fwd(q, k, v, g=g, scale=scale, initial_state=h0,
                                                               output_final_state=True))
    o, ht = run(q, k, v, g, h0)
    want_o, want_h = fused_recurrent_reference(q, k, v, g=g, scale=scale, initial_state=h0)
    np.testing.assert_allclose(o, want_o, rtol=1e-4, atol=1e-4, err_msg="o")
    np.testing.assert_allclose(ht, want_h, rtol=1e-4, atol=1e-4, err_msg="final state")
    print(f"FLA fused_recurrent forward q{q.shape} v{v.shape}: o and the final state match the jnp scan, "
          f"with and without gates and states")


if __name__ == "__main__":
    main()
