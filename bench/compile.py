"""Compile-path benchmarks for sm_90, on any machine (no GPU needed): see bench/README.md.

(a) one GEMM configuration: front end + ``triton.compile`` in this process vs the same through a warm
    compile worker (the tritonplug path, disk cache off, a fresh key each rep so no layer can hit);
(b) an 8-configuration autotuned GEMM lowered with 1 compile worker vs min(cores, 8) workers;
(c) a new process lowering that GEMM program with a cold vs a warm disk cache;
(d) that cold lowering against (its slowest configuration's compile + a new process's pool start).

Usage: python bench/compile.py [--reps N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering for cuda needs no CUDA runtime
os.environ.setdefault("TRITONPLUG_CUDA_ARCH", "90")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import triton  # noqa: E402

import tritonplug  # noqa: E402
from tritonplug.compile import workers  # noqa: E402
from tritonplug.compile.compiler import CompileRequest  # noqa: E402
from tritonplug.process.state import state  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import load_example  # noqa: E402

CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
    for bm, bn, bk, s, w in [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 64, 64, 4, 4),
                             (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 64, 32, 5, 2), (32, 64, 32, 5, 2)]
]


matmul_kernel = load_example("matmul").matmul_kernel.fn  # the example's kernel, without its 4 configs
tuned_matmul_kernel = triton.autotune(configs=CONFIGS, key=["M", "N", "K"])(matmul_kernel)
SHAPE = (1024, 1024)


def matmul(a, b, kernel=tuned_matmul_kernel, **metaparams):
    (m, k), (_, n) = a.shape, b.shape
    return tritonplug.triton_call(
        a, b, m, n, k, k, 1, n, 1, n, 1, kernel=kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),), **metaparams)


def lower(fn) -> None:
    """Trace and lower a new jit of ``fn`` for cuda (a new function: JAX's own caches cannot hit)."""
    spec = jax.ShapeDtypeStruct(SHAPE, jnp.float16)
    jax.jit(lambda a, b: fn(a, b)).trace(spec, spec).lower(lowering_platforms=("cuda",))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def use_pool(size: int) -> workers.WorkerPool:
    """Replace the process-wide pool by a warm one of ``size`` workers."""
    old = state.set_pool(workers.WorkerPool(size, workers.pool_timeout(), workers.WORKER_PRELOAD))
    if old is not None:
        old.shutdown()
    pool = state.pool()
    pool.warm()
    return pool


def summary(samples: list[float]) -> dict:
    return {"median_s": statistics.median(samples), "samples_s": [round(s, 4) for s in samples]}


def requests_of(fn) -> tuple:
    """(backend, target, compile requests) that lowering ``fn`` asks the compile service for."""
    captured = []
    original = state.compiler.compile

    def spy(backend, target, requests):
        captured.append((backend, target, list(requests)))
        return original(backend, target, requests)

    state.compiler.compile = spy  # the lowering calls state.compiler.compile: keep what it asks for
    try:
        lower(fn)
    finally:
        del state.compiler.compile
    ((backend, target, requests),) = captured
    return backend, target, requests


def fresh(request: CompileRequest) -> CompileRequest:
    """The same configuration under a new key, so no cache layer can hit."""
    return CompileRequest(uuid.uuid4().hex, request.make_job, request.description)


def bench_worker_overhead(reps: int) -> dict:
    """(a) One configuration's compile: in this process vs through a warm worker, same front end and back end."""
    backend, target, (request,) = requests_of(
        lambda a, b: matmul(a, b, kernel=matmul_kernel, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                            num_warps=4, num_stages=4))

    def in_process() -> None:
        backend.compile(request.make_job())  # the TTIR front end, then triton.compile, here

    def through_pool() -> None:
        state.compiler.compile(backend, target, [fresh(request)])

    use_pool(workers.pool_size())
    in_process()
    through_pool()  # untimed warm-up of both paths
    here, pooled = [], []
    for i in range(reps):  # adjacent pairs, in alternating order: a change in the machine's load hits both alike
        if i % 2:
            pooled.append(timed(through_pool))
            here.append(timed(in_process))
        else:
            here.append(timed(in_process))
            pooled.append(timed(through_pool))
        state.reset()
    ratio = statistics.median(p / h for h, p in zip(here, pooled, strict=True))
    return {"kernel": request.description, "in_process": summary(here), "warm_pool": summary(pooled),
            "ratio": round(ratio, 3), "ratio_of_medians": round(statistics.median(pooled) / statistics.median(here), 3),
            "ratio_is": "median over reps of (warm pool time / in-process time of the same pair)",
            "goal": "warm pool <= 1.10x in-process", "met": ratio <= 1.10}


def bench_parallel_configs(reps: int) -> dict:
    """(b) The 8-configuration GEMM lowered with a warm pool of 1 worker and one of min(cores, 8), alternately."""
    sizes = [1, workers.pool_size()]
    pools = {size: workers.WorkerPool(size, workers.pool_timeout(), workers.WORKER_PRELOAD) for size in sizes}
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    try:
        for pool in pools.values():
            pool.warm()
            state.set_pool(pool)
            state.reset()
            lower(matmul)  # untimed: the first compile in each worker loads the rest of LLVM
        for i in range(reps):  # adjacent pairs, in alternating order, as in (a)
            for size in sizes if i % 2 == 0 else sizes[::-1]:
                state.set_pool(pools[size])
                state.reset()
                samples[size].append(timed(lambda: lower(matmul)))
    finally:
        state.set_pool(None)
        for pool in pools.values():
            pool.shutdown()
    one, many = samples[sizes[0]], samples[sizes[1]]
    speedup = statistics.median(o / m for o, m in zip(one, many, strict=True))
    target = 0.75 * min(8, os.cpu_count() or 1)
    configs = config_times(reps)
    total = sum(configs.values())
    ideal = total / max(max(configs.values()), total / sizes[1])  # the makespan cannot beat either
    return {"configs": len(CONFIGS), "one_worker": summary(one), "workers": sizes[1], "all_workers": summary(many),
            "speedup": round(speedup, 3),
            "speedup_of_medians": round(statistics.median(one) / statistics.median(many), 3),
            "speedup_is": "median over reps of (1-worker time / all-workers time of the same pair)",
            "config_compile_s": configs, "slowest_config_s": max(configs.values()),
            "ideal_speedup": round(ideal, 3),
            "ideal_is": "sum / max(slowest, sum / workers) of the configurations' compile times in one warm "
                        "worker: the most the workers can gain when each configuration is one job",
            "efficiency": round(speedup / ideal, 3),
            "goal": f"speedup >= 0.75 x min(8, cores) = {target:g}", "met": speedup >= target}


def config_times(reps: int) -> dict[str, float]:
    """Each configuration's compile alone in one warm worker (median of ``reps``), by description."""
    backend, target, requests = requests_of(matmul)
    use_pool(1)
    try:
        state.compiler.compile(backend, target, [fresh(requests[-1])])  # untimed: the worker's first compile
        times: dict[str, list[float]] = {r.description: [] for r in requests}
        for _ in range(reps):
            for request in requests:
                times[request.description].append(
                    timed(lambda request=request: state.compiler.compile(backend, target, [fresh(request)])))
    finally:
        state.shutdown_pool()
    return {name: round(statistics.median(samples), 4) for name, samples in times.items()}


def run_child(cache_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (workers.SIZE_ENV, "TRITONPLUG_CACHE")}
    env["TRITONPLUG_CACHE_DIR"] = cache_dir
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"the child process failed:\n{done.stderr}")
    return {**json.loads(done.stdout.splitlines()[-1]), "wall_s": wall}


