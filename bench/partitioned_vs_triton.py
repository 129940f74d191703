"""Each GPU's shard of a partitioned call against Triton's own launcher on torch tensors (GPU only).

    XLA_PYTHON_CLIENT_PREALLOCATE=false python bench/partitioned_vs_triton.py [--out FILE]

For kernels of ``tests/sharding_kernels.py``, the partitioned function runs in a jit sharded over every GPU; then,
per device, the same kernel is launched by Triton itself (``kernel[grid](...)``) on torch tensors holding that
device's slice of the inputs, with the grid and scalars derived from the slice as the launcher derives them.
Each shard must equal Triton's result (same kernel, same inputs: the maximum difference is printed).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import jax
import numpy as np
import torch
import triton
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))
import sharding_kernels as sk  # noqa: E402
from fused_attention import attention_fwd_kernel  # noqa: E402


def _t(a: np.ndarray, device: int) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(f"cuda:{device}")


def triton_add_rows(x, y, d):
    xt, yt = _t(x, d), _t(y, d)
    out = torch.empty_like(xt)
    rows, cols = x.shape
    sk.add_rows_kernel[(rows, triton.cdiv(cols, 16))](xt, yt, cols, out, BLOCK=16)
    return [out]


def triton_rms_norm(x, w, d):
    rows, cols = math.prod(x.shape[:-1]), x.shape[-1]
    xt, wt = _t(x.reshape(rows, cols), d), _t(w, d)
    y, rstd = torch.empty_like(xt), torch.empty(rows, dtype=torch.float32, device=f"cuda:{d}")
    sk.rms_norm_kernel[(rows,)](xt, wt, y, rstd, cols, 1e-6, BLOCK=triton.next_power_of_2(cols))
    return [y.reshape(x.shape), rstd.reshape(x.shape[:-1])]


def triton_rope(x, cos, sin, d):
    b, h, s, dim = x.shape
    xt = _t(x, d)
    out = torch.empty_like(xt)
    sk.rope_kernel[(b * h * s,)](xt, _t(cos, d), _t(sin, d), s, out, HALF=dim // 2)
    return [out]


def triton_attention(q, k, v, d):
    b, h, s, dim = q.shape
    qt, kt, vt = _t(q, d), _t(k, d), _t(v, d)
    o = torch.empty_like(qt)
    attention_fwd_kernel[(triton.cdiv(s, 16), b * h)](qt, kt, vt, s, 1.0 / math.sqrt(dim), o, HEAD_DIM=dim,
                                                      BLOCK_M=16, BLOCK_N=16, CAUSAL=False, num_warps=4,
                                                      num_stages=2)
    return [o]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    n = jax.device_count()
    mesh = jax.make_mesh((n,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    rng = np.random.default_rng(0)

    def rand(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    x, y, w = rand(64 * n, 96), rand(64 * n, 96), rand(96)
    q = rand(2 * n, 4, 32, 16)
    ang = rand(32, 8)
    qa, ka, va = (rand(2, 4 * n, 32, 16) for _ in range(3))
    cases = [
        ("add_rows (rows split)", sk.add_rows, triton_add_rows, (x, y), (P("x"), P("x"))),
        ("rms_norm (rows split, d whole)", sk.rms_norm, triton_rms_norm, (x, w), (P("x"), P())),
        ("rope (batch split)", sk.rope, triton_rope, (q, np.cos(ang), np.sin(ang)), (P("x"), P(), P())),
        ("attention (heads split)", sk.attention, triton_attention, (qa, ka, va), (P(None, "x"),) * 3),
    ]
    rows = []
    for name, fn, launch, arrays, specs in cases:
        placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(arrays, specs, strict=True)]
        results = jax.tree.leaves(jax.jit(fn)(*placed))
        worst = 0.0
        for shard_index, device in enumerate(jax.devices()):
            local = [np.asarray(next(s.data for s in p.addressable_shards if s.device == device)) for p in placed]
            want = launch(*local, shard_index)
            for result, expected in zip(results, want, strict=True):
                got = np.asarray(next(s.data for s in result.addressable_shards if s.device == device))
                worst = max(worst, float(np.max(np.abs(got - expected.cpu().numpy()))))
        rows.append({"case": name, "devices": n, "max_abs_diff_vs_triton": worst})
        print(f"{name:34s} {n} GPUs: each shard vs Triton's launcher on torch, max |diff| = {worst:.3g}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "jax": jax.__version__,
                                              "triton": triton.__version__, "torch": torch.__version__,
                                              "devices": [d.device_kind for d in jax.devices()], "rows": rows},
                                             indent=1))
    assert all(r["max_abs_diff_vs_triton"] == 0.0 for r in rows), rows


if __name__ == "__main__":
    main()
