"""What binding by signature costs on the GPU: kernels whose outputs precede their inputs, and writes in place.

(a) An RMS-norm forward written with the output first, as Liger-Kernel's ``_rms_norm_forward_kernel``
    orders its parameters (``Y, Y_stride, X, X_stride, W, RSTD, n_cols, eps``), launched by Triton on torch
    tensors and by tritonplug (which compiles it with its output pointers last, ``tritonplug/compile/kernel_abi.py``),
    and the same body with its outputs last through tritonplug: all three should take the same time.
(b) An in-place ``x += 1`` over 2^26 floats: Triton on torch; tritonplug through ``input_output_aliases``
    without donation (XLA copies the input first), with the input donated, and through ``jax.new_ref``.

Each row is the device time per kernel: ``--calls`` launches back to back, synchronised once, median of
``--reps`` batches, all implementations of a group interleaved batch by batch. Results are checked against
each other. Needs a CUDA GPU, torch and Triton.

    python bench/binding_order.py --out bench/results/binding-order-h100.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import batched_seconds, format_table, summarize, to_numpy, write_json  # noqa: E402

import tritonplug  # noqa: E402


@triton.jit
def _rms_row(X, X_stride, W, Y, Y_stride, RSTD, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * X_stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(RSTD + row, rstd)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * Y_stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def rms_outputs_first(Y, Y_stride, X, X_stride, W, RSTD, n_cols, eps, BLOCK: tl.constexpr):
    _rms_row(X, X_stride, W, Y, Y_stride, RSTD, n_cols, eps, BLOCK)  # inlined: one body, two signatures


@triton.jit
def rms_outputs_last(X, X_stride, W, Y, Y_stride, RSTD, n_cols, eps, BLOCK: tl.constexpr):
    _rms_row(X, X_stride, W, Y, Y_stride, RSTD, n_cols, eps, BLOCK)


@triton.jit
def add_one_in_place(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def rms_group(rows: int, cols: int, args: argparse.Namespace) -> list[dict]:
    import torch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(np.float16)
    w = rng.standard_normal(cols).astype(np.float16)
    block, eps = triton.next_power_of_2(cols), 1e-6
    tx, tw = torch.tensor(x, device="cuda"), torch.tensor(w, device="cuda")
    ty, trstd = torch.empty_like(tx), torch.empty(rows, device="cuda", dtype=torch.float32)
    jx, jw = jnp.asarray(x), jnp.asarray(w)
    outs = (jax.ShapeDtypeStruct((rows, cols), jnp.float16), jax.ShapeDtypeStruct((rows,), jnp.float32))

    def torch_launch(_i: int):
        rms_outputs_first[(rows,)](ty, ty.stride(0), tx, tx.stride(0), tw, trstd, cols, eps, BLOCK=block, num_warps=8)
        return ty

    first = jax.jit(lambda x, w: tritonplug.triton_call(
        Y_stride=cols, X=x, X_stride=cols, W=w, n_cols=cols, eps=eps, kernel=rms_outputs_first, out_type=outs,
        grid=(rows,), BLOCK=block, num_warps=8))
    last = jax.jit(lambda x, w: tritonplug.triton_call(
        x, cols, w, Y_stride=cols, n_cols=cols, eps=eps, kernel=rms_outputs_last, out_type=outs, grid=(rows,),
        BLOCK=block, num_warps=8))
    impls = {"triton (torch), outputs first": (torch_launch, lambda out: torch.cuda.synchronize()),
             "tritonplug, outputs first": (lambda i: first(jx, jw), jax.block_until_ready),
             "tritonplug, outputs last": (lambda i: last(jx, jw), jax.block_until_ready)}
    torch_launch(0)
    want = to_numpy(ty)
    records = []
    for name, (call, sync) in impls.items():
        samples = batched_seconds(call, args.calls, args.reps, warmup_calls=3, sync=sync)
        got = to_numpy(call(0)[0]) if name.startswith("tritonplug") else want
        records.append({"bench": f"rms_norm fwd {rows}x{cols} fp16", "impl": name, **summarize(samples),
                        "max_abs_diff": float(np.max(np.abs(got.astype(np.float32) - want.astype(np.float32))))})
    return records


def in_place_group(n: int, args: argparse.Namespace) -> list[dict]:
    import torch

    block, grid = 1024, (triton.cdiv(n, 1024),)
    tx = torch.zeros(n, device="cuda")

    def torch_launch(_i: int):
        add_one_in_place[grid](tx, n, BLOCK=block)
        return tx

    def aliased(x):
        return tritonplug.triton_call(x, n, kernel=add_one_in_place, out_type=jax.ShapeDtypeStruct((n,), jnp.float32),
                                      grid=grid, BLOCK=block, input_output_aliases={0: 0})

    copied, donated = jax.jit(aliased), jax.jit(aliased, donate_argnums=0)
    kept = jnp.zeros(n, jnp.float32)
    chain = [jnp.zeros(n, jnp.float32)]
    ref = jax.new_ref(jnp.zeros(n, jnp.float32))
    through_ref = jax.jit(lambda r: tritonplug.triton_call(r, n, kernel=add_one_in_place, out_type=(), grid=grid,
                                                           BLOCK=block))

    def donated_call(_i: int):
        chain[0] = donated(chain[0])
        return chain[0]

    def ref_call(_i: int):
        through_ref(ref)
        return ref

    impls = {"triton (torch), in place": (torch_launch, lambda out: torch.cuda.synchronize()),
             "tritonplug, aliases, not donated": (lambda i: copied(kept), jax.block_until_ready),
             "tritonplug, aliases, donated": (donated_call, jax.block_until_ready),
             "tritonplug, jax.new_ref": (ref_call, lambda r: jax.block_until_ready(r[...]))}
    records = []
    for name, (call, sync) in impls.items():
        samples = batched_seconds(call, args.calls, args.reps, warmup_calls=3, sync=sync)
        records.append({"bench": f"x += 1, 2^{n.bit_length() - 1} fp32", "impl": name, **summarize(samples)})
    # every path added 1 per call: the values count the calls each made
    counts = {"donated": float(to_numpy(chain[0])[0]), "ref": float(to_numpy(ref[...])[0]),
              "torch": float(tx[0].item()), "not donated": float(to_numpy(copied(kept))[0])}
    records[0]["note"] = f"calls counted by the buffers: {counts}"
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/results/binding-order-gpu.json")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    records = rms_group(8192, 8192, args) + rms_group(16384, 1024, args) + in_place_group(1 << 26, args)
    for group in {r["bench"] for r in records}:
        rows = [r for r in records if r["bench"] == group]
        base = rows[0]["median_us"]
        for r in rows:
            r["ratio_vs_triton"] = r["median_us"] / base
    print(format_table(records, ["bench", "impl", "median_us", "min_us", "max_us", "ratio_vs_triton",
                                 "max_abs_diff"]))
    write_json(args.out, records, ratios={f"{r['bench']} | {r['impl']}": r["ratio_vs_triton"] for r in records})
    return 0


if __name__ == "__main__":
    sys.exit(main())