def bench_new_process(reps: int) -> dict:
    """(c) A new process lowering the GEMM program: empty cache vs the cache the cold run filled."""
    cold, warm = [], []
    with tempfile.TemporaryDirectory(prefix="tritonplug-bench-") as scratch:
        for i in range(reps):
            directory = os.path.join(scratch, f"cache{i}")
            cold.append(run_child(directory))
            warm.append(run_child(directory))

    def side(runs: list[dict]) -> dict:
        return {"lower": summary([r["lower_s"] for r in runs]),
                "process_wall": summary([r["wall_s"] for r in runs]),
                "compiled": [r["stats"]["compiled"] for r in runs],
                "disk_hits": [r["stats"]["disk_hits"] for r in runs]}

    result = {"cold": side(cold), "warm": side(warm)}
    lower_speedup = result["cold"]["lower"]["median_s"] / result["warm"]["lower"]["median_s"]
    wall_speedup = result["cold"]["process_wall"]["median_s"] / result["warm"]["process_wall"]["median_s"]
    zero = all(c == 0 for c in result["warm"]["compiled"])
    result.update(lowering_speedup=round(lower_speedup, 2), process_wall_speedup=round(wall_speedup, 2),
                  goal="warm-cache lowering >= 10x faster than cold, with zero compiles",
                  met=lower_speedup >= 10 and zero)
    return result


def child() -> None:
    start = time.perf_counter()
    lower(matmul)
    elapsed = time.perf_counter() - start
    print(json.dumps({"lower_s": elapsed, "stats": tritonplug.compile_stats()}))


def child_pool_start() -> None:
    """In a new process: start the process's pool (its size from the environment) and wait until every
    worker is ready for its first job."""
    start = time.perf_counter()
    state.pool().warm()
    print(json.dumps({"pool_start_s": time.perf_counter() - start, "workers": state.pool().size}))


