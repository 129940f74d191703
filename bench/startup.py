"""Time to first result of a fresh process: cold, warm tritonplug cache, + JAX's persistent cache, + a tuning record.

Each measurement is a new Python process (``--child``) that imports JAX and tritonplug, puts its inputs on the
device (NumPy data, so no XLA compile besides the program's), runs one jitted program that calls a kernel and
waits for the result. It reports the time from interpreter start to the result (``first_result_s``; of it,
``program_s`` is the jitted call alone: trace, lower, compile, run), tritonplug's counters (Triton
compiles, disk hits, tuned hits, calls lowered with several configurations: those jaxlib autotunes on the device
at first execution) and XLA compiles (JAX's monitoring events: compiles minus persistent-cache hits).

Workloads: ``gpu``: the 8-configuration autotuned matmul of bench/compile.py (4096^3 fp16) on the GPU;
``cpu``: examples/add.py's kernel autotuned over BLOCK (64, 256, 1024) on 2^16 float32 in the CPU interpreter.

Scenarios, in order, each in fresh processes: ``cold`` (empty tritonplug cache, no JAX cache), ``warm cache``
(the tritonplug cache the cold runs filled), ``+ jax cache`` (and a JAX compilation cache a priming run
filled), ``+ tuning record`` (``tritonplug.tune`` ran in a separate process first; a priming run fills the JAX
cache for the now single-configuration program).

Before measuring, the bytecode of tritonplug and its plugins is written (see ``compile_bytecode``).

Usage: python bench/startup.py [--workload cpu|gpu] [--reps N] [--out FILE]
"""

from __future__ import annotations

import time

_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
COLUMNS = ["scenario", "first_result_s", "program_s", "wall_s", "triton_compiles", "disk_hits", "tuned_hits",
           "runtime_autotuned", "xla_compiles", "jax_cache_hits", "speedup", "program_speedup"]


# ------------------------------------------------------------------ the child: one fresh process


def workload(name: str):
    """(function, inputs) of a workload; imports JAX and Triton."""
    import jax
    import numpy as np
    import triton

    import tritonplug

    sys.path.insert(0, str(HERE))
    from _util import load_example

    if name == "cpu":
        add_kernel = load_example("add").add_kernel
        kernel = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 256, 1024)],
                                 key=["n_elements"])(add_kernel)

        def add(x, y):
            return tritonplug.triton_call(x, y, x.size, kernel=kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                          grid=lambda meta: (triton.cdiv(x.size, meta["BLOCK"]),))

        data = np.random.default_rng(0).standard_normal((2, 1 << 16), dtype=np.float32)
        return add, [jax.device_put(d) for d in data]
    configs = [  # bench/compile.py's 8 configurations (importing it would force JAX onto the CPU)
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
        for bm, bn, bk, s, w in [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4),
                                 (128, 64, 64, 4, 4), (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 64, 32, 5, 2),
                                 (32, 64, 32, 5, 2)]]
    tuned = triton.autotune(configs=configs, key=["M", "N", "K"])(load_example("matmul").matmul_kernel.fn)

    def matmul(a, b):
        (m, k), (_, n) = a.shape, b.shape
        return tritonplug.triton_call(
            a, b, m, n, k, k, 1, n, 1, n, 1, kernel=tuned, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
            grid=lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),))

    data = np.random.default_rng(0).standard_normal((2, 4096, 4096)).astype(np.float16)
    return matmul, [jax.device_put(d) for d in data]


def child(args: argparse.Namespace) -> None:
    import jax

    events: list[str] = []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    jax.monitoring.register_event_duration_secs_listener(lambda name, seconds, **kw: events.append(name))
    if args.jax_cache:
        jax.config.update("jax_compilation_cache_dir", args.jax_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    import tritonplug

    fn, inputs = workload(args.workload)
    jax.block_until_ready(inputs)
    if args.tune:
        print(tritonplug.tune(fn, *inputs), file=sys.stderr)
        return
    ready = time.perf_counter()
    if args.profile_out:  # where the program's time goes (a diagnostic run; its times are not reported)
        import cProfile
        import pstats

        with cProfile.Profile() as profile:
            jax.block_until_ready(jax.jit(fn)(*inputs))
        with open(args.profile_out, "w") as out:
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(60)
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(30)
        return
    jax.block_until_ready(jax.jit(fn)(*inputs))
    done = time.perf_counter()
    stats = tritonplug.compile_stats()
    hits = events.count("/jax/compilation_cache/cache_hits")
    print(json.dumps({
        "first_result_s": done - _START, "program_s": done - ready, "triton_compiles": stats["compiled"],
        "disk_hits": stats["disk_hits"], "tuned_hits": stats["tuned_hits"],
        "runtime_autotuned": stats["runtime_autotuned"], "jax_cache_hits": hits,
        "xla_compiles": events.count("/jax/core/compile/backend_compile_duration") - hits}))


# ------------------------------------------------------------------ the parent: scenarios


def run_child(workload_name: str, cache: Path, jax_cache: Path | None = None, tune: bool = False) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--workload", workload_name]
    if jax_cache is not None:
        command += ["--jax-cache", str(jax_cache)]
    if tune:
        command.append("--tune")
    environment = {k: v for k, v in os.environ.items() if k != "TRITONPLUG_TUNING_FILE"}
    environment["TRITONPLUG_CACHE_DIR"] = str(cache)
    if workload_name == "cpu":
        environment["JAX_PLATFORMS"] = "cpu"
    start = time.perf_counter()
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"child failed ({done.returncode}): {done.stderr[-3000:]}")
    if tune:
        print(done.stderr.strip(), file=sys.stderr)
        return {}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": wall}


