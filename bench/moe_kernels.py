"""The grouped matmul's kernels one by one, launched by Triton itself on torch tensors, each configuration timed
against cuBLAS's matmul of the same FLOPs (torch): where the forward + backward's time goes (docs/moe.md).

    python bench/moe_kernels.py --out bench/results/moe-h200/runN/kernels.json [--experts 8,64] [--block-m 64,128]

Per shape (``bench/moe.py``'s gmm shapes, Dirichlet group sizes) and alignment block ``BLOCK_SIZE_M`` (the plan's,
``kernels.block_size_m`` by default): the forward (vLLM's ``fused_moe_kernel``), dX (the same kernel on each
expert's transpose) and dW (``kernels.grouped_matmul_dw_kernel``) under every configuration of their lists, and
the forward and dX of a candidate read through tensor descriptors (``_moe_tma.py``, ``forward tma``/``dX tma``), each
timed by ``triton.testing.do_bench`` (median), and the dense matmuls of the same shapes (``x @ w``, ``dy @ w.T``,
``x.T @ dy``). Every kernel's output is checked against torch's grouped reference once (its first configuration).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _util import Results, format_table, write_json  # noqa: E402
from moe import GMM_SHAPES, group_sizes  # noqa: E402


def _reference(x, w, dy, sizes):
    """Per group: ``x_e @ w_e``, ``dy_e @ w_e.T`` and ``x_e.T @ dy_e`` in fp32 (torch)."""
    import torch

    ends = torch.cumsum(sizes, 0).tolist()
    starts = [0, *ends[:-1]]
    out = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float32, device=x.device)
    dx = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    dw = torch.zeros(w.shape, dtype=torch.float32, device=x.device)
    for e, (s, t) in enumerate(zip(starts, ends, strict=True)):
        xe, dye, we = x[s:t].float(), dy[s:t].float(), w[e].float()
        out[s:t], dx[s:t], dw[e] = xe @ we, dye @ we.T, xe.T @ dye
    return {"forward": out, "dX": dx, "dW": dw}


def run_shape(results: Results, label: str, m: int, k: int, n: int, g: int, block_m: int | None, args) -> None:
    import jax.numpy as jnp
    import torch
    import triton
    import triton.language as tl
    from triton.testing import do_bench

    from examples.moe import kernels

    block = block_m or kernels.block_size_m(m, g, False)
    bench = f"kernels {label} m={m} k={k} n={n} experts={g} block_m={block}"
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = (torch.randn(g, k, n, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    sizes_np = group_sizes(m, g, args.alpha, args.seed)
    plan = kernels.block_plan(jnp.asarray(sizes_np), m, block)
    t_plan = dataclasses.replace(plan, **{f: torch.from_dlpack(getattr(plan, f)) for f in (
        "sorted_token_ids", "expert_ids", "num_tokens_post_padded", "expert_offsets", "group_ends")})
    want = _reference(x, w, dy, torch.from_numpy(sizes_np).cuda().long()) if args.check else None
    fused = kernels.vllm_kernels().fused_moe_kernel

    def matmul_launch(a, n_out, transpose_b, config):
        c = torch.zeros((m, n_out), dtype=torch.bfloat16, device="cuda")
        grid, launch_args, kw = kernels.fused_moe_launch(a, w, c, None, t_plan, False, 1, tl.bfloat16, transpose_b)
        return lambda: fused[grid](*launch_args, **kw, **config.kwargs, num_warps=config.num_warps,
                                   num_stages=config.num_stages), c

    def dw_launch(kernel, plan_of_kernel, config):
        c = torch.empty((g, k, n), dtype=torch.bfloat16, device="cuda")
        grid, launch_args, kw = kernels.dw_launch(x, dy, c, plan_of_kernel, g, 1)
        return lambda: kernel[grid](
            *launch_args, **kw, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages), c

    # the row-id kernel on the same rows: the plan as if they were not in group order
    by_ids = functools.partial(dw_launch, kernels.grouped_matmul_dw_kernel, dataclasses.replace(t_plan, in_order=False))
    on_rows = functools.partial(dw_launch, kernels.grouped_matmul_dw_rows_kernel, t_plan)
    assert kernels.uses_dw_rows(t_plan, 1), "grouped_matmul's plan reads dW on rows"

    def tma_launch(a, n_out, inner, transpose_b, config):
        from _moe_tma import grouped_matmul_tma_kernel
        from triton.tools.tensor_descriptor import TensorDescriptor

        bn, bk = config.kwargs["BLOCK_N"], config.kwargs["BLOCK_K"]
        c = torch.zeros((m, n_out), dtype=torch.bfloat16, device="cuda")
        a_desc = TensorDescriptor.from_tensor(a, [block, bk])
        b_desc = TensorDescriptor.from_tensor(w.reshape(g * k, n), [bn, bk] if transpose_b else [bk, bn])
        grid = (t_plan.padded_rows // block, triton.cdiv(n_out, bn))
        return lambda: grouped_matmul_tma_kernel[grid](
            a_desc, b_desc, c, t_plan.sorted_token_ids, t_plan.expert_ids, t_plan.group_ends, m, n_out, inner, k,
            c.stride(0), BLOCK_M=block, BLOCK_N=bn, BLOCK_K=bk, TRANSPOSE_B=transpose_b, num_warps=config.num_warps,
            num_stages=config.num_stages), c

    from _moe_tma import TMA_CONFIGS
    kernels_timed = {
        "forward tma": (TMA_CONFIGS, lambda c: tma_launch(x, n, k, False, c)),
        "dX tma": (TMA_CONFIGS, lambda c: tma_launch(dy, k, n, True, c)),
        "forward": (kernels.fit_forward_configs(kernels.FORWARD_CONFIGS, {"BLOCK_SIZE_M": block, "a_ptr": x}),
                    lambda c: matmul_launch(x, n, False, c)),
        "dX": (kernels.fit_forward_configs(kernels.FORWARD_CONFIGS, {"BLOCK_SIZE_M": block, "a_ptr": dy}),
               lambda c: matmul_launch(dy, k, True, c)),
        "dW": (kernels.fit_dw_configs(kernels.DW_CONFIGS, {"a_ptr": x}), by_ids),
        "dW rows": (kernels.fit_dw_configs(kernels.DW_CONFIGS, {"a_ptr": x}), on_rows),
    }
    dense = {"forward": lambda: x @ w[0], "dX": lambda: dy @ w[0].T, "dW": lambda: x.T @ dy,
             "dW rows": lambda: x.T @ dy, "forward tma": lambda: x @ w[0], "dX tma": lambda: dy @ w[0].T}
    for name, (configs, make) in kernels_timed.items():
        with results.guard(bench, f"{name} dense"):
            dense_ms = do_bench(dense[name], warmup=args.warmup, rep=args.rep, return_mode="median")
            results.add(bench, f"{name} dense", median_us=dense_ms * 1e3)
        for i, config in enumerate(configs):
            with results.guard(bench, f"{name} config {i}"):
                launch, out = make(config)
                launch()
                check = None
                if want is not None and i == 0:
                    ref = want[name.split()[0]]
                    diff = (out.float() - ref).abs().max().item()
                    scale = ref.abs().max().item() or 1.0
                    check = "ok" if diff <= 2e-2 * scale else f"MISMATCH: max |diff| {diff:.3g} of {scale:.3g}"
                ms = do_bench(launch, warmup=args.warmup, rep=args.rep, return_mode="median")
                results.add(bench, f"{name} config {i}", median_us=ms * 1e3, over_dense=ms / dense_ms,
                            config=str(config), check=check)
        torch.cuda.synchronize()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experts", type=lambda s: [int(x) for x in s.split(",")], help="only these expert counts")
    p.add_argument("--block-m", type=lambda s: [int(x) for x in s.split(",")], help="alignment blocks to time "
                   "(default: the plan's)")
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=25, help="do_bench's warm-up, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench's repetition time, ms")
    p.add_argument("--no-check", dest="check", action="store_false")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    results = Results()
    for label, m, k, n, g in GMM_SHAPES:
        if args.experts and g not in args.experts:
            continue
        for block in args.block_m or [None]:
            run_shape(results, label, m, k, n, g, block, args)
            write_json(args.out, results.records, alpha=args.alpha)
    print(format_table(results.records, ["bench", "impl", "median_us", "over_dense", "check", "error"]))


if __name__ == "__main__":
    main()
