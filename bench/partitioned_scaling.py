"""Weak scaling of partitioned launchers: the same per-device work on 1 device and on all of them.

For each kernel, one jitted call of ``tests/sharding_kernels.py``'s partitioned launcher: on one device with
the per-device shape, and on every visible device with that shape times the device count, split along the
factor its rule lets XLA split (rows, batch or heads). The ratio of medians (all devices / one) is 1.0 for
perfect weak scaling. Two figures per side: one call waited for (host dispatch included), and 20 calls in a
row waited for once (the devices' time per call). Before timing, the sharded result is checked against the
same function on one device.

    python bench/partitioned_scaling.py [--out bench/results/partitioned-scaling.json] [--rounds 50]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import sharding_kernels as sk  # noqa: E402


def _median_us(fn, args, rounds: int, batch: int = 1) -> float:
    """Median over ``rounds`` of the time of ``batch`` calls in a row, waited for once, per call. With a
    batch the host's dispatch overlaps the devices' work, so the figure is the devices' time per call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(batch - 1):
            fn(*args)
        jax.block_until_ready(fn(*args))
        times.append((time.perf_counter() - start) * 1e6 / batch)
    return statistics.median(times)


def cases(n: int, rng: np.random.Generator):
    """(name, function, per-device args maker(k devices), spec per arg)."""
    def rand(*shape, dtype=jnp.bfloat16):
        return jnp.asarray(rng.standard_normal(shape), dtype)
    w = rand(4096)
    ang = rng.standard_normal((2048, 64)).astype(np.float32)
    cos, sin = jnp.asarray(np.cos(ang)), jnp.asarray(np.sin(ang))
    loss = jax.grad(lambda x, w: jnp.sum(sk.rms_norm_vjp(x, w).astype(jnp.float32) ** 2), argnums=(0, 1))
    return [
        ("add_rows 8192x4096 bf16 /dev", sk.add_rows, lambda k: (rand(8192 * k, 4096), rand(8192 * k, 4096)),
         (P("x"), P("x"))),
        ("rms_norm fwd 8192x4096 bf16 /dev", sk.rms_norm, lambda k: (rand(8192 * k, 4096), w), (P("x"), None)),
        ("rms_norm fwd+bwd (custom_vjp grad) /dev", loss, lambda k: (rand(8192 * k, 4096), w), (P("x"), None)),
        ("rope 4x32x2048x128 f32 /dev", sk.rope,
         lambda k: (jnp.asarray(rng.standard_normal((4 * k, 32, 2048, 128)), jnp.float32), cos, sin),
         (P("x"), None, None)),
        ("attention 2x16x2048x64 fp16 (heads split) /dev",
         lambda q, kk, v: sk.attention(q, kk, v, block=64),
         lambda k: tuple(rand(2, 16 * k, 2048, 64, dtype=jnp.float16) for _ in range(3)),
         (P(None, "x"),) * 3),
    ]