def median_record(scenario: str, runs: list[dict]) -> dict:
    record = {"scenario": scenario, "runs": runs}
    for key in ("first_result_s", "wall_s", "program_s"):
        record[key] = statistics.median(r[key] for r in runs)
    for key in ("triton_compiles", "disk_hits", "tuned_hits", "runtime_autotuned", "xla_compiles", "jax_cache_hits"):
        record[key] = max(r[key] for r in runs)  # the worst run: any compile shows
    return record


def profile_warm(workload_name: str, scratch: Path, out: str) -> None:
    """Profile one fully warm child (the caches ``measure`` filled) into ``out``."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--workload", workload_name,
               "--jax-cache", str(scratch / "jax-cache"), "--profile-out", out]
    environment = {**os.environ, "TRITONPLUG_CACHE_DIR": str(scratch / "tritonplug-cache")}
    if workload_name == "cpu":
        environment["JAX_PLATFORMS"] = "cpu"
    subprocess.run(command, env=environment, check=True, timeout=600)


def compile_bytecode() -> None:
    """Write the bytecode of tritonplug and its plugins, as ``pip install`` does for an installed package.

    From an editable checkout with ``PYTHONDONTWRITEBYTECODE=1`` (the GPU machine sets it) every new
    process would compile each of its modules from source again: about 0.1 s of every scenario, which no
    installed package pays. JAX and Triton, installed normally, have their bytecode already.
    """
    import compileall
    import importlib.util

    for name in ("tritonplug", "tritonplug_cuda", "tritonplug_interpret", "tritonplug_rocm"):
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(folder, quiet=1)


def measure(workload_name: str, reps: int, scratch: Path) -> list[dict]:
    cache, jax_cache = scratch / "tritonplug-cache", scratch / "jax-cache"
    cold = [run_child(workload_name, scratch / f"cold-{i}") for i in range(reps)]
    run_child(workload_name, cache)  # fills the cache the warm scenarios use
    records = [median_record("cold", cold),
               median_record("warm cache", [run_child(workload_name, cache) for _ in range(reps)])]
    run_child(workload_name, cache, jax_cache)  # primes JAX's cache
    records.append(median_record("+ jax cache", [run_child(workload_name, cache, jax_cache) for _ in range(reps)]))
    run_child(workload_name, cache, tune=True)
    run_child(workload_name, cache, jax_cache)  # primes JAX's cache for the single-configuration program
    records.append(median_record("+ tuning record",
                                 [run_child(workload_name, cache, jax_cache) for _ in range(reps)]))
    for record in records:
        record["speedup"] = round(records[0]["first_result_s"] / record["first_result_s"], 2)
        record["program_speedup"] = round(records[0]["program_s"] / record["program_s"], 2)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("cpu", "gpu"), default=None,
                        help="default: gpu when a CUDA device is visible, else cpu")
    parser.add_argument("--reps", type=int, default=3, help="fresh processes per scenario (median)")
    parser.add_argument("--out", default=None, help="JSON file (default bench/results/startup-<workload>.json)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--jax-cache", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tune", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", default=None,
                        help="also profile one fully warm process's program and write the stats to this file")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.workload is None:
        import jax

        args.workload = "gpu" if jax.default_backend() in ("gpu", "cuda") else "cpu"
    sys.path.insert(0, str(HERE))
    from _util import format_table, write_json

    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="tritonplug-startup-") as scratch:
        records = measure(args.workload, args.reps, Path(scratch))
        if args.profile_out:
            profile_warm(args.workload, Path(scratch), args.profile_out)
    print(format_table(records, COLUMNS))
    out = args.out or str(HERE / "results" / f"startup-{args.workload}.json")
    import jax  # noqa: F401 - environment() describes the versions of what is imported
    import triton  # noqa: F401

    print(f"wrote {write_json(out, records, workload=args.workload, reps=args.reps)}")


if __name__ == "__main__":
    main()
