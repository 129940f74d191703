"""Partitioned launchers across processes: ``jax.distributed`` with one process per device group, one host.

    python bench/partitioned_multiprocess.py [--processes 2] [--gpus-per-process 1] [--out FILE]

Starts ``--processes`` children, each seeing ``--gpus-per-process`` GPUs (or one CPU device, with gloo
collectives, when no GPU is visible) and a cache directory of its own, so that only the fleet cache on JAX's
coordination service can spare a compile. Each runs ``tests/sharding_kernels.py``'s ``add_rows`` and
``rms_norm`` (forward, and ``jax.grad`` through its ``custom_vjp``) on a global array split by rows across
all devices, checks its own rows against NumPy and reports its compile counters: with the fleet cache one
process compiles each kernel and the others fetch it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(process_id: int, processes: int, address: str) -> None:
    import jax

    if os.environ.get("CUDA_VISIBLE_DEVICES") is None:  # CPU processes: collectives through gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(address, num_processes=processes, process_id=process_id)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import tritonplug
    sys.path.insert(0, str(ROOT / "tests"))
    import sharding_kernels as sk

    count = jax.device_count()
    mesh = jax.make_mesh((count,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    per = 64 * jax.local_device_count()  # this process's rows
    rows, cols = per * processes, 256
    rng = np.random.default_rng(0)
    x, y, w = (rng.standard_normal(s).astype(np.float32) for s in ((rows, cols), (rows, cols), (cols,)))
    local = slice(process_id * per, (process_id + 1) * per)
    split = NamedSharding(mesh, P("x"))
    gx, gy = (jax.make_array_from_process_local_data(split, a[local]) for a in (x, y))
    gw = jax.make_array_from_process_local_data(NamedSharding(mesh, P()), w)
    out = jax.jit(sk.add_rows)(gx, gy)
    norm = jax.jit(sk.rms_norm_vjp)(gx, gw)
    grads = jax.jit(jax.grad(lambda a, b: jnp.sum(sk.rms_norm_vjp(a, b) ** 2), argnums=(0, 1)))(gx, gw)
    want_grads = jax.grad(lambda a, b: jnp.sum(sk.rms_norm_reference(a, b) ** 2), argnums=(0, 1))(x, w)

    def mine(a):
        return np.concatenate([np.asarray(s.data) for s in sorted(a.addressable_shards, key=lambda s: s.index[0].start
                                                                                         or 0)])
    report = {
        "process": process_id, "devices": [str(d) for d in jax.local_devices()], "global_devices": count,
        "add_rows_ok": bool(np.allclose(mine(out), (x + y)[local])),
        "rms_norm_ok": bool(np.allclose(mine(norm), np.asarray(sk.rms_norm_reference(x, w))[local], atol=1e-5)),
        "grad_x_ok": bool(np.allclose(mine(grads[0]), np.asarray(want_grads[0])[local], atol=1e-3)),
        "grad_w_ok": bool(np.allclose(np.asarray(grads[1].addressable_shards[0].data), want_grads[1], atol=1e-3)),
        "compile_stats": {k: v for k, v in tritonplug.compile_stats().items() if k in
                          ("compiled", "disk_hits", "remote_hits", "remote_published", "remote_waits")},
    }
    print("REPORT " + json.dumps(report), flush=True)
    jax.distributed.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--gpus-per-process", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--address", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.processes, args.address)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    try:
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).returncode == 0
    except FileNotFoundError:
        gpus = False
    procs = []
    for i in range(args.processes):
        env = {**os.environ, "TRITONPLUG_CACHE_DIR": tempfile.mkdtemp(prefix=f"tp-cache-{i}-")}
        if gpus:
            g = args.gpus_per_process
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i * g + k) for k in range(g))
        else:
            env["JAX_PLATFORMS"] = "cpu"
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", str(i), "--processes",
                                       str(args.processes), "--address", address], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
        if p.returncode or not lines:
            print(err[-3000:], file=sys.stderr)
            raise SystemExit(f"a process failed ({p.returncode})")
        reports.append(json.loads(lines[-1][7:]))
    for r in reports:
        print(json.dumps(r))
    if args.out:
        Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "reports": reports}, indent=1))


if __name__ == "__main__":
    main()
