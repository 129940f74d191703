"""The MoE grouped matmul and the MoE model on one GPU, side by side with XLA's formulations.

    python bench/moe.py --out bench/results/moe-h200/run1.json                 # every part
    python bench/moe.py --parts gmm --experts 8,64 --out ...                   # some of it
    python bench/moe.py --smoke --out /tmp/moe-cpu.json                        # tiny shapes, any backend

Parts (``--parts``, comma-separated):

* ``gmm``: ``grouped_matmul`` (``examples/moe/grouped.py``) against ``jax.lax.ragged_dot`` and the dense matmul
  of the same FLOPs (``(m, k) @ (k, n)``), forward and forward + backward, in TFLOP/s, at 8, 64 and 128 experts
  with Qwen3-30B-A3B's expert shape (65,536 routed rows, k 2048, n 768) and Mixtral's (k 4096, n 14336, 8
  experts). Group sizes are drawn from a Dirichlet (``--alpha``), uneven as a router's. Each result is checked
  against ``ragged_dot``.
* ``torch``: the same kernels launched by Triton itself on torch tensors (vLLM's ``fused_moe_kernel`` forward and
  dX, our dW kernel), on the plan ``grouped_matmul`` computed, against tritonplug's outputs (needs torch + CUDA).
* ``layer``: the MoE MLP (``examples/moe/layer.py``: router, dispatch, experts, combine) forward + backward per
  choice (``--layer-choices``: ``jax``, ``jax-dense``, ``tritonplug``; the expert-parallel ones on one device) at
  the shapes above, tokens x top-k = 65,536 rows.
* ``model``: ``examples/moe/train.py`` per choice, each in its own process (tokens/s, device peak, losses).
* ``grads``: the model's loss gradients per choice against the ``jax`` choice in fp32 (one layer).
* ``first-steps``: each choice's first two training steps against the same losses computed apart (the first
  step's learning rate is 0: it must change nothing).

Tuning: before a shape is timed, ``tritonplug.tune`` times each kernel configuration of the ``tritonplug`` calls as
a program of its own and records the fastest, which the timed programs then run (``--no-tune``: the first).
Timing: each implementation is jitted; a sample is ``--calls`` back-to-back calls synchronised once (device time
per call); implementations alternate round by round; medians over ``--rounds`` rounds. The JSON holds the command,
the machine, every record and sample. ``--profile`` adds each forward + backward kernel by kernel (``… kernels``
records, ``bench/_profile.py``): which kernels make the grouped matmul's gap to the dense one.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _util import Results, batched_seconds, check, format_table  # noqa: E402

#: (label, rows, k, n, experts): the gmm part's shapes
GMM_SHAPES = [("qwen3", 65536, 2048, 768, 8), ("qwen3", 65536, 2048, 768, 64), ("qwen3", 65536, 2048, 768, 128),
              ("mixtral", 65536, 4096, 14336, 8)]
#: (label, tokens, hidden, expert_ffn, experts, top_k): the layer part's shapes (tokens x top_k routed rows)
LAYER_SHAPES = [("qwen3", 8192, 2048, 768, 8, 8), ("qwen3", 8192, 2048, 768, 64, 8),
                ("qwen3", 8192, 2048, 768, 128, 8), ("mixtral", 32768, 4096, 14336, 8, 2)]
SMOKE_GMM = [("smoke", 96, 32, 48, 4)]
SMOKE_LAYER = [("smoke", 48, 32, 16, 4, 2)]


def group_sizes(rows: int, experts: int, alpha: float, seed: int, unrouted: float = 0.0):
    """Uneven sizes drawn from a Dirichlet (a router's load), summing to ``rows`` less the fraction ``unrouted``
    (rows past every group, which the result must hold as zeros)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    share = rng.dirichlet(np.full(experts, alpha))
    routed = rows - round(unrouted * rows)
    sizes = np.floor(share * routed).astype(np.int64)
    sizes[np.argmax(sizes)] += routed - sizes.sum()
    return sizes.astype(np.int32)


def _timed(results: Results, bench: str, fns: dict, args, flops: float) -> None:
    import jax

    samples = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            with results.guard(bench, name):
                samples[name] += batched_seconds(lambda i, fn=fn: fn(), args.calls, 1, 1, jax.block_until_ready)
    for name, s in samples.items():
        if s:
            med = sorted(s)[len(s) // 2]
            results.add(bench, name, median_us=med * 1e6, min_us=min(s) * 1e6, max_us=max(s) * 1e6,
                        tflops=flops / med / 1e12, samples=[x * 1e6 for x in s])
    if args.profile and bench.endswith("forward+backward"):
        from _profile import kernel_times

        for name, fn in fns.items():
            with results.guard(bench + " kernels", name):
                results.add(bench + " kernels", name, median_us=None, kernels=kernel_times(fn, args.calls))


def forward_backward(f, x, w, *rest, cot):
    """``f(x, w, *rest)`` and its vector-Jacobian product with ``cot`` in ``x`` and ``w``. The forward is returned,
    so XLA cannot drop it: the gradients of a linear function do not need it, so a ``jax.grad`` of
    ``vdot(f(x, w), cot)`` would time two matmuls for XLA's ops but three for a custom call, which is never
    dropped."""
    import jax

    out, vjp = jax.vjp(lambda x, w: f(x, w, *rest), x, w)
    return out, vjp(cot)


def _tune(results: Results, bench: str, fn, args, *operands) -> None:
    """``tritonplug.tune(fn, *operands)`` unless ``--no-tune``: each kernel's configurations timed, each as a
    program of its own, and the fastest recorded, so the timed programs run it (``kernels.autotune_mode``)."""
    import tritonplug

    if args.no_tune:
        return
    with results.guard(bench + " tune", "tritonplug"):
        report = tritonplug.tune(fn, *operands)
        results.add(bench + " tune", "tritonplug", median_us=None, tuned=report.to_json())


def part_gmm(results: Results, args) -> None:
    for label, m, k, n, g in (SMOKE_GMM if args.smoke else GMM_SHAPES):
        if (not args.experts or g in args.experts) and (not args.shapes or label in args.shapes):
            _gmm_shape(results, args, label, m, k, n, g)


def _gmm_shape(results: Results, args, label: str, m: int, k: int, n: int, g: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from examples.moe.grouped import grouped_matmul

    keys = jax.random.split(jax.random.key(g), 4)
    lhs = jax.random.normal(keys[0], (m, k), jnp.bfloat16)
    rhs = (jax.random.normal(keys[1], (g, k, n), jnp.float32) / k ** 0.5).astype(jnp.bfloat16)
    dense_w = rhs[0]
    sizes = jnp.asarray(group_sizes(m, g, args.alpha, args.seed, args.unrouted))
    cot = jax.random.normal(keys[2], (m, n), jnp.bfloat16)
    impls = {name: f for name, f in (("grouped_matmul", grouped_matmul), ("ragged_dot", jax.lax.ragged_dot))
             if name in args.impls}
    fwd = {name: jax.jit(f) for name, f in impls.items()}
    fwd_bwd = {name: jax.jit(functools.partial(forward_backward, f, cot=cot)) for name, f in impls.items()}
    dense = jax.jit(lambda x, w: x @ w)
    dense_fb = jax.jit(functools.partial(forward_backward, lambda x, w: x @ w, cot=cot))
    bench = f"gmm {label} m={m} k={k} n={n} experts={g}" + (f" unrouted={args.unrouted}" if args.unrouted else "")
    flops = 2.0 * m * k * n
    if "grouped_matmul" in impls:
        _tune(results, bench, functools.partial(forward_backward, grouped_matmul, cot=cot), args, lhs, rhs, sizes)
    if len(impls) == 2:
        with results.guard(bench + " check", "grouped_matmul"):  # on the host: each result read back at once
            want = np.asarray(fwd["ragged_dot"](lhs, rhs, sizes), np.float32)
            record = results.add(bench + " check", "grouped_matmul", median_us=None)
            got = np.asarray(fwd["grouped_matmul"](lhs, rhs, sizes), np.float32)
            scale = float(np.max(np.abs(want))) or 1.0
            check(record, got / scale, want / scale, 2e-2)
            grads = [[np.asarray(x, np.float32) for x in fwd_bwd[name](lhs, rhs, sizes)[1]]
                     for name in ("grouped_matmul", "ragged_dot")]
            for which, a, b in zip(("dlhs", "drhs"), *grads, strict=True):
                record[f"{which}_max_rel_diff"] = float(np.max(np.abs(a - b))) / (float(np.max(np.abs(b))) or 1.0)
    _timed(results, bench + " forward", {"dense": lambda: dense(lhs, dense_w),
                                         **{name: functools.partial(f, lhs, rhs, sizes)
                                            for name, f in fwd.items()}}, args, flops)
    _timed(results, bench + " forward+backward", {"dense": lambda: dense_fb(lhs, dense_w),
                                                  **{name: functools.partial(f, lhs, rhs, sizes)
                                                     for name, f in fwd_bwd.items()}}, args, 3 * flops)


def part_layer(results: Results, args) -> None:
    for label, t, d, f, g, top_k in (SMOKE_LAYER if args.smoke else LAYER_SHAPES):
        if (not args.experts or g in args.experts) and (not args.shapes or label in args.shapes):
            _layer_shape(results, args, label, t, d, f, g, top_k)


def _layer_shape(results: Results, args, label: str, t: int, d: int, f: int, g: int, top_k: int) -> None:
    import jax
    import jax.numpy as jnp

    from examples.moe.config import MoEConfig
    from examples.moe.layer import moe_mlp
    from examples.moe.model import EXPERT_PARALLEL

    cfg = MoEConfig(vocab=1, hidden=d, layers=1, heads=1, kv_heads=1, ffn=0, seq=1, batch=1, experts=g,
                    top_k=top_k, expert_ffn=f)
    keys = jax.random.split(jax.random.key(g), 5)
    h = jax.random.normal(keys[0], (t, d), jnp.bfloat16)
    p = {"router": jax.random.normal(keys[1], (d, g), jnp.bfloat16) * 0.02,
         "w_gate_up": (jax.random.normal(keys[2], (g, d, 2 * f), jnp.float32) / d ** 0.5).astype(jnp.bfloat16),
         "w_down": (jax.random.normal(keys[3], (g, f, d), jnp.float32) / f ** 0.5).astype(jnp.bfloat16)}
    cot = jax.random.normal(keys[4], (t, d), jnp.bfloat16)

    def step(h, p, choice):  # the forward returned too (see forward_backward); expert-parallel on one device
        mlp = EXPERT_PARALLEL[choice] if choice in EXPERT_PARALLEL else functools.partial(moe_mlp, choice=choice)
        (out, aux), vjp = jax.vjp(lambda h, p: mlp(h, p, cfg), h, p)
        return out, aux, vjp((cot, jnp.ones_like(aux)))

    fns = {c: jax.jit(functools.partial(step, choice=c)) for c in args.layer_choices.split(",")}
    bench = f"layer {label} tokens={t} d={d} f={f} experts={g} top_k={top_k} forward+backward"
    _tune(results, bench, functools.partial(step, choice="tritonplug"), args, h, p)
    if args.dw_row_ids:
        with _dw_through_row_ids():
            traced = functools.partial(step, choice="tritonplug")
            _tune(results, bench + " dw-row-ids", traced, args, h, p)
            fns["tritonplug:dw-row-ids"] = jax.jit(traced).lower(h, p).compile()
    flops = 3 * 2.0 * t * top_k * d * 3 * f  # gate, up, down: each forward matmul and its two gradients
    _timed(results, bench, {c: functools.partial(fn, h, p) for c, fn in fns.items()}, args, flops)


@contextlib.contextmanager
def _dw_through_row_ids():
    """Programs traced inside read the layer's dW through the plan's row ids (``kernels.GATHER_DW_ROWS`` off),
    as before the rows were copied into group order: ``--dw-row-ids`` times both side by side."""
    from examples.moe import kernels

    kernels.GATHER_DW_ROWS = False
    try:
        yield
    finally:
        kernels.GATHER_DW_ROWS = True


def part_model(results: Results, args) -> None:
    """Each choice trains in a process of its own from the same init and batches, one after another, or at once
    with ``--model-gpus`` (choice ``i`` on GPU ``model_gpus[i]``)."""
    train = ROOT / "examples" / "moe" / "train.py"
    config = "tiny" if args.smoke else args.model_config
    bench = f"model {config} steps={args.steps}"
    choices = args.model_choices.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        def start(i: int, entry: str):
            choice, _, how = entry.partition(":")
            cmd = [sys.executable, str(train), "--config", config, "--ops", choice, "--steps", str(args.steps),
                   "--json", str(Path(tmp) / f"{entry}.json"),
                   *(["--tune"] if choice == "tritonplug" and not args.no_tune else []),
                   *(["--no-donate"] if how == "no-donate" else []), *args.model_train_args.split()]
            env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": gpus[i]} if args.model_gpus else {}))
            with open(Path(tmp) / f"{entry}.log", "w") as log:
                return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)

        gpus = args.model_gpus or [None] * len(choices)
        procs = {}
        for i, choice in enumerate(choices):
            procs[choice] = start(i, choice)
            if not args.model_gpus:
                procs[choice].wait(timeout=1800)
        for i, (entry, proc) in enumerate(procs.items()):
            proc.wait(timeout=1800)
            choice, _, how = entry.partition(":")
            impl = f"{choice} (no donation)" if how == "no-donate" else choice
            if proc.returncode != 0:
                results.add(bench, impl, median_us=None, error=(Path(tmp) / f"{entry}.log").read_text()[-3000:])
                continue
            (run,) = json.loads((Path(tmp) / f"{entry}.json").read_text())["runs"].values()
            results.add(bench, impl, median_us=run["step_seconds_median"] * 1e6, tokens_per_s=run["tokens_per_s"],
                        device_peak_bytes=run.get("device_peak_bytes"), plan_bytes=run.get("plan_bytes"),
                        losses=run["losses"], gpu=gpus[i])


def part_grads(results: Results, args) -> None:
    """The model's loss gradients per choice (``--grads-layers``, ``--grads-batch``) against a reference: by default
    the ``jax`` choice in fp32 at the highest matmul precision (``--grads-ref``, ``--grads-ref-dtype``).
    Per parameter, the relative L2 error and the cosine."""
    import jax
    import numpy as np

    from examples.llama.data import MarkovText
    from examples.moe import model
    from examples.moe.config import CONFIGS

    cfg = CONFIGS["tiny-bf16" if args.smoke else args.model_config].replace(layers=args.grads_layers,
                                                                           batch=args.grads_batch)
    params = model.init(cfg, jax.random.key(args.seed))
    tokens, targets = MarkovText(cfg.vocab, seed=args.seed).batch(cfg.batch, cfg.seq)

    def grads(cfg, choice):
        fn = jax.jit(jax.value_and_grad(functools.partial(model.loss, cfg=cfg, ops=model.MoEOps(choice))))
        loss, g = fn(params, tokens, targets)
        return float(loss), {jax.tree_util.keystr(k): np.asarray(v, np.float64)
                             for k, v in jax.tree_util.tree_leaves_with_path(g)}

    with jax.default_matmul_precision("highest"):
        ref_loss, ref = grads(cfg.replace(dtype=args.grads_ref_dtype), args.grads_ref)
    bench = (f"grads {cfg.experts} experts top_k={cfg.top_k} layers={cfg.layers} tokens={cfg.batch * cfg.seq} "
             f"vs {args.grads_ref} {args.grads_ref_dtype}")
    for choice in ("jax", "jax-dense", "tritonplug"):
        with results.guard(bench, choice):
            loss, got = grads(cfg, choice)
            per = {}
            for name, want in ref.items():
                norm = float(np.linalg.norm(want)) or 1.0
                cos = float(np.vdot(got[name], want)) / ((float(np.linalg.norm(got[name])) or 1.0) * norm)
                per[name] = {"rel_l2": float(np.linalg.norm(got[name] - want)) / norm, "cosine": cos}
            results.add(bench, choice, median_us=None, loss=loss, ref_loss=ref_loss, per_param=per,
                        worst_rel_l2=max(v["rel_l2"] for v in per.values()))


def part_first_steps(results: Results, args) -> None:
    """Where the ``jax`` choice's loss curve leaves the others' (docs/moe.md): each choice's trainer takes two steps
    as ``train.py`` does. The first step's learning rate is 0 (warm-up from 0), so its update must leave the
    parameters as they were, and the second step's loss must equal the loss of the initial parameters on the
    second batch, computed apart by a plain ``jit`` (no donation). Per choice: both losses, and the largest change
    of any parameter over the first step."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from examples.llama.data import MarkovText
    from examples.llama.step import Trainer
    from examples.moe import model
    from examples.moe.config import CONFIGS

    cfg = CONFIGS["tiny-bf16" if args.smoke else args.model_config]
    bench = f"first steps {'tiny-bf16' if args.smoke else args.model_config}"
    for choice, donate in ((c, d) for c in args.first_steps_choices.split(",") for d in args.first_steps_donate):
        impl = choice if donate else f"{choice} (no donation)"
        with results.guard(bench, impl):
            params = model.init(cfg, jax.random.key(args.seed))
            data = MarkovText(cfg.vocab, seed=args.seed)
            batches = [data.batch(cfg.batch, cfg.seq) for _ in range(2)]
            ops = model.MoEOps(choice)
            plain = jax.jit(functools.partial(model.loss, cfg=cfg, ops=ops))
            apart = [float(plain(params, *b)) for b in batches]
            trainer = Trainer(cfg, ops, params, loss=model.loss, param_specs=model.PARAM_SPECS, donate=donate)
            first = trainer.step(*batches[0])
            counts = [int(c) for c in jax.tree_util.tree_leaves(trainer.opt_state) if jnp.ndim(c) == 0]
            moved = {jax.tree_util.keystr(k): float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))
                     for (k, a), b in zip(jax.tree_util.tree_leaves_with_path(trainer.params),
                                          jax.tree_util.tree_leaves(params), strict=True)}
            after = float(plain(trainer.params, *batches[1]))
            second = trainer.step(*batches[1])
            results.add(bench, impl, median_us=None, step_losses=[first, second], apart_losses=apart, counts=counts,
                        loss_after_first_step_apart=after, largest_change=max(moved.values()),
                        changed=[k for k, v in moved.items() if v != 0.0 or not np.isfinite(v)])
            del trainer, plain


PARTS = {"gmm": part_gmm, "layer": part_layer, "model": part_model, "grads": part_grads,
         "first-steps": part_first_steps}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="gmm,torch,layer,model")
    p.add_argument("--experts", type=lambda s: [int(x) for x in s.split(",")], help="only these expert counts")
    p.add_argument("--shapes", type=lambda s: s.split(","), help="gmm and layer parts: only these shapes "
                   "(qwen3, mixtral)")
    p.add_argument("--dw-row-ids", action="store_true", help="layer part: the tritonplug choice also with its dW "
                   "through the plan's row ids (kernels.GATHER_DW_ROWS off), side by side")
    p.add_argument("--layer-choices", default="jax,jax-dense,tritonplug", help="layer part: the choices")
    p.add_argument("--impls", default="grouped_matmul,ragged_dot", help="gmm part: which of the two to run")
    p.add_argument("--autotune", action="store_true", help="let jaxlib's runtime autotune on the device "
                   "(examples/moe/kernels.py: ON_DEVICE_AUTOTUNE says why it is off by default)")
    p.add_argument("--no-tune", action="store_true", help="no tritonplug.tune before timing: untuned calls run "
                   "their kernels' first configuration (or all, autotuned on the device, with --autotune)")
    p.add_argument("--configs", type=lambda s: [int(x) for x in s.split(",")],
                   help="only these of the kernels' autotuning configurations (indices)")
    p.add_argument("--alpha", type=float, default=1.0, help="the Dirichlet's concentration for group sizes")
    p.add_argument("--unrouted", type=float, default=0.0, help="gmm part: the fraction of rows past every group "
                   "(zeros in the result: checks that the kernels write them)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--steps", type=int, default=12, help="training steps per choice (model part)")
    p.add_argument("--model-config", default="qwen3-64e")
    p.add_argument("--model-train-args", default="", help="model part: more arguments of train.py ('--lr 1e-4')")
    p.add_argument("--model-choices", default="jax,jax-dense,tritonplug", help="model part: the choices; "
                   "`CHOICE:no-donate` runs one whose step keeps its inputs (train.py --no-donate)")
    p.add_argument("--model-gpus", type=lambda s: s.split(","), help="model part: the choices at once, the i-th on "
                   "GPU i of this list (CUDA_VISIBLE_DEVICES)")
    p.add_argument("--grads-batch", type=int, default=2, help="sequences of the grads part's batch")
    p.add_argument("--grads-layers", type=int, default=1, help="layers of the grads part's model")
    p.add_argument("--grads-ref", default="jax", help="the grads part's reference choice")
    p.add_argument("--grads-ref-dtype", default="float32", help="the grads part's reference dtype")
    p.add_argument("--first-steps-choices", default="jax,jax-dense,tritonplug", help="first-steps part: the choices")
    p.add_argument("--first-steps-donate", default=[True], type=lambda s: [w == "on" for w in s.split(",")],
                   help="first-steps part: `on`, `off` or `on,off`: whether the step donates its inputs")
    p.add_argument("--profile", action="store_true", help="gmm and layer parts: each forward + backward kernel by "
                   "kernel (a jax.profiler trace of --calls calls, bench/_profile.py): where the time goes")
    p.add_argument("--smoke", action="store_true", help="tiny shapes: checks the script on any backend")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    from examples.moe import kernels

    kernels.ON_DEVICE_AUTOTUNE = args.autotune
    if args.configs:
        kernels.FORWARD_CONFIGS[:] = [kernels.FORWARD_CONFIGS[i] for i in args.configs]
        kernels.DW_CONFIGS[:] = [kernels.DW_CONFIGS[min(i, len(kernels.DW_CONFIGS) - 1)] for i in args.configs]
    results = Results(args.out, parts=args.parts, alpha=args.alpha, unrouted=args.unrouted, configs=args.configs,
                      autotune=args.autotune, tuned=not args.no_tune, fwd_bwd_returns_forward=True)
    for part in args.parts.split(","):
        if part == "torch":
            from moe_torch import part_torch

            part_torch(results, args, group_sizes)
        else:
            PARTS[part](results, args)
        results.save()
    print(format_table([r for r in results.records if "samples" in r or "error" in r],
                       ["bench", "impl", "median_us", "tflops", "error"]))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", ".9")
    main()
