"""flash-linear-attention (``fla-core`` 0.6.0): the launches of ``fused_recurrent_fwd``/``_bwd``
(``fla.ops.common.fused_recurrent``, heuristics over ``None`` gates and states), the chunked cumsums of
``fla.ops.utils.cumsum`` (``scale=None``, ``cu_seqlens=None``, grids reading ``meta['S']``), softmax and
l2norm — every argument by keyword, as FLA's launchers pass them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from corpus.spec import Buf, Launch, cdiv, next_power_of_2, randn, rng

B, T, H, K, V = 2, 6, 2, 16, 32
SCALE = K ** -0.5


def recurrent(q, k, v, gk, h0):
    """o_t = scale * q_t S_t with S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T, per (batch, head); returns (o, S_T)."""
    def step(state, inputs):
        q_t, k_t, v_t, g_t = inputs
        state = state * jnp.exp(g_t)[..., None] + k_t[..., :, None] * v_t[..., None, :]
        return state, jnp.einsum("bhk,bhkv->bhv", q_t * SCALE, state)

    time_major = [jnp.moveaxis(a, 1, 0) for a in (q, k, v, gk)]
    final, o = jax.lax.scan(step, h0, time_major)
    return jnp.moveaxis(o, 0, 1), final


def fused_recurrent_entries() -> list[Launch]:
    g = rng(11)
    q, k, v = randn(g, B, T, H, K), randn(g, B, T, H, K), randn(g, B, T, H, V)
    gk = (-np.abs(randn(g, B, T, H, K)) * 0.1).astype(np.float32)
    h0, do, dht = randn(g, B, H, K, V), randn(g, B, T, H, V), randn(g, B, H, K, V)
    zeros_g, zeros_h = np.zeros_like(gk), np.zeros_like(h0)
    BK, BV = min(next_power_of_2(K), 64), min(next_power_of_2(V), 64)
    common = dict(scale=SCALE, B=B, T=T, H=H, K=K, V=V, BK=BK, BV=BV, USE_G=False, USE_G_GAMMA=False,
                  USE_GV=False, REVERSE=False, STATE_V_FIRST=False)
    grid = (cdiv(V, BV) * cdiv(K, BK) * B * H,)
    plain = {"q": q, "k": k, "v": v, "o": np.zeros_like(v)}
    gated = {**plain, "gk": gk, "h0": h0, "ht": np.zeros_like(h0)}

    def fwd_kwargs(with_state):
        return dict(q=Buf("q"), k=Buf("k"), v=Buf("v"), g=None, g_gamma=None, gk=Buf("gk") if with_state else None,
                    gv=None, o=Buf("o"), h0=Buf("h0") if with_state else None,
                    ht=Buf("ht") if with_state else None, cu_seqlens=None, **common, USE_GK=with_state)

    def fwd_expect(buf, with_state):
        o, ht = recurrent(buf["q"], buf["k"], buf["v"], buf["gk"] if with_state else zeros_g,
                          buf["h0"] if with_state else zeros_h)
        return {"o": np.asarray(o), **({"ht": np.asarray(ht)} if with_state else {})}

    def bwd_kwargs(with_state):
        return dict(q=Buf("q"), k=Buf("k"), v=Buf("v"), g=None, g_gamma=None, gk=None, gv=None, o=Buf("o"),
                    h0=Buf("h0") if with_state else None, do=Buf("do"), dq=Buf("dq"), dk=Buf("dk"), dv=Buf("dv"),
                    dg=None, dgk=None, dgv=None, dht=Buf("dht") if with_state else None,
                    dh0=Buf("dh0") if with_state else None, cu_seqlens=None, **common, USE_GK=False)

    def bwd_expect(buf, with_state):
        h_init = buf["h0"] if with_state else zeros_h
        (o, ht), pullback = jax.vjp(lambda q, k, v, h: recurrent(q, k, v, zeros_g, h),
                                    *map(jnp.asarray, (buf["q"], buf["k"], buf["v"], h_init)))
        dq, dk, dv, dh0 = pullback((jnp.asarray(buf["do"]), jnp.asarray(buf["dht"] if with_state else zeros_h)))
        return {"dq": np.asarray(dq), "dk": np.asarray(dk), "dv": np.asarray(dv),
                **({"dh0": np.asarray(dh0)} if with_state else {})}

    bwd_buffers = {"q": q, "k": k, "v": v, "o": np.zeros_like(v), "do": do, "dq": np.zeros_like(q),
                   "dk": np.zeros_like(k), "dv": np.zeros_like(v)}
    module = "fla.ops.common.fused_recurrent"
    return [
        Launch("fla/fused_recurrent_fwd", module, "fused_recurrent_fwd_kernel", grid, (), fwd_kwargs(False),
               buffers=plain, written={"o": "out"}, expect=lambda b: fwd_expect(b, False), rtol=1e-4, atol=1e-4),
        Launch("fla/fused_recurrent_fwd_gk_state", module, "fused_recurrent_fwd_kernel", grid, (), fwd_kwargs(True),
               buffers=gated, written={"o": "out", "ht": "out"}, expect=lambda b: fwd_expect(b, True), rtol=1e-4,
               atol=1e-4),
        Launch("fla/fused_recurrent_bwd", module, "fused_recurrent_bwd_kernel", grid, (), bwd_kwargs(False),
               buffers=bwd_buffers, written={"dq": "out", "dk": "out", "dv": "out"},
               expect=lambda b: bwd_expect(b, False), rtol=1e-4, atol=1e-4),
        Launch("fla/fused_recurrent_bwd_state", module, "fused_recurrent_bwd_kernel", grid, (), bwd_kwargs(True),
               buffers={**bwd_buffers, "h0": h0, "dht": dht, "dh0": np.zeros_like(h0)},
               written={"dq": "out", "dk": "out", "dv": "out", "dh0": "out"},
               expect=lambda b: bwd_expect(b, True), rtol=1e-4, atol=1e-4),
    ]


def chunked_cumsum(x: np.ndarray, chunk: int | None, reverse: bool) -> np.ndarray:
    """Cumulative sum along T (axis 1) within chunks of ``chunk`` steps (the whole sequence for None)."""
    out = np.empty_like(x)
    size = chunk or x.shape[1]
    for start in range(0, x.shape[1], size):
        part = x[:, start:start + size]
        out[:, start:start + size] = np.flip(np.cumsum(np.flip(part, 1), 1), 1) if reverse else np.cumsum(part, 1)
    return out


def cumsum_entries() -> list[Launch]:
    g = rng(12)
    t, bt, s = 20, 8, 24
    scalar, vector = randn(g, B, t, H), randn(g, B, t, H, s)
    module = "fla.ops.utils.cumsum"
    entries = []
    for reverse in (False, True):
        tag = "_reverse" if reverse else ""
        entries += [
            Launch(f"fla/chunk_local_cumsum_scalar{tag}", module, "chunk_local_cumsum_scalar_kernel",
                   (cdiv(t, bt) * B * H,), (),
                   dict(s=Buf("g"), o=Buf("o"), scale=None, cu_seqlens=None, chunk_indices=None, T=t, B=B, H=H, BT=bt,
                        REVERSE=reverse, USE_GRAPH=False),
                   buffers={"g": scalar, "o": np.zeros_like(scalar)}, written={"o": "out"},
                   expect=lambda b, r=reverse: {"o": chunked_cumsum(b["g"], bt, r)}, rtol=1e-5, atol=1e-5),
            Launch(f"fla/chunk_local_cumsum_vector{tag}", module, "chunk_local_cumsum_vector_kernel",
                   lambda meta: (cdiv(meta["S"], meta["BS"]) * cdiv(t, bt), B * H), (),
                   dict(s=Buf("g"), o=Buf("o"), scale=None, cu_seqlens=None, chunk_indices=None, T=t, B=B, H=H, S=s,
                        BT=bt, REVERSE=reverse, USE_GRAPH=False),
                   buffers={"g": vector, "o": np.zeros_like(vector)}, written={"o": "out"},
                   expect=lambda b, r=reverse: {"o": chunked_cumsum(b["g"], bt, r)}, rtol=1e-5, atol=1e-5),
        ]
    entries += [
        Launch("fla/chunk_global_cumsum_scalar", module, "chunk_global_cumsum_scalar_kernel", (B * H,), (),
               dict(s=Buf("s"), o=Buf("z"), scale=None, cu_seqlens=None, T=t, B=B, H=H, REVERSE=False),
               buffers={"s": scalar, "z": np.zeros_like(scalar)}, written={"z": "out"},
               expect=lambda b: {"z": chunked_cumsum(b["s"], None, False)}, rtol=1e-5, atol=1e-5),
        Launch("fla/chunk_global_cumsum_vector_reverse", module, "chunk_global_cumsum_vector_kernel",
               (cdiv(s, min(32, next_power_of_2(s))) * B * H,), (),
               dict(s=Buf("s"), o=Buf("z"), scale=None, cu_seqlens=None, T=t, B=B, H=H, S=s,
                    BS=min(32, next_power_of_2(s)), REVERSE=True),
               buffers={"s": vector, "z": np.zeros_like(vector)}, written={"z": "out"},
               expect=lambda b: {"z": chunked_cumsum(b["s"], None, True)}, rtol=1e-5, atol=1e-5),
    ]
    return entries


def norm_entries() -> list[Launch]:
    g = rng(13)
    n, d = 10, 50
    x, dp = randn(g, n, d), randn(g, n, d)
    p = np.asarray(jax.nn.softmax(jnp.asarray(x), -1))
    rstd = (1 / np.sqrt((x * x).sum(-1) + 1e-6)).astype(np.float32)
    y = x * rstd[:, None]
    dy = randn(g, n, d)
    nb = cdiv(n, 2048 * 32)
    return [
        Launch("fla/softmax_fwd", "fla.ops.utils.softmax", "softmax_fwd_kernel", (n,), (),
               dict(x=Buf("x"), p=Buf("p"), D=d, B=next_power_of_2(d)),
               buffers={"x": x, "p": np.zeros_like(x)}, written={"p": "out"}, expect=lambda b: {"p": p},
               rtol=1e-5, atol=1e-6),
        Launch("fla/softmax_bwd", "fla.ops.utils.softmax", "softmax_bwd_kernel", (n,), (),
               dict(p=Buf("p"), dp=Buf("dp"), ds=Buf("ds"), D=d, B=next_power_of_2(d)),
               buffers={"p": p, "dp": dp, "ds": np.zeros_like(x)}, written={"ds": "out"},
               expect=lambda b: {"ds": b["p"] * (b["dp"] - (b["p"] * b["dp"]).sum(-1, keepdims=True))},
               rtol=1e-4, atol=1e-5),
        Launch("fla/l2norm_fwd", "fla.modules.norm.l2norm", "l2norm_fwd_kernel", lambda meta: (cdiv(n, meta["BT"]),),
               (), dict(x=Buf("x"), y=Buf("y"), rstd=Buf("rstd"), eps=1e-6, T=n, D=d, BD=next_power_of_2(d), NB=nb),
               buffers={"x": x, "y": np.zeros_like(x), "rstd": np.zeros(n, np.float32)},
               written={"y": "out", "rstd": "out"}, expect=lambda b: {"y": y, "rstd": rstd}, rtol=1e-5, atol=1e-6),
        Launch("fla/l2norm_bwd", "fla.modules.norm.l2norm", "l2norm_bwd_kernel", lambda meta: (cdiv(n, meta["BT"]),),
               (), dict(y=Buf("y"), rstd=Buf("rstd"), dy=Buf("dy"), dx=Buf("dx"), eps=1e-6, T=n, D=d,
                        BD=next_power_of_2(d), NB=nb),
               buffers={"y": y, "rstd": rstd, "dy": dy, "dx": np.zeros_like(x)}, written={"dx": "out"},
               expect=lambda b: {"dx": b["dy"] * b["rstd"][:, None]
                                 - (b["dy"] * b["y"]).sum(-1, keepdims=True) * b["y"] * b["rstd"][:, None]},
               rtol=1e-4, atol=1e-5),
    ]


def entries() -> list[Launch]:
    return [*fused_recurrent_entries(), *cumsum_entries(), *norm_entries()]
