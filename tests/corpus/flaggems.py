"""FlagGems 5.0.2 (``flag_gems.ops``): its two-stage reductions (``sum``, ``mean``, ``amax``, ``max``, ``min``,
``argmax``, ``prod``, ``vector_norm``), ``count_nonzero``, RMS norm forward/backward and ``log_softmax``, launched
as its launchers launch them: positional, the block sizes as positional constexprs, grids such as ``[M,]``.
Every kernel is a ``LibEntry`` (``@libentry()``): with torch it is launched through it; without torch
``kernels_of`` loads the kernel under it (``LibEntry`` needs a torch device count) and says so."""

from __future__ import annotations

import math
import warnings

import numpy as np

from corpus.spec import Buf, Launch, cdiv, next_power_of_2, randn, rng

warnings.filterwarnings("ignore", message=r"tritonplug.kernels_of\('flag_gems")
M = "flag_gems.ops."


def reduction_entries() -> list[Launch]:
    g = rng(21)
    x = randn(g, 37, 29)
    n = x.size
    block = next_power_of_2(math.ceil(math.sqrt(n)))
    mid_size = cdiv(n, block)
    block_mid = next_power_of_2(mid_size)
    flat = np.concatenate([x.ravel(), np.full(mid_size * block - n, np.nan, np.float32)]).reshape(mid_size, block)
    near_one = (1 + 0.01 * randn(g, 37, 29)).astype(np.float32)
    near_flat = np.concatenate([near_one.ravel(), np.ones(mid_size * block - n, np.float32)]).reshape(mid_size, block)
    ops = {  # name: (module, stage-1 kernel, stage-2 kernel, per-block reduction, final reduction, input)
        "sum": ("sum", "sum_kernel_1", "sum_kernel_2", lambda b: np.nansum(b, 1), np.sum, x),
        "amax": ("amax", "amax_kernel_1", "amax_kernel_2", lambda b: np.nanmax(b, 1), np.max, x),
        "max": ("max", "max_kernel_1", "max_kernel_2", lambda b: np.nanmax(b, 1), np.max, x),
        "min": ("min", "min_kernel_1", "min_kernel_2", lambda b: np.nanmin(b, 1), np.min, x),
        "prod": ("prod", "prod_kernel_mid", "prod_kernel_result", lambda b: np.prod(b, 1), np.prod, near_one),
        "vector_norm_l2": ("vector_norm", "l2_norm_kernel_1", "l2_norm_kernel_2", lambda b: np.nansum(b * b, 1),
                           lambda m: np.sqrt(m.sum()), x),
    }
    entries = []
    for op, (module, first, second, per_block, final, data) in ops.items():
        blocks = near_flat if op == "prod" else flat
        mid = per_block(blocks.astype(np.float64)).astype(np.float32)
        entries += [
            Launch(f"flaggems/{op}_stage1", M + module, first, (mid_size, 1, 1), (Buf("inp"), Buf("mid"), n, block),
                   buffers={"inp": data, "mid": np.zeros(mid_size, np.float32)}, written={"mid": "out"},
                   expect=lambda b, mid=mid: {"mid": mid}, rtol=1e-5, atol=1e-5),
            Launch(f"flaggems/{op}_stage2", M + module, second, (1, 1, 1),
                   (Buf("mid"), Buf("out"), mid_size, block_mid),
                   buffers={"mid": mid, "out": np.zeros((), np.float32)}, written={"out": "out"},
                   expect=lambda b, final=final: {"out": np.float32(final(b["mid"].astype(np.float64)))},
                   rtol=1e-5, atol=1e-5),
        ]
    mean_mid = np.nansum(flat, 1).astype(np.float32)
    entries += [
        Launch("flaggems/mean_stage1", M + "mean", "mean_kernel_1", (mid_size, 1, 1),
               (Buf("inp"), Buf("mid"), n, block),
               buffers={"inp": x, "mid": np.zeros(mid_size, np.float32)}, written={"mid": "out"},
               expect=lambda b: {"mid": mean_mid}, rtol=1e-5, atol=1e-5),
        Launch("flaggems/mean_stage2", M + "mean", "mean_kernel_2", (1, 1, 1),
               (Buf("mid"), Buf("out"), n, mid_size, block_mid),
               buffers={"mid": mean_mid, "out": np.zeros((), np.float32)}, written={"out": "out"},
               expect=lambda b: {"out": np.float32(x.astype(np.float64).mean())}, rtol=1e-5, atol=1e-6),
    ]
    arg_values = np.nanmax(flat, 1).astype(np.float32)
    arg_index = (np.nanargmax(flat, 1) + np.arange(mid_size) * block).astype(np.int64)
    entries += [
        Launch("flaggems/argmax_stage1", M + "argmax", "argmax_kernel_1", (mid_size, 1, 1),
               (Buf("inp"), Buf("mid_value"), Buf("mid_index"), n, block),
               buffers={"inp": x, "mid_value": np.zeros(mid_size, np.float32),
                        "mid_index": np.zeros(mid_size, np.int64)},
               written={"mid_value": "out", "mid_index": "out"},
               expect=lambda b: {"mid_value": arg_values, "mid_index": arg_index}),
        Launch("flaggems/argmax_stage2", M + "argmax", "argmax_kernel_2", (1, 1, 1),
               (Buf("mid_value"), Buf("mid_index"), Buf("out"), mid_size, block_mid),
               buffers={"mid_value": arg_values, "mid_index": arg_index, "out": np.zeros((), np.int64)},
               written={"out": "out"}, expect=lambda b: {"out": np.int64(np.argmax(x))}),
    ]
    sparse = np.where(randn(g, 3000) > 0.5, randn(g, 3000), 0).astype(np.float32)
    entries.append(Launch(
        "flaggems/count_nonzero", M + "count_nonzero", "count_nonzero_kernel_1",
        lambda meta: (cdiv(sparse.size, meta["BLOCK_SIZE"]),), (Buf("x"), Buf("out"), sparse.size),
        dict(BLOCK_SIZE=1024), buffers={"x": sparse, "out": np.zeros(1, np.int64)}, written={"out": "inout"},
        expect=lambda b: {"out": np.array([np.count_nonzero(sparse)])}))
    return entries


