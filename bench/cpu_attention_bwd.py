"""CPU: how long Triton's tutorial attention backward (``06-fused-attention.py``'s ``_attn_bwd``) takes to compile
on the XLA path, each measurement in a fresh process.

    python bench/cpu_attention_bwd.py --tutorial PATH [--reps 5] [--shape 1,2,1024,64]
                                      [--out bench/results/cpu-attention-bwd.json]

``PATH`` is a copy of Triton's ``python/tutorials/06-fused-attention.py`` (or any file defining ``_attn_bwd`` as it
does): the tutorial is Triton's code, not this repository's, so bring it. Its kernels are loaded from source with
``tritonplug.kernels_from_file`` (the file imports torch at the top; torch is not needed). The launch is the
tutorial's backward launch (``BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2 = 32, 128, 128, 32``, ``BLK_SLICE_FACTOR=2``,
grid ``(N_CTX // 128, 1, Z * H)``) on the tutorial test's shape (Z, H, N_CTX, HEAD_DIM) = (1, 2, 1024, 64), fp16.

Per rep, two fresh Python processes each lower, compile and run the call once: one as its first JAX work
(``first``: the imports and JAX's one-time set-up included), one after a small kernel ran (``warmed``). Figures:
``lower_s`` (Triton's front end out of the warm on-disk cache, the TTIR's translation, JAX's trace), ``compile_s``
(XLA's compile), ``run_s`` (the first run), ``total_s`` (the three: what a user waits for). Each process checks dQ,
dK and dV against NumPy's attention backward (float64). The very first process fills a scratch
``TRITONPLUG_CACHE_DIR`` and is reported as ``cold cache``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import ROOT, Results, format_table, write_json  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "cpu-attention-bwd.json"
BLOCKS = {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32, "BLK_SLICE_FACTOR": 2}
SM_SCALE = 0.5
TOLERANCE = 1e-2   # the tutorial's own test: atol 1e-2 against torch's autograd


def reference(q, k, v, do, sm_scale):  # noqa: ANN001, ANN201 (NumPy arrays)
    """Causal softmax attention's backward in float64: (dq, dk, dv), and the tutorial's M and Delta inputs."""
    import numpy as np

    q, k, v, do = (a.astype(np.float64) for a in (q, k, v, do))
    n = q.shape[-2]
    s = np.einsum("zhmd,zhnd->zhmn", q, k) * sm_scale
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    denominator = p.sum(-1, keepdims=True)
    p /= denominator
    o = p @ v
    dv = np.einsum("zhmn,zhmd->zhnd", p, do)
    dp = do @ np.swapaxes(v, -1, -2)
    delta = (o * do).sum(-1)
    ds = p * (dp - delta[..., None])
    dq = ds @ k * sm_scale
    dk = np.einsum("zhmn,zhmd->zhnd", ds, q) * sm_scale
    m = (s.max(-1) + np.log(denominator[..., 0])) / np.log(2)    # the forward's log-sum-exp, base 2
    return (dq, dk, dv), m, delta


def warm_up() -> None:
    """Compile and run a small kernel first: the imports and JAX's one-time set-up a process pays once."""
    import jax
    import numpy as np
    import triton
    import triton.language as tl

    import tritonplug

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.exp2(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)

    x = np.ones(1000, np.float32)
    jax.block_until_ready(jax.jit(lambda a: tritonplug.triton_call(
        x_ptr=a, n=a.size, kernel=scale_kernel, out_type=jax.ShapeDtypeStruct(a.shape, a.dtype), grid=(8,),
        BLOCK=128))(x))


