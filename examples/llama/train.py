"""Train the Llama-style model of ``examples/llama`` on synthetic text, with either op choice or both.

    python examples/llama/train.py --config tiny --ops compare --steps 20        # a CPU, seconds
    python examples/llama/train.py --config 1b --ops tritonplug --batch 8        # one GPU
    python examples/llama/train.py --config 1b --ops jax --mesh data=2,model=2   # four GPUs, one jit

``--ops`` is ``jax``, ``tritonplug``, a per-op mix (``tritonplug,attention=jax``) or ``compare``: both from the
same init and batches, both losses printed per step. The last line printed is one JSON object: per op choice
the losses, tokens/s (steps after the first, which compiles) and memory: XLA's plan for the step
(arguments + outputs - donated + temporaries) and, on a GPU, the device's peak bytes in use (a process-wide
high-water mark: run one op choice per process to read it for each).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "examples.llama"

import jax  # noqa: E402
import numpy as np  # noqa: E402

from .config import CONFIGS, Config  # noqa: E402
from .data import MarkovText  # noqa: E402
from .model import init  # noqa: E402
from .ops import Ops  # noqa: E402
from .step import Trainer  # noqa: E402


def parser(description: str, configs: dict, ops_help: str) -> argparse.ArgumentParser:
    """The command line of this script; ``examples/moe/train.py`` shares it with its own configs and choices."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--config", default="tiny", choices=sorted(configs))
    p.add_argument("--ops", default="compare", help=ops_help)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, help="sequences per step (default: the config's)")
    p.add_argument("--seq", type=int, help="tokens per sequence (default: the config's)")
    p.add_argument("--layers", type=int, help="override the config's layer count")
    p.add_argument("--remat", choices=("full", "dots", "none"), help="override the config's rematerialisation")
    p.add_argument("--lr", type=float, help="override the config's peak learning rate")
    p.add_argument("--warmup", type=int, help="override the config's warm-up steps (from a learning rate of 0)")
    p.add_argument("--mesh", type=mesh_shape, help="shard over devices as one jit: 'data=2,model=2' "
                                                   "(data x tensor parallel)")
    p.add_argument("--tune", action="store_true", help="tritonplug.tune each choice's step once before training "
                                                       "(its kernels' fastest configurations, and launched or "
                                                       "inlined for the ports' inline='auto' kernels, recorded)")
    p.add_argument("--plan-only", action="store_true", help="compile the step, report XLA's memory plan, run nothing")
    p.add_argument("--no-donate", dest="donate", action="store_false", help="the step keeps its inputs (more memory)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the final JSON object to this file")
    p.add_argument("--profile", type=Path, help="trace each choice's last step with jax.profiler into PROFILE/CHOICE "
                                                "(python bench/_profile.py PROFILE/CHOICE: its kernels by time)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    return parser(__doc__.split("\n\n")[0], CONFIGS,
                  "jax | tritonplug | compare | a mix such as 'jax,loss=tritonplug' ('loss=liger': the fused loss "
                  "with the vocabulary whole under --mesh model=N, as before the vocabulary-parallel one)"
                  ).parse_args(argv)


def configure(args: argparse.Namespace, configs: dict = CONFIGS) -> Config:
    cfg = configs[args.config]
    changes = {k: v for k, v in (("batch", args.batch), ("seq", args.seq), ("layers", args.layers),
                                 ("remat", args.remat), ("lr", args.lr),
                                 ("warmup", args.warmup)) if v is not None}
    return cfg.replace(**changes)


def main(argv=None) -> dict:
    args = parse_args(argv)
    cfg = configure(args)
    choices = [Ops.of("jax"), Ops.of("tritonplug")] if args.ops == "compare" else [Ops.parse(args.ops)]
    mesh = mesh_of(args.mesh, cfg.batch) if args.mesh else None
    params = init(cfg, jax.random.key(args.seed))
    return train(args, cfg, [Trainer(cfg, ops, params, mesh, donate=args.donate) for ops in choices], mesh, argv)


def train_family(args: argparse.Namespace, cfg: Config, family, make_ops, argv=None, documents: int = 0) -> dict:
    """A model of the Llama family (``examples/moe``, ``examples/mamba2``: a module ``family`` with ``CHOICES``,
    ``init``, ``loss`` and ``PARAM_SPECS``, or ``param_specs(mesh)`` where they depend on the mesh) trained per op
    choice (``args.ops``, or each of ``CHOICES`` for ``compare``) from one init, as :func:`train` trains:
    ``make_ops(choice, dense, mesh)`` is a choice's ops, the rest of the model on the Llama example's
    ``--dense-ops``. On a mesh ``compare`` runs the family's ``MESH_CHOICES`` where it has them (the choices whose
    kernels are partitioned). ``documents``: as :func:`train`'s."""
    dense = Ops.parse(args.dense_ops)
    mesh = mesh_of(args.mesh, cfg.batch) if args.mesh else None
    compared = getattr(family, "MESH_CHOICES", family.CHOICES) if mesh else family.CHOICES
    choices = [make_ops(c, dense, mesh) for c in (compared if args.ops == "compare" else (args.ops,))]
    params = family.init(cfg, jax.random.key(args.seed))
    specs = family.param_specs(mesh) if hasattr(family, "param_specs") else family.PARAM_SPECS
    trainers = [Trainer(cfg, ops, params, mesh, loss=family.loss, param_specs=specs, donate=args.donate)
                for ops in choices]
    return train(args, cfg, trainers, mesh, argv, documents)


