"""Grouped-matmul calls in a fresh process, for finding which launch faults (a fault poisons the process's CUDA
context, so ``bench/moe.py`` cannot tell): ``python bench/moe_probe.py WHAT M K N EXPERTS [BLOCK_M]``, WHAT one of
``ragged`` (XLA's ``ragged_dot``), ``gmm`` (``gathered_matmul`` on an eager plan), ``gmmjit``/``fbjit``
(``grouped_matmul`` and its gradient under ``jit``), ``both``/``both-rev`` (``ragged_dot`` and ``grouped_matmul``
in one process, in either order), ``dw`` (the gradient in ``rhs``), ``torch-CONFIG`` (vLLM's kernel launched by
Triton on torch tensors with configuration number CONFIG)."""

from __future__ import annotations

import dataclasses
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
        t_plan = dataclasses.replace(plan, **{f: torch.from_dlpack(getattr(plan, f)) for f in (
            "sorted_token_ids", "expert_ids", "num_tokens_post_padded", "expert_offsets")})
        c = torch.zeros((m, n), dtype=torch.bfloat16, device="cuda")
        grid, args, kwargs = kernels.fused_moe_launch(torch.from_dlpack(lhs), torch.from_dlpack(rhs), c, None, t_plan,
                                                      False, 1, triton.language.bfloat16)
        kernels.vllm_kernels().fused_moe_kernel[grid](*args, **kwargs, **config.kwargs, num_warps=config.num_warps,
                                                      num_stages=config.num_stages)
        torch.cuda.synchronize()
        out = jnp.asarray(c.float().cpu().numpy())
    print(what, m, k, n, g, "block_m", plan.block_size_m, "ok", float(jnp.sum(jnp.abs(out.astype(jnp.float32)))))


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