def child(tutorial: str, shape: tuple[int, int, int, int], warmed: bool) -> dict:
    """One measurement, in this fresh process (after ``warm_up`` when ``warmed``)."""
    import jax
    import numpy as np

    import tritonplug

    if warmed:
        warm_up()

    z, h, n, d = shape
    rng = np.random.default_rng(20)
    q, k, v = (rng.normal(0.0, 0.5, shape).astype(np.float16) for _ in range(3))
    do = rng.normal(0.0, 1.0, shape).astype(np.float16)
    want, m, delta = reference(q, k, v, do, SM_SCALE)
    arg_k = (k.astype(np.float32) * (SM_SCALE * 1.4426950408889634)).astype(np.float16)
    kernel = tritonplug.kernels_from_file(tutorial)._attn_bwd

    def backward(q, k, v, do, m, delta):  # noqa: ANN001, ANN202 (JAX values)
        # the tutorial's _attn_bwd[grid](q, arg_k, v, sm_scale, do, dq, dk, dv, M, delta, strides..., H, N_CTX, ...):
        # the outputs dq, dk, dv stand between inputs; out_type fills them
        out = jax.ShapeDtypeStruct(shape, np.float16)
        return tritonplug.triton_call(
            Q=q, K=k, V=v, sm_scale=SM_SCALE, DO=do, M=m, D=delta, stride_z=h * n * d, stride_h=n * d,
            stride_tok=d, stride_d=1, H=h, N_CTX=n, kernel=kernel, out_type=(out, out, out),
            grid=(n // BLOCKS["BLOCK_N1"], 1, z * h), HEAD_DIM=d, **BLOCKS)

    operands = (q, arg_k, v, do, m.astype(np.float32), delta.astype(np.float32))
    start = time.perf_counter()
    lowered = jax.jit(backward).lower(*operands)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    got = jax.block_until_ready(compiled(*operands))
    done = time.perf_counter()
    host_call = "tritonplug_host_kernel" in lowered.as_text()
    diffs = [float(np.max(np.abs(np.asarray(g, np.float64) - w))) for g, w in zip(got, want, strict=True)]
    return {"lower_s": lowered_at - start, "compile_s": compiled_at - lowered_at, "run_s": done - compiled_at,
            "total_s": done - start, "path": "interpreter" if host_call else "xla", "max_abs_diff": max(diffs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tutorial", required=True, help="a copy of Triton's tutorials/06-fused-attention.py")
    parser.add_argument("--reps", type=int, default=5, help="warm-cache processes (median taken)")
    parser.add_argument("--shape", default="1,2,1024,64", help="Z,H,N_CTX,HEAD_DIM (the tutorial test's)")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--child", choices=("first", "warmed"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = tuple(int(x) for x in args.shape.split(","))
    if args.child:
        print(json.dumps(child(str(Path(args.tutorial).resolve()), shape, args.child == "warmed")))
        return 0

    results = Results()
    with tempfile.TemporaryDirectory(prefix="tritonplug-attn-bwd-") as cache:
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "TRITONPLUG_CACHE_DIR": cache}
        runs: dict[str, list[dict]] = {"first": [], "warmed": []}
        for rep in range(args.reps + 1):
            for kind in ("first", "warmed") if rep else ("first",):
                command = [sys.executable, __file__, "--child", kind, "--tutorial", args.tutorial,
                           "--shape", args.shape]
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
                if done.returncode:
                    print(done.stderr[-4000:], file=sys.stderr)
                    raise SystemExit(f"the measuring process failed (exit {done.returncode})")
                run = json.loads(done.stdout.strip().splitlines()[-1])
                results.add("attention_bwd", f"{kind} {rep}" if rep else "cold cache", **run)
                if rep:
                    runs[kind].append(run)
    for kind, measured in runs.items():
        summary = {f: statistics.median(r[f] for r in measured)
                   for f in ("lower_s", "compile_s", "run_s", "total_s")}
        results.add("attention_bwd", f"median {kind}", **summary, path=measured[0]["path"],
                    max_abs_diff=max(r["max_abs_diff"] for r in measured))
    print(format_table(results.records, ["impl", "lower_s", "compile_s", "run_s", "total_s", "path",
                                         "max_abs_diff"]))
    bad = [r for r in results.records if r["max_abs_diff"] > TOLERANCE]
    write_json(args.out, results.records, shape=shape, blocks=BLOCKS, tolerance=TOLERANCE,
               goal="total_s <= 3 on the CPU (warm on-disk cache: Triton's front end excluded)")
    print(f"wrote {args.out}")
    if bad:
        print(f"WRONG: max abs diff above {TOLERANCE} in {[r['impl'] for r in bad]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