def train(args: argparse.Namespace, cfg: Config, trainers: list[Trainer], mesh, argv=None, documents: int = 0) -> dict:
    """Train every trainer on the same batches; print each step's losses, then the report as one JSON line.
    ``documents``: a mean length, to pack documents into each row (``MarkovText``'s; 0: one per row)."""
    data = MarkovText(cfg.vocab, seed=args.seed, documents=documents)
    print(f"config {args.config}: {cfg.params() / 1e6:.1f}M params, batch {cfg.batch} x seq {cfg.seq}, "
          f"{cfg.dtype}, on {jax.devices()[0].platform} x {len(jax.devices())}"
          + (f", mesh {dict(mesh.shape)}" if mesh else ""), flush=True)
    if args.tune:  # on a batch of its own: the training's batches stay those of a run without --tune
        tokens, targets = MarkovText(cfg.vocab, seed=args.seed + 1, documents=documents).batch(cfg.batch, cfg.seq)
        for t in trainers:
            print(f"tune {t.ops.label()}: {t.tune(tokens, targets)}", flush=True)
    if args.plan_only:
        tokens, targets = data.batch(cfg.batch, cfg.seq)
        for t in trainers:
            t.compile(tokens, targets)
    for step in range(0 if args.plan_only else args.steps):
        tokens, targets = data.batch(cfg.batch, cfg.seq)
        losses = []
        for t in trainers:
            traced = args.profile is not None and step == args.steps - 1
            with jax.profiler.trace(str(args.profile / t.ops.label())) if traced else contextlib.nullcontext():
                losses.append(t.step(tokens, targets))
        print(f"step {step:4d}  " + "  ".join(f"{t.ops.label()} {loss:.4f}" for t, loss in zip(trainers, losses,
                                                                                              strict=True)), flush=True)
    report = {
        "command": " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]),
        "machine": {"platform": jax.devices()[0].platform, "device": jax.devices()[0].device_kind,
                    "devices": len(jax.devices()), "host": platform.node(), "jax": jax.__version__},
        "config": {"name": args.config, **{k: v for k, v in vars(cfg).items()}, "params": cfg.params()},
        "mesh": dict(mesh.shape) if mesh else None,
        "runs": {t.ops.label(): t.summary() for t in trainers},
    }
    if len(trainers) >= 2 and trainers[0].losses:
        first, *rest = (np.asarray(t.losses) for t in trainers)
        report["max_loss_difference"] = max((float(np.max(np.abs(first - other))) for other in rest), default=0.0)
    line = json.dumps(report)
    print(line, flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return report


MESH_AXES = ("data", "model")


def mesh_shape(text: str) -> tuple[int, int]:
    """``--mesh``'s value, ``data=2,model=2`` (either axis may be left out: 1), as (data, model) sizes; argparse
    reports a malformed one naming the option."""
    sizes: dict[str, int] = {}
    for item in text.split(","):
        axis, sep, size = (part.strip() for part in item.partition("="))
        wrong = (f"{item!r} is not axis=size" if not sep else f"unknown axis {axis!r}" if axis not in MESH_AXES
                 else f"axis {axis!r} is given twice" if axis in sizes else "")
        if wrong:
            raise argparse.ArgumentTypeError(f"{wrong}; write e.g. 'data=2,model=2' (axes: data, model)")
        if not size.isdigit() or int(size) < 1:
            raise argparse.ArgumentTypeError(f"the size of axis {axis!r} must be a positive integer, got {size!r}")
        sizes[axis] = int(size)
    return sizes.get("data", 1), sizes.get("model", 1)


def mesh_of(shape: tuple[int, int], batch: int) -> jax.sharding.Mesh:
    """The (data, model) mesh of ``--mesh``; a batch the data axis does not divide, or a mesh of another size than
    the devices visible, ends the run with an error naming the option (as argparse's)."""
    data, model = shape
    if batch % data:
        _refuse(f"data={data} does not divide the batch ({batch} sequences): give --batch a multiple of {data}")
    if data * model != len(jax.devices()):
        _refuse(f"data={data},model={model} is {data * model} devices, but {len(jax.devices())} are visible")
    return jax.make_mesh(shape, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 2)


def _refuse(message: str) -> None:
    raise SystemExit(f"{Path(sys.argv[0]).name}: error: argument --mesh: {message}")


if __name__ == "__main__":
    main()
