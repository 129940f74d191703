"""Triton's own tutorials (``python/tutorials`` of a Triton release), read at test time from the directory named
by ``TRITONPLUG_TUTORIALS_DIR`` (they are on no package index) and loaded with ``tritonplug.kernels_from_file``
(the scripts import torch and run on import). Launched as the tutorials' launchers launch them: the fused
softmax with ``num_stages`` a ``tl.constexpr`` parameter passed positionally, the layer norm forward and its
two backward kernels (a spin lock on ``atomic_cas``, then a column reduction with a grid of ``meta``)."""

from __future__ import annotations

import numpy as np

from corpus.spec import Buf, Launch, cdiv, next_power_of_2, randn, rng

ENV = "TRITONPLUG_TUTORIALS_DIR"
PREFIX = "tutorial:"


def entries() -> list[Launch]:
    g = rng(31)
    rows, n = 10, 200
    x = randn(g, rows, n)
    e = np.exp(x - x.max(1, keepdims=True))
    softmax = e / e.sum(1, keepdims=True)
    w, b, dy = randn(g, n), randn(g, n), randn(g, rows, n)
    mean = x.mean(1).astype(np.float32)
    rstd = (1 / np.sqrt(x.var(1) + 1e-5)).astype(np.float32)
    xhat = (x - mean[:, None]) * rstd[:, None]
    wdy = w * dy
    dx = (wdy - (xhat * (xhat * wdy).mean(1, keepdims=True) + wdy.mean(1, keepdims=True))) * rstd[:, None]
    block = min(65536 // 4, next_power_of_2(n))
    warps = min(max(block // 256, 1), 8)
    group = 256  # the launcher's GROUP_SIZE_M for N <= 1024
    partial_dw, partial_db = np.zeros((group, n), np.float32), np.zeros((group, n), np.float32)
    partial_dw[:rows], partial_db[:rows] = dy * xhat, dy  # row r accumulates into buffer r % GROUP_SIZE_M
    layer_norm = PREFIX + "05-layer-norm.py"
    return [
        Launch("tutorials/fused_softmax", PREFIX + "02-fused-softmax.py", "softmax_kernel", (4, 1, 1),
               (Buf("y"), Buf("x"), n, n, rows, n, next_power_of_2(n), 2), dict(num_warps=8),
               buffers={"y": np.zeros_like(x), "x": x}, written={"y": "out"}, expect=lambda _: {"y": softmax},
               rtol=1e-5, atol=1e-6),
        Launch("tutorials/layer_norm_fwd", layer_norm, "_layer_norm_fwd_fused", (rows,),
               (Buf("x"), Buf("y"), Buf("weight"), Buf("bias"), Buf("mean"), Buf("rstd"), n, n, 1e-5),
               dict(BLOCK_SIZE=block, num_warps=warps, num_ctas=1),
               buffers={"x": x, "y": np.zeros_like(x), "weight": w, "bias": b, "mean": np.zeros(rows, np.float32),
                        "rstd": np.zeros(rows, np.float32)},
               written={"y": "out", "mean": "out", "rstd": "out"},
               expect=lambda _: {"y": xhat * w + b, "mean": mean, "rstd": rstd}, rtol=1e-4, atol=1e-5),
        Launch("tutorials/layer_norm_bwd_dx_fused", layer_norm, "_layer_norm_bwd_dx_fused", (rows,),
               (Buf("dx"), Buf("dy"), Buf("_dw"), Buf("_db"), Buf("x"), Buf("w"), Buf("m"), Buf("v"), Buf("locks"),
                n, n),
               dict(BLOCK_SIZE_N=block, GROUP_SIZE_M=group, num_warps=warps),
               buffers={"dx": np.zeros_like(x), "dy": dy, "_dw": np.zeros((group, n), np.float32),
                        "_db": np.zeros((group, n), np.float32), "x": x, "w": w, "m": mean, "v": rstd,
                        "locks": np.zeros(2 * group, np.int32)},
               written={"dx": "out", "_dw": "inout", "_db": "inout", "locks": "inout"},
               expect=lambda _: {"dx": dx, "_dw": partial_dw, "_db": partial_db,
                                 "locks": np.r_[np.zeros(group), np.arange(2 * group - group) < rows]},
               rtol=1e-4, atol=1e-5),
        Launch("tutorials/layer_norm_bwd_dwdb", layer_norm, "_layer_norm_bwd_dwdb",
               lambda meta: (cdiv(n, meta["BLOCK_SIZE_N"]),),
               (Buf("_dw"), Buf("_db"), Buf("dw"), Buf("db"), min(group, rows), n),
               dict(BLOCK_SIZE_M=32, BLOCK_SIZE_N=128, num_ctas=1),
               buffers={"_dw": partial_dw, "_db": partial_db, "dw": np.zeros(n, np.float32),
                        "db": np.zeros(n, np.float32)},
               written={"dw": "out", "db": "out"},
               expect=lambda _: {"dw": partial_dw.sum(0), "db": partial_db.sum(0)}, rtol=1e-4, atol=1e-4),
    ]
