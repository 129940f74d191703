"""Hopper benchmarks for ``bench/gpu.py``: a TMA matmul beside a pointer matmul, and a layer norm whose
``eps`` is a Python float, each tritonplug vs the same kernel launched by Triton on torch tensors.

Groups ``tma_matmul`` and ``layer_norm`` of ``bench/gpu.py`` (``--only tma_matmul,layer_norm``). The
pointer and TMA matmuls use the same tile (128x256x64, 8 warps, 3 stages), so their ratio to Triton
isolates the call path: descriptors encoded by jaxlib's runtime vs by Triton's launcher. The layer norm
passes ``eps=1e-5``; tritonplug types it fp32 as Triton does (an fp64 ``eps`` turns the normalisation
into double-precision arithmetic).
"""

from __future__ import annotations

from typing import Any

from _util import check, load_example, to_numpy

TILE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}
TILE_OPTIONS = {"num_warps": 8, "num_stages": 3}


def bench_tma_matmul(run: Any) -> None:
    """fp16 4096^3: the example's pointer kernel (one fixed tile) and ``examples/tma_matmul.py``."""
    import jax
    import jax.numpy as jnp
    import triton

    import tritonplug

    pointer_example = load_example("matmul")
    tma_example = load_example("tma_matmul")
    pointer_kernel = pointer_example.matmul_kernel.fn  # the @triton.jit under its autotuner: one tile
    m = n = k = 256 if run.smoke else 4096
    tile = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32} if run.smoke else TILE
    options = {"num_warps": 4, "num_stages": 2} if run.smoke else TILE_OPTIONS
    flops = 2 * m * n * k
    sets_n = 1 if run.smoke else 4
    keys = jax.random.split(jax.random.key(21), 2 * sets_n)
    sets = [(jax.random.normal(keys[2 * i], (m, k), jnp.float16), jax.random.normal(keys[2 * i + 1], (k, n),
                                                                                     jnp.float16))
            for i in range(sets_n)]
    want = jnp.dot(sets[0][0].astype(jnp.float32), sets[0][1].astype(jnp.float32))
    tol = 0.05 * float(jnp.max(jnp.abs(want))) + 0.5
    grid_1d = (triton.cdiv(m, tile["BLOCK_M"]) * triton.cdiv(n, tile["BLOCK_N"]),)
    grid_2d = (triton.cdiv(m, tile["BLOCK_M"]), triton.cdiv(n, tile["BLOCK_N"]))

    def pointer(a: Any, b: Any) -> Any:
        return tritonplug.triton_call(a, b, m, n, k, k, 1, n, 1, n, 1, kernel=pointer_kernel,
                                      out_type=jax.ShapeDtypeStruct((m, n), a.dtype), grid=grid_1d, GROUP_M=8,
                                      **tile, **options)

    def tma(a: Any, b: Any) -> Any:
        return tma_example.tma_matmul(a, b, tile["BLOCK_M"], tile["BLOCK_N"], tile["BLOCK_K"], **options)

    for bench, fn in (("matmul_pointer_fp16", pointer), ("matmul_tma_fp16", tma)):
        common = {"shape": [m, n, k], "dtype": "float16", "config": f"{tile} {options}"}
        jitted = jax.jit(fn)
        with run.results.guard(bench, "tritonplug", **common):
            first = jitted(*sets[0])
            r = run.results.add(bench, "tritonplug", **run.time_jax(jitted, sets, 2 * m * n), **common)
            r["tflops"] = flops / (r["median_us"] * 1e-6) / 1e12
            check(r, first, want, tol)
        if run.skip_native(bench, **common):
            continue
        torch = run.torch
        with run.results.guard(bench, "triton_native", **common):
            from triton.tools.tensor_descriptor import TensorDescriptor

            tsets = [(torch.randn((m, k), device="cuda", dtype=torch.float16),
                      torch.randn((k, n), device="cuda", dtype=torch.float16),
                      torch.empty((m, n), device="cuda", dtype=torch.float16)) for _ in range(sets_n)]
            if bench == "matmul_pointer_fp16":
                def launch(i: int, tsets: list = tsets) -> None:
                    a, b, c = tsets[i % sets_n]
                    pointer_kernel[grid_1d](a, b, m, n, k, k, 1, n, 1, n, 1, c, GROUP_M=8, **tile, **options)
            else:
                descs = [(TensorDescriptor.from_tensor(a, [tile["BLOCK_M"], tile["BLOCK_K"]]),
                          TensorDescriptor.from_tensor(b, [tile["BLOCK_K"], tile["BLOCK_N"]]),
                          TensorDescriptor.from_tensor(c, [tile["BLOCK_M"], tile["BLOCK_N"]])) for a, b, c in tsets]

                def launch(i: int, descs: list = descs) -> None:
                    a_desc, b_desc, c_desc = descs[i % sets_n]
                    tma_example.tma_matmul_kernel[grid_2d](a_desc, b_desc, c_desc, k, **tile, **options)

            launch(0)
            torch.cuda.synchronize()
            r = run.results.add(bench, "triton_native", **run.time_torch(launch, sets_n), **common)
            r["tflops"] = flops / (r["median_us"] * 1e-6) / 1e12
            a, b, c = tsets[0]
            check(r, to_numpy(c), to_numpy(a.float() @ b.float()), tol)
    del sets, want
    run.free()


def bench_layer_norm(run: Any) -> None:
    """Forward layer norm of 4096 x 8192 fp32 rows with ``eps=1e-5`` (a Python float)."""
    import jax
    import jax.numpy as jnp
    import triton

    ex = load_example("layer_norm")
    rows, cols = (8, 256) if run.smoke else (4096, 8192)
    block = triton.next_power_of_2(cols)
    eps = 1e-5
    bench = f"layer_norm_{rows}x{cols}"
    common = {"shape": [rows, cols], "dtype": "float32", "eps": eps, "BLOCK": block}
    keys = jax.random.split(jax.random.key(22), 3)
    x = jax.random.normal(keys[0], (rows, cols), jnp.float32)
    w = jax.random.normal(keys[1], (cols,), jnp.float32)
    b = jax.random.normal(keys[2], (cols,), jnp.float32)
    want = ex.layer_norm_reference(x, w, b, eps)
    nbytes = 2 * 4 * rows * cols
    with run.results.guard(bench, "tritonplug", **common):
        fn = jax.jit(lambda x, w, b: ex.layer_norm(x, w, b, eps))
        r = run.results.add(bench, "tritonplug", **run.time_jax(fn, [(x, w, b)], 4 * rows * cols), **common)
        r["gbps"] = nbytes / (r["median_us"] * 1e-6) / 1e9
        check(r, fn(x, w, b), want, 1e-3)
    if run.skip_native(bench, **common):
        return
    torch = run.torch
    with run.results.guard(bench, "triton_native", **common):
        tx = torch.randn((rows, cols), device="cuda")
        tw, tb = torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda")
        ty = torch.empty_like(tx)
        mean, rstd = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")

        def launch(i: int) -> None:
            ex.layer_norm_fwd_kernel[(rows,)](tx, tw, tb, cols, eps, ty, mean, rstd, BLOCK=block)

        r = run.results.add(bench, "triton_native", **run.time_torch(launch, 1), **common)
        r["gbps"] = nbytes / (r["median_us"] * 1e-6) / 1e9
        launch(0)
        ref = torch.nn.functional.layer_norm(tx, (cols,), tw, tb, eps)
        check(r, to_numpy(ty), to_numpy(ref), 1e-3)
    run.free()