def port_cases(rng: np.random.Generator):
    """The ports of ``examples/ports`` (when liger-kernel and fla-core are installed), forward and backward."""
    try:
        sys.path.insert(0, str(ROOT / "examples"))
        from ports import fla_fused_recurrent, liger_cross_entropy, liger_rms_norm, liger_rope, liger_swiglu
    except Exception as exc:  # noqa: BLE001 - the libraries are optional here
        print(f"ports skipped: {type(exc).__name__}: {exc}")
        return []

    def rand(*shape, dtype=jnp.bfloat16):
        return jnp.asarray(rng.standard_normal(shape), dtype)

    def grad_of(op, argnums):
        """``jax.grad`` of ``sum(out ** 2)``: the cotangent (``2 out``) is split as ``out`` is, as a downstream
        layer's would be (a plain ``sum`` gives a replicated cotangent, and the backward then runs whole)."""
        return jax.grad(lambda *a: jnp.sum(jax.tree.leaves(op(*a))[0].astype(jnp.float32) ** 2), argnums=argnums)
    w = rand(4096)
    emb = np.arange(2048, dtype=np.float32)[:, None] / (1e4 ** (np.arange(64) / 64))
    emb = np.concatenate([emb, emb], -1)[None]
    cos, sin = jnp.asarray(np.cos(emb)), jnp.asarray(np.sin(emb))
    return [
        ("Liger RMSNorm fwd+bwd 4x2048x4096 bf16 /dev", grad_of(liger_rms_norm.liger_rms_norm, (0, 1)),
         lambda k: (rand(4 * k, 2048, 4096), w), (P("x"), None)),
        ("Liger SwiGLU fwd+bwd 4x2048x8192 bf16 /dev", grad_of(liger_swiglu.liger_swiglu, (0, 1)),
         lambda k: (rand(4 * k, 2048, 8192), rand(4 * k, 2048, 8192)), (P("x"), P("x"))),
        ("Liger cross entropy fwd+bwd 4096x32000 f32 /dev",
         grad_of(lambda x, t: liger_cross_entropy.liger_cross_entropy(x, t), (0,)),
         lambda k: (rand(4096 * k, 32000, dtype=jnp.float32),
                    jnp.asarray(rng.integers(0, 32000, 4096 * k), jnp.int32)), (P("x"), P("x"))),
        ("Liger RoPE fwd+bwd 4x32x2048x128 bf16 /dev",
         grad_of(lambda q, k: liger_rope.liger_rope(q, k, cos, sin), (0, 1)),
         lambda k: (rand(4 * k, 32, 2048, 128), rand(4 * k, 8, 2048, 128)), (P("x"), P("x"))),
        ("FLA fused_recurrent fwd 4x2048x16x64 f32 /dev",
         lambda q, k, v: fla_fused_recurrent.fused_recurrent_fwd(q, k, v, scale=0.125)[0],
         lambda k: (rand(4 * k, 2048, 16, 64, dtype=jnp.float32), rand(4 * k, 2048, 16, 64, dtype=jnp.float32) / 64,
                    rand(4 * k, 2048, 16, 64, dtype=jnp.float32)), (P("x"),) * 3),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "partitioned-scaling.json"))
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    devices = jax.devices()
    n = len(devices)
    mesh = jax.make_mesh((n,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = []
    rng = np.random.default_rng(0)
    for name, fn, make, specs in cases(n, rng) + port_cases(rng):
        if fn is None:
            continue
        one_args = jax.device_put(make(1), devices[0])
        whole = make(n)
        many_args = [jax.device_put(a, NamedSharding(mesh, P() if s is None else s)) for a, s in zip(whole, specs,
                                                                                                    strict=True)]
        one, many = jax.jit(fn), jax.jit(fn)
        check = jax.tree.leaves(many(*many_args))
        reference = jax.tree.leaves(jax.jit(fn)(*jax.device_put(whole, devices[0])))
        # relative to each result's scale: a sum over many rows in bf16 rounds differently when its shards' partial
        # sums are added (as any data-parallel reduction does), so elementwise rtol would flag values near zero
        same = all(float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32)))) <=
                   2e-2 * (1.0 + float(np.max(np.abs(np.asarray(b, np.float32)))))
                   for a, b in zip(check, reference, strict=True))
        t1 = _median_us(one, one_args, args.rounds)
        tn = _median_us(many, many_args, args.rounds)
        p1 = _median_us(one, one_args, args.rounds, batch=20)
        pn = _median_us(many, many_args, args.rounds, batch=20)
        rows.append({"case": name, "one_device_us": round(t1, 1), f"{n}_devices_us": round(tn, 1),
                     "ratio": round(tn / t1, 3), "pipelined_one_device_us": round(p1, 1),
                     f"pipelined_{n}_devices_us": round(pn, 1), "pipelined_ratio": round(pn / p1, 3),
                     "matches_one_device": same})
        print(f"{name:46s} synchronised: 1 dev {t1:8.1f} us, {n} dev {tn:8.1f} us, ratio {tn / t1:5.3f} | "
              f"pipelined: {p1:8.1f} / {pn:8.1f} us, ratio {pn / p1:5.3f} | matches {same}", flush=True)
    out = {"command": " ".join(sys.argv), "devices": [d.device_kind for d in devices], "jax": jax.__version__,
           "host": platform.node(), "rounds": args.rounds, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
