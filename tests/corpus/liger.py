"""Liger-Kernel 0.8.5 (``liger_kernel.ops``): each launch as its torch launcher makes it (``rms_norm_forward``,
``layer_norm_backward``, ``cross_entropy_forward`` …), with the values it would compute for these shapes.
``sm_count`` (the GPU's SM count in the backward launchers) is fixed at 4 so the CPU and GPU agree."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import triton.language as tl

from corpus.spec import Buf, Launch, cdiv, next_power_of_2, randn, rng

M = "liger_kernel.ops."
ROWS, COLS, SM = 8, 100, 4


def settings(n: int) -> tuple[int, int]:
    """``liger_kernel.ops.utils.calculate_settings`` for sizes that never reach its torch branch."""
    block = next_power_of_2(n)
    return block, 4 if block < 2048 else 8


def vjp(f, primals, cotangent):
    return jax.vjp(f, *[jnp.asarray(p) for p in primals])[1](jnp.asarray(cotangent))


def rms(x, w, eps=1e-6, offset=0.0):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * (offset + w)


def rstd_of(x, eps=1e-6):
    return (1 / np.sqrt((x * x).mean(-1) + eps)).astype(np.float32)


def layer_norm(x, w, b, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps) * w + b


def rms_norm_entries() -> list[Launch]:
    g = rng(1)
    x, w, dy = randn(g, ROWS, COLS), randn(g, COLS), randn(g, ROWS, COLS)
    block, warps = settings(COLS)
    fwd = dict(buffers={"Y": np.zeros_like(x), "X": x, "W": w, "RSTD": np.zeros(ROWS, np.float32)},
               written={"Y": "out", "RSTD": "out"},
               expect=lambda b: {"Y": np.asarray(rms(jnp.asarray(b["X"]), b["W"])), "RSTD": rstd_of(b["X"])})
    bwd_buffers = {"dY": dy, "dX": np.zeros_like(dy), "X": x, "W": w, "RSTD": rstd_of(x),
                   "_dW": np.zeros((SM, COLS), np.float32)}

    def bwd_expect(b):
        dx, dw = vjp(rms, (b["X"], b["W"]), b["dY"])
        return {"dX": np.asarray(dx), "_dW": np.asarray(dw)}

    bwd = dict(buffers=bwd_buffers, written={"dX": "out", "_dW": "out"}, expect=bwd_expect,
               post={"_dW": lambda a: a.sum(0)}, rtol=1e-4, atol=1e-4)
    common = (Buf("W"), COLS)
    return [
        Launch("liger/rms_norm_fwd", M + "rms_norm", "_rms_norm_forward_kernel", (ROWS,),
               (Buf("Y"), COLS, Buf("X"), COLS, *common, Buf("RSTD"), 1, COLS, 1e-6, 0.0, 0),
               dict(elementwise_affine=True, BLOCK_SIZE=block, num_warps=warps), **fwd),
        Launch("liger/rms_norm_fwd_block", M + "rms_norm", "_block_rms_norm_forward_kernel", (cdiv(ROWS, 16),),
               (Buf("Y"), COLS, Buf("X"), COLS, *common, Buf("RSTD"), 1, ROWS, COLS, 1e-6, 0.0, 0),
               dict(elementwise_affine=True, BLOCK_SIZE=block, num_warps=warps, BLOCK_ROW=16), **fwd),
        Launch("liger/rms_norm_bwd", M + "rms_norm", "_rms_norm_backward_kernel", (SM,),
               (Buf("dY"), COLS, Buf("dX"), COLS, Buf("X"), COLS, tl.float32, *common, Buf("RSTD"), 1,
                Buf("_dW"), COLS, ROWS, COLS, 0.0, cdiv(ROWS, SM), 0),
               dict(elementwise_affine=True, BLOCK_SIZE=block, COMPUTE_DW=True, num_warps=warps), **bwd),
        # LigerRMSNorm's default in_place=True: ``dX = dY``, the same tensor passed as both
        Launch("liger/rms_norm_bwd_in_place", M + "rms_norm", "_rms_norm_backward_kernel", (SM,),
               (Buf("dY"), COLS, Buf("dY"), COLS, Buf("X"), COLS, tl.float32, *common, Buf("RSTD"), 1,
                Buf("_dW"), COLS, ROWS, COLS, 0.0, cdiv(ROWS, SM), 0),
               dict(elementwise_affine=True, BLOCK_SIZE=block, COMPUTE_DW=True, num_warps=warps),
               buffers={k: v for k, v in bwd_buffers.items() if k != "dX"}, written={"dY": "inout", "_dW": "out"},
               expect=lambda b: {("dY" if k == "dX" else k): v for k, v in bwd_expect(b).items()},
               post={"_dW": lambda a: a.sum(0)}, rtol=1e-4, atol=1e-4),
        Launch("liger/rms_norm_bwd_block", M + "rms_norm", "_block_rms_norm_backward_kernel", (SM,),
               (Buf("dY"), COLS, Buf("dX"), COLS, Buf("X"), COLS, tl.float32, *common, Buf("RSTD"), 1,
                Buf("_dW"), COLS, ROWS, COLS, 0.0, 0),
               dict(elementwise_affine=True, BLOCK_SIZE=block, COMPUTE_DW=True, num_warps=warps, BLOCK_ROW=16),
               **bwd),
    ]


def layer_norm_entries() -> list[Launch]:
    g = rng(2)
    x, w, b, dy = randn(g, ROWS, COLS), randn(g, COLS), randn(g, COLS), randn(g, ROWS, COLS)
    block, warps = settings(COLS)
    mean = x.mean(-1).astype(np.float32)
    rstd = (1 / np.sqrt(x.var(-1) + 1e-6)).astype(np.float32)

    def bwd_expect(buf):
        dx, dw, db = vjp(layer_norm, (buf["X"], buf["W"], buf["B"]), buf["dY"])
        return {"DX": np.asarray(dx), "_DW": np.asarray(dw), "_DB": np.asarray(db)}

    return [
        Launch("liger/layer_norm_fwd", M + "layer_norm", "_layer_norm_forward_kernel", (ROWS,),
               (Buf("Y"), COLS, Buf("X"), COLS, Buf("W"), 1, Buf("B"), 1, Buf("Mean"), 1, Buf("RSTD"), 1, COLS, 1e-6),
               dict(BLOCK_SIZE=block, num_warps=warps),
               buffers={"Y": np.zeros_like(x), "X": x, "W": w, "B": b, "Mean": np.zeros(ROWS, np.float32),
                        "RSTD": np.zeros(ROWS, np.float32)},
               written={"Y": "out", "Mean": "out", "RSTD": "out"},
               expect=lambda buf: {"Y": np.asarray(layer_norm(jnp.asarray(buf["X"]), buf["W"], buf["B"])),
                                   "Mean": mean, "RSTD": rstd}, rtol=1e-4, atol=1e-5),
        Launch("liger/layer_norm_bwd", M + "layer_norm", "_layer_norm_backward_kernel", (SM,),
               (Buf("X"), COLS, Buf("W"), Buf("Mean"), 1, Buf("RSTD"), 1, Buf("DX"), COLS, Buf("_DW"), COLS,
                Buf("_DB"), COLS, Buf("dY"), COLS, ROWS, COLS),
               dict(rows_per_program=cdiv(ROWS, SM), BLOCK_SIZE=block, COMPUTE_DW=True, COMPUTE_DB=True,
                    num_warps=warps),
               buffers={"X": x, "W": w, "B": b, "Mean": mean, "RSTD": rstd, "DX": np.zeros_like(x), "dY": dy,
                        "_DW": np.zeros((SM, COLS), np.float32), "_DB": np.zeros((SM, COLS), np.float32)},
               written={"DX": "out", "_DW": "out", "_DB": "out"}, expect=bwd_expect,
               post={"_DW": lambda a: a.sum(0), "_DB": lambda a: a.sum(0)}, rtol=1e-4, atol=1e-4),
    ]


def group_norm_entries() -> list[Launch]:
    g = rng(3)
    batch, groups, cpg, spatial = 2, 3, 2, 20
    channels, hidden = groups * cpg, cpg * spatial
    x, dy = randn(g, batch, groups, hidden), randn(g, batch, groups, hidden)
    w, b = randn(g, channels), randn(g, channels)
    block = min(65536, next_power_of_2(hidden))

    def gn(x, w, b):
        mean = x.mean(-1, keepdims=True)
        xhat = (x - mean) * jax.lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-6)
        return xhat * jnp.repeat(w.reshape(groups, cpg), spatial, -1) + jnp.repeat(b.reshape(groups, cpg), spatial, -1)

    mean = x.mean(-1).astype(np.float32)
    rstd = (1 / np.sqrt(x.var(-1) + 1e-6)).astype(np.float32)

    def bwd_expect(buf):
        dx, dw, db = vjp(gn, (buf["X"], buf["W"], buf["B"]), buf["dY"])
        return {"DX": np.asarray(dx), "DW": np.asarray(dw), "DB": np.asarray(db)}

    return [
        Launch("liger/group_norm_fwd", M + "group_norm", "_group_norm_forward_kernel", (batch, groups),
               (Buf("Y"), groups * hidden, hidden, Buf("X"), groups * hidden, hidden, Buf("Mean"), groups, 1,
                Buf("RSTD"), groups, 1, Buf("W"), Buf("B"), hidden, cpg, 1e-6),
               dict(BLOCK_SIZE=block),
               buffers={"Y": np.zeros_like(x), "X": x, "W": w, "B": b, "Mean": np.zeros((batch, groups), np.float32),
                        "RSTD": np.zeros((batch, groups), np.float32)},
               written={"Y": "out", "Mean": "out", "RSTD": "out"},
               expect=lambda buf: {"Y": np.asarray(gn(jnp.asarray(buf["X"]), buf["W"], buf["B"])), "Mean": mean,
                                   "RSTD": rstd}, rtol=1e-4, atol=1e-4),
        Launch("liger/group_norm_bwd", M + "group_norm", "_group_norm_backward_kernel", (batch, groups),
               (Buf("X"), channels * spatial, spatial, Buf("W"), Buf("Mean"), groups, 1, Buf("RSTD"), Buf("DX"),
                Buf("DW"), Buf("DB"), Buf("dY"), spatial, cpg),
               dict(BLOCK_SIZE=min(65536, next_power_of_2(spatial)), dtype=tl.float32),
               buffers={"X": x, "W": w, "B": b, "Mean": mean, "RSTD": rstd, "DX": np.zeros_like(x), "dY": dy,
                        "DW": np.zeros(channels, np.float32), "DB": np.zeros(channels, np.float32)},
               written={"DX": "out", "DW": "inout", "DB": "inout"}, expect=bwd_expect, rtol=1e-4, atol=1e-4),
    ]


def softmax_entries() -> list[Launch]:
    g = rng(4)
    x, dy = randn(g, ROWS, COLS), randn(g, ROWS, COLS)
    y = np.asarray(jax.nn.softmax(jnp.asarray(x), -1))
    dx = y * (dy - (dy * y).sum(-1, keepdims=True))
    block, warps = settings(COLS)
    entries = []
    for kind, bs in (("single", block), ("multi", 32)):  # multi-block: the launcher's path for rows > 64K
        # Liger 0.8.5's multi-block kernels call ``tl.float32(0.0)``, which Triton 3.6-3.9 refuse
        refused = "'dtype' object is not callable" if kind == "multi" else ""
        entries += [
            Launch(f"liger/softmax_{kind}_fwd", M + "softmax", f"_softmax_{kind}_block_forward_kernel", (ROWS,),
                   (Buf("y"), COLS, Buf("x"), COLS, COLS), dict(BLOCK_SIZE=bs, num_warps=warps),
                   buffers={"y": np.zeros_like(x), "x": x}, written={"y": "out"},
                   expect=lambda b: {"y": y}, rtol=1e-5, atol=1e-6, triton_error=refused),
            Launch(f"liger/softmax_{kind}_bwd", M + "softmax", f"_softmax_{kind}_block_backward_kernel", (ROWS,),
                   (Buf("dy"), COLS, Buf("y"), COLS, Buf("dx"), COLS, COLS), dict(BLOCK_SIZE=bs, num_warps=warps),
                   buffers={"dy": dy, "y": y, "dx": np.zeros_like(x)}, written={"dx": "out"},
                   expect=lambda b: {"dx": dx}, rtol=1e-4, atol=1e-5, triton_error=refused),
        ]
    return entries


def cross_entropy_entries() -> list[Launch]:
    g = rng(5)
    rows, vocab = 6, 300
    x = randn(g, rows, vocab)
    target = g.integers(0, vocab, rows).astype(np.int64)
    target[2] = -100  # ignore_index
    keep = target != -100
    n = int(keep.sum())
    lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    loss = np.where(keep, (lse - x[np.arange(rows), np.maximum(target, 0)]) / n, 0.0)
    grad = (np.exp(x - lse[:, None]) - np.eye(vocab)[np.maximum(target, 0)]) / n * keep[:, None]
    grad_output = np.array(0.5, np.float32)
    return [
        Launch("liger/cross_entropy_fwd", M + "cross_entropy", "liger_cross_entropy_kernel", (rows,), (),
               dict(X_ptr=Buf("X"), X_stride=vocab, Y_ptr=Buf("target"), Y_stride=1, weight_ptr=None,
                    loss_ptr=Buf("loss_1d"), z_loss_ptr=None, loss_stride=1, token_accuracy_ptr=None,
                    token_accuracy_stride=0, predicted_tokens_ptr=None, predicted_tokens_stride=0, n_cols=vocab,
                    n_non_ignore=n, sum_non_ignore_weight=n, ignore_index=-100, weight_sum=0.0,
                    lse_square_scale=0.0, label_smoothing=0.0, reduction="mean", softcap=None,
                    RETURN_Z_LOSS=False, RETURN_TOKEN_ACCURACY=False, RETURN_PREDICTED_TOKENS=False,
                    BLOCK_SIZE=min(32768, next_power_of_2(vocab)), HAS_WEIGHT=False, HAS_SOFTCAPPING=False,
                    HAS_GRADIENTS=True, num_warps=32),
               buffers={"X": x, "target": target, "loss_1d": np.zeros(rows, np.float32)},
               written={"X": "inout", "loss_1d": "out"},
               expect=lambda b: {"X": grad, "loss_1d": loss}, rtol=1e-4, atol=1e-6),
        Launch("liger/cross_entropy_bwd_element_mul", M + "cross_entropy", "element_mul_kernel", (rows,),
               (Buf("X"), vocab, Buf("grad_output"), vocab),
               dict(BLOCK_SIZE=min(32768, next_power_of_2(vocab)), num_warps=32),
               buffers={"X": grad.astype(np.float32), "grad_output": grad_output}, written={"X": "inout"},
               expect=lambda b: {"X": b["X"] * b["grad_output"]}),
    ]


def glu_entries() -> list[Launch]:
    g = rng(6)
    a, b, dc = randn(g, ROWS, COLS), randn(g, ROWS, COLS), randn(g, ROWS, COLS)
    block, warps = settings(COLS)

    def swiglu(a, b):
        return jax.nn.silu(a) * b

    def geglu(a, b):
        return jax.nn.gelu(a, approximate=True) * b

    entries = []
    for name, f, fwd, bwd in (("swiglu", swiglu, "_swiglu_forward_kernel", "_swiglu_backward_kernel"),
                              ("geglu", geglu, "_geglu_tanh_forward_kernel", "_geglu_tanh_backward_kernel")):
        extra = (1.0,) if name == "swiglu" else ()  # float(gate_multiplier)

        def grads(buf, f=f):
            da, db = vjp(f, (buf["a"], buf["b"]), buf["dc"])
            return {"a": np.asarray(da), "b": np.asarray(db)}

        entries += [
            Launch(f"liger/{name}_fwd", M + name, fwd, (ROWS,), (Buf("a"), Buf("b"), Buf("c"), COLS, *extra),
                   dict(n_cols=COLS, BLOCK_SIZE=block, num_warps=warps),
                   buffers={"a": a, "b": b, "c": np.zeros_like(a)}, written={"c": "out"},
                   expect=lambda buf, f=f: {"c": np.asarray(f(jnp.asarray(buf["a"]), buf["b"]))}, rtol=1e-5,
                   atol=1e-5),
            Launch(f"liger/{name}_bwd", M + name, bwd, (ROWS,), (Buf("dc"), Buf("a"), Buf("b"), COLS, *extra),
                   dict(n_cols=COLS, BLOCK_SIZE=block, num_warps=warps),
                   buffers={"dc": dc, "a": a, "b": b}, written={"a": "inout", "b": "inout"}, expect=grads,
                   rtol=1e-4, atol=1e-5),
        ]
    return entries


def rope_entries() -> list[Launch]:
    g = rng(7)
    batch, seq, n_qh, n_kh, hd = 2, 5, 4, 2, 16
    q, k = randn(g, batch, seq, n_qh, hd), randn(g, batch, seq, n_kh, hd)
    angles = np.arange(seq)[:, None] * (1.0 / 10000 ** (np.arange(0, hd, 2) / hd))[None]
    cos = np.concatenate([np.cos(angles)] * 2, -1)[None].astype(np.float32)  # (1, seq, hd)
    sin = np.concatenate([np.sin(angles)] * 2, -1)[None].astype(np.float32)

    def rotate(x, sign):
        half = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos[:, :, None] + sign * half * sin[:, :, None]

    entries = []
    for backward in (False, True):
        sign = -1.0 if backward else 1.0
        entries.append(Launch(
            f"liger/rope_{'bwd' if backward else 'fwd'}", M + "rope", "_triton_rope", (batch * seq,),
            (Buf("q"), n_qh * hd, Buf("k"), n_kh * hd, Buf("cos"), hd, Buf("sin"), hd, seq, batch, 1, n_qh, n_kh, hd,
             next_power_of_2(n_qh), next_power_of_2(n_kh), next_power_of_2(hd), next_power_of_2(hd), hd),
            dict(BLOCK_SIZE=max(next_power_of_2(n_qh), next_power_of_2(n_kh)), BACKWARD_PASS=backward),
            buffers={"q": q, "k": k, "cos": cos, "sin": sin}, written={"q": "inout", "k": "inout"},
            expect=lambda b, sign=sign: {"q": rotate(b["q"], sign), "k": rotate(b["k"], sign)}, rtol=1e-5,
            atol=1e-5))
    return entries


def dyt_entries() -> list[Launch]:
    g = rng(8)
    rows, n = 6, 1500
    x, dy = randn(g, rows, n), randn(g, rows, n)
    alpha, gamma, beta = np.array([0.7], np.float32), randn(g, n), randn(g, n)

    def dyt(x, alpha, gamma, beta):
        return gamma * jnp.tanh(alpha * x) + beta

    def bwd_expect(buf):
        dx, da, dg, db = vjp(dyt, (buf["x"], buf["alpha"], buf["gamma"], buf["beta"]), buf["dy"])
        return {"dx": np.asarray(dx), "da": np.asarray(da).sum(), "dg": np.asarray(dg), "db": np.asarray(db)}

    return [
        Launch("liger/dyt_fwd", M + "dyt", "_dyt_fwd_kernel", lambda meta: (cdiv(n, meta["BLOCK_N"]), rows),
               (Buf("x"), Buf("y"), Buf("alpha"), Buf("gamma"), Buf("beta"), True, n),
               buffers={"x": x, "y": np.zeros_like(x), "alpha": alpha, "gamma": gamma, "beta": beta},
               written={"y": "out"},
               expect=lambda b: {"y": np.asarray(dyt(jnp.asarray(b["x"]), b["alpha"], b["gamma"], b["beta"]))},
               rtol=1e-5, atol=1e-5),
        Launch("liger/dyt_bwd", M + "dyt", "_dyt_bwd_kernel", lambda meta: (cdiv(n, meta["BLOCK_N"]), SM),
               (Buf("dy"), Buf("dx"), Buf("da"), Buf("dg"), Buf("db"), Buf("x"), Buf("alpha"), Buf("gamma"), True,
                rows, n),
               buffers={"dy": dy, "dx": np.zeros_like(x), "da": np.zeros((SM, cdiv(n, 512)), np.float32),
                        "dg": np.zeros((SM, n), np.float32), "db": np.zeros((SM, n), np.float32), "x": x,
                        "alpha": alpha, "gamma": gamma, "beta": beta},
               written={"dx": "out", "da": "out", "dg": "out", "db": "out"}, expect=bwd_expect,
               post={"da": lambda a: a.sum(), "dg": lambda a: a.sum(0), "db": lambda a: a.sum(0)},
               rtol=1e-4, atol=1e-4),
    ]


def entries() -> list[Launch]:
    return [*rms_norm_entries(), *layer_norm_entries(), *group_norm_entries(), *softmax_entries(),
            *cross_entropy_entries(), *glu_entries(), *rope_entries(), *dyt_entries()]
