"""Grouped-matmul calls in a fresh process, for finding which launch faults (a fault poisons the process's CUDA
context, so ``bench/moe.py`` cannot tell): ``python bench/moe_probe.py WHAT M K N EXPERTS [BLOCK_M]``, WHAT one of
``ragged`` (XLA's ``ragged_dot``), ``gmm`` (``gathered_matmul`` on an eager plan), ``gmmjit``/``fbjit``
(``grouped_matmul`` and its gradient under ``jit``), ``both``/``both-rev`` (``ragged_dot`` and ``grouped_matmul``
in one process, in either order), ``dw`` (the gradient in ``rhs``), ``torch-CONFIG`` (vLLM's kernel launched by
Triton on torch tensors with configuration number CONFIG)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main(what: str, m: int, k: int, n: int, g: int, bm: int | None = None) -> None:
    import jax
    import jax.numpy as jnp
    from moe import group_sizes

    from examples.moe import grouped, kernels

    lhs = jax.random.normal(jax.random.key(0), (m, k), jnp.bfloat16)
    rhs = (jax.random.normal(jax.random.key(1), (g, k, n), jnp.float32) / k ** 0.5).astype(jnp.bfloat16)
    sizes = jnp.asarray(group_sizes(m, g, 1.0, 0))
    plan = kernels.block_plan(sizes, m, bm or kernels.block_size_m(m, g, False))
    if what in ("both", "both-rev"):
        calls = [jax.jit(jax.lax.ragged_dot), jax.jit(grouped.grouped_matmul)]
        outs = [print("calling", f, flush=True) or f(lhs, rhs, sizes).block_until_ready()
                for f in (calls if what == "both" else calls[::-1])]
        out = outs[0] - outs[1]
    elif what == "gmmjit":
        out = jax.jit(grouped.grouped_matmul)(lhs, rhs, sizes)
    elif what == "fbjit":
        out = jax.jit(jax.grad(lambda a, r, s: jnp.sum(grouped.grouped_matmul(a, r, s).astype(jnp.float32)),
                               argnums=1))(lhs, rhs, sizes)
    elif what == "ragged":
        out = jax.lax.ragged_dot(lhs, rhs, sizes)
    elif what == "gmm":
        out = grouped.gathered_matmul(lhs, rhs, plan, 1, jnp.dtype(jnp.bfloat16), False)
    elif what == "dw":
        out = jax.grad(lambda r: jnp.sum(grouped.gathered_matmul(lhs, r, plan, 1, jnp.dtype(jnp.bfloat16), False)
                                         .astype(jnp.float32)))(rhs)
    else:
        import torch
        import triton

        config = kernels.FORWARD_CONFIGS[int(what.split("-")[1])]
        t = {name: torch.from_dlpack(x) for name, x in (("a", lhs), ("b", rhs), ("ids", plan.sorted_token_ids),
                                                        ("e", plan.expert_ids), ("p", plan.num_tokens_post_padded))}
        c = torch.zeros((m, n), dtype=torch.bfloat16, device="cuda")
        em = plan.padded_rows
        grid = (triton.cdiv(em, plan.block_size_m) * triton.cdiv(n, config.kwargs["BLOCK_SIZE_N"]),)
        kernels.vllm_kernels().fused_moe_kernel[grid](
            t["a"], t["b"], c, None, None, None, None, t["ids"], t["e"], t["p"], n, k, em, m, k, 1, k * n, n, 1, n, 1,
            0, 0, 0, 0, 0, 0, 0, 0, 0, MUL_ROUTED_WEIGHT=False, top_k=1, compute_type=triton.language.bfloat16,
            use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
            naive_block_assignment=False, HAS_BIAS=False, BLOCK_SIZE_M=plan.block_size_m, SPLIT_K=1, SWAP_AB=False,
            USE_TD=False, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)
        torch.cuda.synchronize()
        out = jnp.asarray(c.float().cpu().numpy())
    print(what, m, k, n, g, "block_m", plan.block_size_m, "ok", float(jnp.sum(jnp.abs(out.astype(jnp.float32)))))


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
