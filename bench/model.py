"""The Llama-style model of ``examples/llama`` trained with XLA's ops (``jax``) and with Triton kernels
(``tritonplug``), side by side: tokens/s, peak device memory, the largest batch each fits, and a per-op
breakdown.

    python bench/model.py --config 1b --batch 4 --steps 8                       # one GPU
    python bench/model.py --config 1b --batch 4 --max-batch --breakdown
    python bench/model.py --config 1b --batch 4 --mesh data=2,model=2           # every GPU, one jit
    python bench/model.py --config 1b --batch 4 --mesh data=2,model=2 \
        --ops "jax;tritonplug,loss=liger;tritonplug"                            # the vocabulary-parallel loss

Each op choice trains in a process of its own (``examples/llama/train.py --json``), so each device peak is
that choice's alone; JAX may use 95% of the device (``XLA_PYTHON_CLIENT_MEM_FRACTION``). ``--max-batch``
compiles the step at two batches, fits XLA's memory plan (linear in the batch) to the device's limit, then
runs steps at the predicted batch, stepping down by about 8% until one runs (four tries). ``--breakdown``
times each op's forward and backward alone at the model's shapes (jitted ``grad`` of a weighted sum, medians),
once per op choice. With ``--mesh``, each choice also runs on the mesh at ``--batch`` times its devices (the
same work per GPU as its one-GPU run at ``--batch``: weak scaling), and the scaling efficiency is tokens/s on N
GPUs / (N x tokens/s on one). Under ``model=N`` the ``tritonplug`` loss is
vocabulary-parallel (the output projection split, never gathered); ``loss=liger`` is the fused loss before it (the
vocabulary whole, the projection replicated), so ``tritonplug,loss=liger`` against ``tritonplug`` measures it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _util import Results, format_table, write_json  # noqa: E402

TRAIN = ROOT / "examples" / "llama" / "train.py"
CHOICES = ("jax", "tritonplug")


def train(config: str, ops: str, batch: int, steps: int, *extra: str, out: Path) -> dict | None:
    """One ``train.py`` process; its JSON report, or None when the step did not fit (or failed: printed)."""
    env = {**os.environ, "XLA_PYTHON_CLIENT_MEM_FRACTION": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", ".95")}
    cmd = [sys.executable, str(TRAIN), "--config", config, "--ops", ops, "--batch", str(batch),
           "--steps", str(steps), "--json", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-1500:]
        oom = "RESOURCE_EXHAUSTED" in tail or "out of memory" in tail.lower()
        print(f"[{ops} batch {batch}] {'out of memory' if oom else 'failed'}: {tail if not oom else ''}",
              file=sys.stderr)
        return None
    return json.loads(out.read_text())


def run_choice(args, ops: str, results: Results, tmp: Path, mesh: str | None = None, batch: int | None = None,
               label: str = "") -> dict | None:
    batch = batch or args.batch
    extra = ("--mesh", mesh) if mesh else ()
    report = train(args.config, ops, batch, args.steps, *extra, out=tmp / _file_name(f"{ops}-{batch}-{mesh}.json"))
    bench = f"train {args.config} batch {batch}" + (f" mesh {mesh}" if mesh else "") + label
    if report is None:
        results.add(bench, ops, median_us=None, error="did not run (out of memory or failed: see stderr)")
        return None
    (run,) = report["runs"].values()
    results.add(bench, ops, median_us=run["step_seconds_median"] * 1e6, tokens_per_s=run["tokens_per_s"],
                device_peak_gb=run.get("device_peak_bytes", 0) / 1e9, plan_gb=run["plan_bytes"] / 1e9,
                first_loss=run["losses"][0], last_loss=run["losses"][-1], devices=report["machine"]["devices"],
                machine=report["machine"]["device"])
    return report


def _file_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def plan_bytes(args, ops: str, batch: int, tmp: Path) -> int:
    report = train(args.config, ops, batch, 0, "--plan-only", out=tmp / _file_name(f"plan-{ops}-{batch}.json"))
    (run,) = report["runs"].values()
    return run["plan_bytes"]


def max_batch(args, ops: str, results: Results, tmp: Path) -> None:
    import jax

    limit = (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
    if limit is None:
        results.skip(f"largest batch {args.config}", ops, "the device reports no memory limit")
        return
    b1, b2 = max(1, args.batch // 2), args.batch
    p1, p2 = plan_bytes(args, ops, b1, tmp), plan_bytes(args, ops, b2, tmp)
    per_seq = (p2 - p1) / (b2 - b1) if b2 > b1 else p2 / b2
    guess = max(1, int((limit - (p2 - per_seq * b2)) // per_seq))
    fitted = None
    for batch in sorted({max(1, int(guess * f)) for f in (1.0, 0.92, 0.84, 0.75)}, reverse=True):
        if train(args.config, ops, batch, 2, out=tmp / _file_name(f"fit-{ops}-{batch}.json")) is not None:
            fitted = batch
            break
    results.add(f"largest batch {args.config}", ops, median_us=None, batch=fitted, predicted=guess,
                plan_gb_per_sequence=per_seq / 1e9, fixed_plan_gb=(p2 - per_seq * b2) / 1e9, limit_gb=limit / 1e9)


def breakdown(args, results: Results) -> None:
    """Each op's forward + backward at the model's shapes, per call, both choices."""
    import jax
    import jax.numpy as jnp
    from _util import median_seconds

    from examples.llama.config import CONFIGS
    from examples.llama.model import rope_tables
    from examples.llama.ops import IMPLEMENTATIONS

    cfg = CONFIGS[args.config].replace(batch=args.batch)
    b, t, d, dt = cfg.batch, cfg.seq, cfg.hidden, cfg.compute_dtype
    key = iter(jax.random.split(jax.random.key(0), 16))

    def rnd(*shape, scale=1.0):
        return (scale * jax.random.normal(next(key), shape, jnp.float32)).astype(dt)

    cos, sin = rope_tables(cfg)
    targets = jax.random.randint(next(key), (b * t,), 0, cfg.vocab)
    hd = cfg.head_dim
    shapes = {  # op: (arguments, keywords, calls per step)
        "rms_norm": ((rnd(b, t, d), rnd(d)), {"eps": cfg.eps}, 2 * cfg.layers + 1),
        "rope": ((rnd(b, t, cfg.heads, hd), rnd(b, t, cfg.kv_heads, hd)), {"cos": cos, "sin": sin}, cfg.layers),
        "swiglu": ((rnd(b, t, cfg.ffn), rnd(b, t, cfg.ffn)), {}, cfg.layers),
        "attention": ((rnd(b, t, cfg.heads, hd), rnd(b, t, cfg.kv_heads, hd), rnd(b, t, cfg.kv_heads, hd)), {},
                      cfg.layers),
        "loss": ((rnd(b * t, d), rnd(cfg.vocab, d, scale=0.02)), {"targets": targets}, 1),
    }
    impls = {op: {choice: IMPLEMENTATIONS[op][choice] for choice in CHOICES} for op in shapes}  # one device: no
    # ``loss=liger`` (there it is the ``tritonplug`` loss)
    impls["loss"]["tritonplug (Liger's chunks)"] = functools.partial(IMPLEMENTATIONS["loss"]["tritonplug"],
                                                                     chunk_size=None)
    for op, (arrays, kwargs, per_step) in shapes.items():
        for choice, fn in impls[op].items():

            def scalar(*a, fn=fn, kwargs=kwargs):
                return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(fn(*a, **kwargs)))

            step = jax.jit(jax.grad(scalar, argnums=tuple(range(len(arrays)))))
            with results.guard(f"op {op} fwd+bwd", choice):
                seconds = median_seconds(lambda step=step, arrays=arrays: step(*arrays), reps=args.reps, warmup=2,
                                         sync=jax.block_until_ready)
                results.add(f"op {op} fwd+bwd", choice, median_us=seconds * 1e6, per_step_ms=seconds * per_step * 1e3,
                            calls_per_step=per_step)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="1b")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--ops", default=";".join(CHOICES),
                   help="op choices to train, ';'-separated (each as train.py takes it: 'jax,loss=tritonplug')")
    p.add_argument("--mesh", help="also train on every GPU as one jit, e.g. data=2,model=2 (global batch scaled)")
    p.add_argument("--max-batch", action="store_true")
    p.add_argument("--breakdown", action="store_true")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "model.json")
    args = p.parse_args()
    tmp = args.out.parent / (args.out.stem + "-runs")
    tmp.mkdir(parents=True, exist_ok=True)
    results = Results()
    for ops in args.ops.split(";"):
        one = run_choice(args, ops, results, tmp)
        if args.mesh:
            axes = dict(item.split("=") for item in args.mesh.split(","))
            data, model = int(axes.get("data", 1)), int(axes.get("model", 1))
            many = run_choice(args, ops, results, tmp, mesh=args.mesh, batch=args.batch * data * model)
            if one and many:
                n = many["machine"]["devices"]
                (one_run,), (many_run,) = one["runs"].values(), many["runs"].values()
                eff = many_run["tokens_per_s"] / (n * one_run["tokens_per_s"])
                results.add(f"scaling {args.config} mesh {args.mesh}", ops, median_us=None, efficiency=eff, devices=n)
        if args.max_batch:
            max_batch(args, ops, results, tmp)
    if "jax" in args.ops.split(";"):
        results.add_ratios("jax", "vs_jax")
        results.add_ratios("jax", "tokens_vs_jax", of="tokens_per_s")
        results.add_ratios("jax", "peak_vs_jax", of="device_peak_gb")
    if args.breakdown:
        breakdown(args, results)
        results.add_ratios("jax", "vs_jax")
    columns = ["bench", "impl", "median_us", "vs_jax", "tokens_per_s", "tokens_vs_jax", "device_peak_gb",
               "peak_vs_jax", "plan_gb", "last_loss", "batch", "predicted", "efficiency", "per_step_ms"]
    print(format_table(results.records, columns))
    print(f"wrote {write_json(args.out, results.records)}")


if __name__ == "__main__":
    main()
