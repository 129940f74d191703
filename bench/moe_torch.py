"""``bench/moe.py --parts torch``: the grouped matmul's kernels launched by Triton itself on torch tensors, against
tritonplug's outputs on the same inputs and the same block plan.

tritonplug's calls are autotuned, so its output is compared with Triton's launch under every configuration of
the kernel's list: one of them is the configuration the autotuner kept, and its output must be bitwise equal
(``bitwise_equal_configs`` names those that are); ``max_abs_diff`` is the smallest difference over the list.
Forward (vLLM's ``fused_moe_kernel``), dX (the same kernel on each expert's transpose) and dW (our kernel).
"""

from __future__ import annotations

import numpy as np


def _torch_launch(kernel, grid, config, *args, **kwargs):
    kernel[grid](*args, **kwargs, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)


def part_torch(results, args, group_sizes) -> None:
    import jax
    import jax.numpy as jnp
    import triton

    m, k, n, g = (96, 32, 48, 4) if args.smoke else (8192, 1024, 768, 16)
    bench = f"torch launch m={m} k={k} n={n} experts={g}"
    try:
        import torch
    except ImportError:
        results.skip(bench, "triton-on-torch", "needs torch with a CUDA device")
        return

    from examples.moe import grouped, kernels

    if not torch.cuda.is_available():
        results.skip(bench, "triton-on-torch", "needs torch with a CUDA device")
        return
    keys = jax.random.split(jax.random.key(1), 3)
    lhs = jax.random.normal(keys[0], (m, k), jnp.bfloat16)
    rhs = (jax.random.normal(keys[1], (g, k, n), jnp.float32) / k ** 0.5).astype(jnp.bfloat16)
    dout = jax.random.normal(keys[2], (m, n), jnp.bfloat16)
    sizes = jnp.asarray(group_sizes(m, g, args.alpha, args.seed))
    plan = kernels.block_plan(sizes, m, kernels.block_size_m(m, g, False))
    ours = {"forward": grouped.gathered_matmul(lhs, rhs, plan, 1, jnp.dtype(jnp.bfloat16), False)}
    _, vjp = jax.vjp(lambda a, b: grouped.gathered_matmul(a, b, plan, 1, jnp.dtype(jnp.bfloat16), False), lhs, rhs)
    ours["dX"], ours["dW"] = vjp(dout)

    t = {name: torch.from_dlpack(x) for name, x in (("lhs", lhs), ("rhs", rhs), ("dout", dout),
                                                    ("ids", plan.sorted_token_ids), ("experts", plan.expert_ids),
                                                    ("ntpp", plan.num_tokens_post_padded),
                                                    ("offsets", plan.expert_offsets))}
    fused = kernels.vllm_kernels().fused_moe_kernel
    em, bm = plan.padded_rows, plan.block_size_m

    def forward(config, a, n_out, k_in, stride_bk, stride_bn):
        c = torch.zeros((m, n_out), dtype=torch.bfloat16, device="cuda")
        grid = (triton.cdiv(em, bm) * triton.cdiv(n_out, config.kwargs["BLOCK_SIZE_N"]),)
        _torch_launch(fused, grid, config, a, t["rhs"], c, None, None, None, None,
                      t["ids"], t["experts"], t["ntpp"],
                      n_out, k_in, em, m, a.stride(0), 1, k * n, stride_bk, stride_bn, c.stride(0), 1,
                      0, 0, 0, 0, 0, 0, 0, 0, 0, MUL_ROUTED_WEIGHT=False, top_k=1,
                      compute_type=triton.language.bfloat16,
                      use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
                      naive_block_assignment=False, HAS_BIAS=False, BLOCK_SIZE_M=bm, SPLIT_K=1, SWAP_AB=False,
                      USE_TD=False)
        return c

    def dw(config):
        c = torch.empty((g, k, n), dtype=torch.bfloat16, device="cuda")
        grid = (triton.cdiv(k, config.kwargs["BLOCK_SIZE_K"]) * triton.cdiv(n, config.kwargs["BLOCK_SIZE_N"]), g)
        _torch_launch(kernels.grouped_matmul_dw_kernel, grid, config, t["lhs"], t["dout"], c, t["ids"], t["offsets"],
                      k, n, m, k, 1, n, 1, k * n, n, 1, top_k=1)
        return c

    launches = {"forward": (kernels.FORWARD_CONFIGS, lambda c: forward(c, t["lhs"], n, k, n, 1)),
                "dX": (kernels.FORWARD_CONFIGS, lambda c: forward(c, t["dout"], k, n, 1, n)),
                "dW": (kernels.DW_CONFIGS, dw)}
    for name, (configs, launch) in launches.items():
        with results.guard(bench, name):
            want = np.asarray(ours[name], np.float32)
            diffs, equal = [], []
            for i, config in enumerate(configs):
                got = launch(config).float().cpu().numpy()
                diffs.append(float(np.max(np.abs(got - want))))
                if np.array_equal(got, want):
                    equal.append(i)
            results.add(bench, name, median_us=None, max_abs_diff=min(diffs), diffs_per_config=diffs,
                        bitwise_equal_configs=equal,
                        check="ok" if equal else "MISMATCH: no configuration is bitwise equal")