def norm_entries() -> list[Launch]:
    g = rng(22)
    rows, n = 20, 70
    x, w, dy = randn(g, rows, n), randn(g, n), randn(g, rows, n)
    eps = 1e-5
    inv_rms = (1 / np.sqrt((x * x).mean(-1) + eps)).astype(np.float32)
    block = next_power_of_2(n)
    y = x * inv_rms[:, None] * w
    dx = inv_rms[:, None] * (dy * w) - inv_rms[:, None] ** 3 / n * x * (dy * w * x).sum(-1, keepdims=True)
    dw = (dy * x * inv_rms[:, None]).sum(0)
    row_blocks = cdiv(rows, 16)
    logits = randn(g, 6, 40, 3)  # (M, N, K), the softmax over N
    shifted = logits - logits.max(1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    return [
        Launch("flaggems/rms_norm_fwd", M + "rms_norm", "rms_norm_kernel", (rows,),
               (Buf("y"), Buf("inv_rms"), Buf("x"), Buf("weight"), n, 1, n, 1, n, eps, block),
               buffers={"y": np.zeros_like(x), "inv_rms": np.zeros(rows, np.float32), "x": x, "weight": w},
               written={"y": "out", "inv_rms": "out"}, expect=lambda b: {"y": y, "inv_rms": inv_rms},
               rtol=1e-5, atol=1e-5),
        Launch("flaggems/rms_norm_grad_dx", M + "rms_norm", "rms_norm_grad_dx_kernel", (rows,),
               (Buf("x"), Buf("dy"), Buf("inv_rms"), Buf("dx"), Buf("weight"), n, 1, n, 1, n, eps, block),
               buffers={"x": x, "dy": dy, "inv_rms": inv_rms, "dx": np.zeros_like(x), "weight": w},
               written={"dx": "out"}, expect=lambda b: {"dx": dx}, rtol=1e-4, atol=1e-5),
        Launch("flaggems/rms_norm_grad_dw", M + "rms_norm", "rms_norm_grad_dw_kernel", (row_blocks, cdiv(n, 256)),
               (Buf("x"), Buf("dy"), Buf("inv_rms"), Buf("partial_buffer"), n, 1, n, 1, rows, n, 16, 256),
               buffers={"x": x, "dy": dy, "inv_rms": inv_rms,
                        "partial_buffer": np.zeros((row_blocks, n), np.float32)},
               written={"partial_buffer": "out"}, expect=lambda b: {"partial_buffer": dw},
               post={"partial_buffer": lambda a: a.sum(0)}, rtol=1e-4, atol=1e-4),
        Launch("flaggems/log_softmax", M + "log_softmax", "log_softmax_kernel",
               lambda meta: (cdiv(6, meta["BLOCK_M"]), 3), (Buf("out"), Buf("inp"), 6, 40, 3), dict(num_warps=8),
               buffers={"out": np.zeros_like(logits), "inp": logits}, written={"out": "out"},
               expect=lambda b: {"out": log_softmax}, rtol=1e-5, atol=1e-5),
    ]


def entries() -> list[Launch]:
    return [*reduction_entries(), *norm_entries()]