def bench_cold_compile(parallel: dict, new_process: dict, reps: int) -> dict:
    """(d) A new process's cold compile of the 8-configuration kernel (its lowering in (c)) against the
    slowest configuration's compile (from (b)) plus the time a new process's pool takes to start."""
    env = {k: v for k, v in os.environ.items() if k not in (workers.SIZE_ENV, "TRITONPLUG_CACHE")}  # as (c)
    starts = []
    for _ in range(reps):
        done = subprocess.run([sys.executable, __file__, "--child-pool"], env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the child process failed:\n{done.stderr}")
        starts.append(json.loads(done.stdout.splitlines()[-1])["pool_start_s"])
    pool_start = statistics.median(starts)
    cold = new_process["cold"]["lower"]["median_s"]
    bound = parallel["slowest_config_s"] + pool_start
    return {"cold_lower_s": cold, "pool_start": summary(starts), "slowest_config_s": parallel["slowest_config_s"],
            "ratio": round(cold / bound, 3), "ratio_is": "cold lowering / (slowest configuration + pool start)",
            "goal": "ratio <= 1.3", "met": cold <= 1.3 * bound}


def table(results: dict) -> str:
    a, b, c = results["a_worker_overhead"], results["b_parallel_configs"], results["c_new_process"]
    ms = lambda s: f"{s * 1000:8.0f} ms"  # noqa: E731
    rows = [
        ("(a) one config, in-process front end + triton.compile", ms(a["in_process"]["median_s"]),
         "warm worker", ms(a["warm_pool"]["median_s"]), f"{a['ratio']:.3f}x", a["goal"], a["met"]),
        (f"(b) {b['configs']}-config GEMM lowering, 1 worker", ms(b["one_worker"]["median_s"]),
         f"{b['workers']} workers", ms(b["all_workers"]["median_s"]), f"{b['speedup']:.2f}x faster", b["goal"],
         b["met"]),
        ("(c) new process, cold cache: lowering", ms(c["cold"]["lower"]["median_s"]),
         "warm cache", ms(c["warm"]["lower"]["median_s"]), f"{c['lowering_speedup']:.1f}x faster", c["goal"],
         c["met"]),
        ("(c) new process, cold cache: process wall", ms(c["cold"]["process_wall"]["median_s"]),
         "warm cache", ms(c["warm"]["process_wall"]["median_s"]), f"{c['process_wall_speedup']:.1f}x faster", "-",
         "-"),
    ]
    d = results["d_cold_compile"]
    rows.append(("(d) new process, cold 8-config lowering", ms(d["cold_lower_s"]), "slowest+pool",
                 ms(d["slowest_config_s"] + d["pool_start"]["median_s"]), f"{d['ratio']:.2f}x", d["goal"], d["met"]))
    lines = [f"{r[0]:<55} {r[1]}  vs {r[2]:<11} {r[3]}  {r[4]:<13} goal: {r[5]} -> {r[6]}" for r in rows]
    lines.append(f"(b) ideal speedup (sum / max(slowest, sum/workers) of config compiles) {b['ideal_speedup']:.2f}x; "
                 f"reached {b['efficiency']:.0%} of it; slowest config {b['slowest_config_s'] * 1000:.0f} ms")
    lines.append(f"(c) compiles per cold process {c['cold']['compiled']}, per warm process {c['warm']['compiled']} "
                 f"(disk hits {c['warm']['disk_hits']})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions of each measurement (median reported)")
    parser.add_argument("--out", default=None, help="JSON file (default bench/results/compile-<host>.json)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-pool", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return
    if args.child_pool:
        child_pool_start()
        return
    on_gpu = any(d.platform == "gpu" for d in jax.devices()) if os.environ["JAX_PLATFORMS"] != "cpu" else False
    host = socket.gethostname() if on_gpu else "cpu"
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / f"compile-{host}.json"
    os.environ["TRITONPLUG_CACHE"] = "0"  # (a) and (b) measure compiling; (c) sets its own cache
    load_before = os.getloadavg()
    results = {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": {"host": socket.gethostname(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "triton": triton.__version__, "jax": jax.__version__,
                    "target": "cuda sm_90 (lowered without a GPU)", "loadavg_before": load_before},
        "reps": args.reps,
        "a_worker_overhead": bench_worker_overhead(2 * args.reps),
    }
    state.shutdown_pool()
    results["b_parallel_configs"] = bench_parallel_configs(args.reps)
    results["c_new_process"] = bench_new_process(max(3, args.reps // 2 + 1))
    results["d_cold_compile"] = bench_cold_compile(results["b_parallel_configs"], results["c_new_process"],
                                                   max(3, args.reps // 2 + 1))
    results["machine"]["loadavg_after"] = os.getloadavg()
    print(table(results))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
