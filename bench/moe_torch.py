"""``bench/moe.py --parts torch``: the grouped matmul's kernels launched by Triton itself on torch tensors, against
tritonplug's outputs on the same inputs and the same block plan.

tritonplug's calls are autotuned, so its output is compared with Triton's launch under every configuration of
the kernel's list: one of them is the configuration the autotuner kept, and its output must be bitwise equal
(``bitwise_equal_configs`` names those that are); ``max_abs_diff`` is the smallest difference over the list.
Forward (vLLM's ``fused_moe_kernel``), dX (the same kernel on each expert's transpose) and dW (our kernel).
"""

from __future__ import annotations

import dataclasses

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

    t = {name: torch.from_dlpack(x) for name, x in (("lhs", lhs), ("rhs", rhs), ("dout", dout))}
    # the same plan, its arrays as torch tensors (one launch's arguments: kernels.fused_moe_launch / dw_launch)
    t_plan = dataclasses.replace(plan, **{f: torch.from_dlpack(getattr(plan, f)) for f in (
        "sorted_token_ids", "expert_ids", "num_tokens_post_padded", "expert_offsets", "group_ends")})
    fused = kernels.vllm_kernels().fused_moe_kernel

    def forward(config, a, n_out, transpose_b):
        c = torch.zeros((m, n_out), dtype=torch.bfloat16, device="cuda")
        grid, launch_args, kwargs = kernels.fused_moe_launch(a, t["rhs"], c, None, t_plan, False, 1,
                                                             triton.language.bfloat16, transpose_b)
        _torch_launch(fused, grid, config, *launch_args, **kwargs)
        return c

    def dw(config):
        c = torch.empty((g, k, n), dtype=torch.bfloat16, device="cuda")
        grid, launch_args, kwargs = kernels.dw_launch(t["lhs"], t["dout"], c, t_plan, g, 1)
        _torch_launch(kernels.dw_kernel(t_plan, 1), grid, config, *launch_args, **kwargs)
        return c

    launches = {"forward": (kernels.FORWARD_CONFIGS, lambda c: forward(c, t["lhs"], n, False)),
                "dX": (kernels.FORWARD_CONFIGS, lambda c: forward(c, t["dout"], k, True)),
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
