"""Issue 38: the Liger ports' kernels launched, inlined as XLA ops, or ``inline="auto"``, against XLA's own ops.

    python bench/fusion.py --out bench/results/fusion-h200/run1.json          # every part, the 1b config
    python bench/fusion.py --parts ops --ops rms_norm --out ...               # some of it
    python bench/fusion.py --smoke --out /tmp/fusion-cpu.json                 # tiny shapes, few repeats, any backend

Parts (``--parts``, comma-separated):

* ``ops``: each op (``--ops``: ``rms_norm``, ``rope``, ``swiglu``, and ``loss``, Liger's fused linear cross
  entropy, if asked for) at the Llama config's shapes (``--config``, ``examples/llama/config.py``; activations
  ``(batch, seq, ...)`` in its dtype), four programs each: ``forward``, ``forward+backward`` (the forward
  returned with its vector-Jacobian product, its cotangent a function of the output, so neither is dropped),
  ``backward`` (the vector-Jacobian product alone, its cotangent read from memory: in a model the forward and the
  backward run apart, between other ops, so this program and ``forward`` are what each costs there, where in
  ``forward+backward`` XLA may fuse both into one pass) and ``fused`` (``op(x*a+b)*c``: what XLA can fuse around
  the op). Variants, side by side in one process: ``xla`` (the ``jax`` op of
  ``examples/llama/ops.py``), ``launch`` (the port's kernels launched, ``inline=False``), ``inline`` (their
  translation to XLA ops, ``inline=True``) and ``auto`` (``inline="auto"`` after ``tritonplug.tune`` timed that
  very program with each call launched and inlined, greedily, and recorded the paths it kept). Each record holds
  how many kernel calls the lowered program carries and every lowering's path and reason
  (``tritonplug.inspection.paths``), so a variant that is not what it says shows; its outputs are compared with
  ``xla``'s; ``auto_vs_best`` is auto's median over the better of launch and inline.
* ``cpu``: each op's programs lowered for the CPU with ``inline=True``: the gathers, scatters and while loops of
  each kernel's translation at those shapes (``paths()[...].unfusible``, the check ``"auto"`` applies).
* ``step``: the Llama loss and its gradient (``jax.value_and_grad`` of ``examples/llama/model.loss``) per op choice
  (``--step-choices``: ``jax``, ``tritonplug`` or ``jax,rope=tritonplug`` as ``train.py --ops`` takes them, each
  with a mode ``:launch``, ``:inline`` or ``:auto`` for the Liger kernels of the ops given ``tritonplug``), in
  tokens/s.

Timing: each variant is jitted and compiled first; a sample is ``--calls`` back-to-back calls synchronised once;
variants alternate round by round; medians over ``--rounds`` rounds. The JSON holds the command, the machine,
every record and sample. The lead runs it on the H200; ``--smoke`` checks the script anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _util import Results, batched_seconds, format_table  # noqa: E402

OPS = ("rms_norm", "rope", "swiglu", "loss")
VARIANTS = ("xla", "launch", "inline", "auto")
MODES = {"launch": False, "inline": True, "auto": "auto"}
#: The port modules whose kernels each op's ``tritonplug`` implementation launches.
PORTS = {"rms_norm": ("liger_rms_norm",), "rope": ("liger_rope",), "swiglu": ("liger_swiglu",),
         "loss": ("liger_fused_linear_cross_entropy",)}
PROGRAMS = ("forward", "forward+backward", "backward", "fused")
#: the ops whose activations ``--tokens`` gives as one row per token (RoPE's are heads, attention's layout)
TOKEN_ROWS = ("rms_norm", "swiglu")


def port_kernels(op: str) -> list:
    """The Triton kernels of ``op``'s ports (each ``tritonplug.launch`` launcher's kernel)."""
    import importlib

    import tritonplug

    kernels = []
    for name in PORTS[op]:
        module = importlib.import_module(f"examples.ports.{name}")
        kernels += [v.kernel for v in vars(module).values() if isinstance(v, tritonplug.Launcher)]
    return kernels


def set_mode(ops: tuple[str, ...], mode) -> None:
    """Every kernel of ``ops``' ports inlined, launched or ``"auto"`` by default (``tritonplug.set_inline``)."""
    import tritonplug

    for op in ops:
        for kernel in port_kernels(op):
            tritonplug.set_inline(kernel, mode)


def inputs(op: str, cfg, seed: int = 0, tokens: bool = False) -> tuple[tuple, int, tuple]:
    """``op``'s array arguments at ``cfg``'s shapes, how many of the first are differentiated, and the static
    arguments that follow them (RMSNorm's epsilon). ``tokens``: RMSNorm's and SwiGLU's activations as ``(batch *
    seq, features)``, one row per token (:data:`TOKEN_ROWS`), not ``(batch, seq, features)``."""
    args, n_diff, static = _inputs(op, cfg, seed)
    if tokens and op in TOKEN_ROWS:
        args = tuple(a.reshape(-1, a.shape[-1]) if a.ndim == 3 else a for a in args)
    return args, n_diff, static


def _inputs(op: str, cfg, seed: int) -> tuple[tuple, int, tuple]:
    import jax
    import jax.numpy as jnp

    keys = iter(jax.random.split(jax.random.key(seed), 8))
    dtype = cfg.compute_dtype

    def normal(*shape, scale=1.0, dt=dtype):
        return (scale * jax.random.normal(next(keys), shape, jnp.float32)).astype(dt)

    b, s, h = cfg.batch, cfg.seq, cfg.hidden
    if op == "rms_norm":
        return (normal(b, s, h), (1 + normal(h, scale=0.1, dt=jnp.float32)).astype(dtype)), 2, (cfg.eps,)
    if op == "rope":
        from examples.llama.model import rope_tables

        cos, sin = rope_tables(cfg)
        return (normal(b, s, cfg.heads, cfg.head_dim), normal(b, s, cfg.kv_heads, cfg.head_dim), cos, sin), 2, ()
    if op == "swiglu":
        return (normal(b, s, cfg.ffn), normal(b, s, cfg.ffn)), 2, ()
    targets = jax.random.randint(next(keys), (b * s,), 0, cfg.vocab, jnp.int32)
    return (normal(b * s, h), normal(cfg.vocab, h, scale=0.02), targets), 2, ()


def programs(op: str, impl, n_diff: int, static: tuple = ()) -> dict:
    """The programs of one implementation of ``op``: forward, forward+backward, backward (its arguments' last the
    cotangent: :func:`program_args`), fused (``op(x*a+b)*c``)."""
    import jax

    if static:
        impl = functools.partial(lambda f, *a: f(*a, *static), impl)

    def forward(*args):
        return impl(*args)

    def forward_backward(*args):
        out, vjp = jax.vjp(lambda *d: impl(*d, *args[n_diff:]), *args[:n_diff])
        return out, vjp(jax.tree.map(lambda o: (o * 0.5 + 1).astype(o.dtype), out))

    def backward(*args):
        *inputs, cotangent = args
        return jax.vjp(lambda *d: impl(*d, *inputs[n_diff:]), *inputs[:n_diff])[1](cotangent)

    def fused(*args):
        x = args[0]
        out = impl((x * 1.5 + 0.25).astype(x.dtype), *args[1:])
        return jax.tree.map(lambda o: (o * 0.75).astype(o.dtype), out)

    return {"forward": forward, "forward+backward": forward_backward, "backward": backward, "fused": fused}


def program_args(program: str, forward, args: tuple) -> tuple:
    """``args``, and for ``backward`` a cotangent of ``forward``'s outputs after them (normal, their dtypes): read
    from memory, as in a model, where it comes from the next op's backward and the forward ran apart."""
    import jax

    if program != "backward":
        return args
    shapes = jax.eval_shape(forward, *args)
    leaves, tree = jax.tree.flatten(shapes)
    keys = jax.random.split(jax.random.key(7), len(leaves))
    noise = [jax.random.normal(key, leaf.shape, jax.numpy.float32).astype(leaf.dtype)
             for key, leaf in zip(keys, leaves, strict=True)]
    return (*args, jax.tree.unflatten(tree, noise))


def build(fn, args: tuple, modes_for: tuple[str, ...], mode) -> tuple:
    """``fn`` jitted and compiled at ``args`` with ``modes_for``' kernels in ``mode`` (``None``: leave them); what
    its lowering says: the kernel calls it carries and each lowering's path and reason."""
    import jax

    import tritonplug
    from tritonplug.inspection import kernel_calls

    if mode is not None:
        set_mode(modes_for, mode)
    jax.clear_caches()  # no trace of another mode is reused
    before = len(tritonplug.inspection.paths())
    lowered = jax.jit(fn).lower(*args)
    taken = [dataclasses.asdict(p) for p in tritonplug.inspection.paths()[before:]]
    return lowered.compile(), {"kernel_calls": len(kernel_calls(lowered.as_text())), "paths": taken}


def timed(results: Results, bench: str, compiled: dict, args: tuple, opts, extra: dict | None = None) -> None:
    """Each compiled variant timed, round by round (``--rounds`` of ``--calls`` calls each), medians recorded. The
    variants' order turns by one each round. In a fixed order (runs up to 16) `auto`, always timed right after
    `inline`, ran 1.03–1.04× slower than `launch` in all three repeats of run 15 (RoPE's forward) though it
    launched the same kernel (lowered for sm_90 on the CPU, the two StableHLO programs are the same): its place
    in the round is the likely cause, which the turning order takes out of the comparison."""
    import jax

    samples: dict[str, list] = {name: [] for name in compiled}
    names = list(compiled)
    for r in range(opts.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = compiled[name]
            with results.guard(bench, name):
                samples[name] += batched_seconds(lambda i, fn=fn: fn(*args), opts.calls, 1, 1, jax.block_until_ready)
    for name, s in samples.items():
        if s:
            med = sorted(s)[len(s) // 2]
            results.add(bench, name, median_us=med * 1e6, min_us=min(s) * 1e6, samples=[x * 1e6 for x in s],
                        **(extra or {}).get(name, {}))


def part_ops(results: Results, opts, cfg) -> None:
    import jax

    import tritonplug
    from examples.llama import ops as llama_ops

    for op in opts.ops:
        base_args, n_diff, static = inputs(op, cfg, tokens=opts.tokens)
        impls = {"xla": llama_ops.IMPLEMENTATIONS[op]["jax"], "tritonplug": llama_ops.IMPLEMENTATIONS[op]["tritonplug"]}
        built = {name: programs(op, impl, n_diff, static) for name, impl in impls.items()}
        for program in PROGRAMS:
            bench = f"{op} {program}{' tokens' if opts.tokens and op in TOKEN_ROWS else ''}"
            fns = {name: progs[program] for name, progs in built.items()}
            args = program_args(program, built["xla"]["forward"], base_args)
            if not opts.no_tune:
                set_mode((op,), "auto")
                with results.guard(bench + " tune", "auto"):
                    report = tritonplug.tune(fns["tritonplug"], *args)
                    results.add(bench + " tune", "auto", median_us=None, tuned=report.to_json())
            compiled, info = {}, {}
            for variant in VARIANTS:
                with results.guard(bench + " build", variant):
                    fn = fns["xla" if variant == "xla" else "tritonplug"]
                    compiled[variant], info[variant] = build(fn, args, (op,), MODES.get(variant))
                    if opts.dump_hlo:
                        opts.dump_hlo.mkdir(parents=True, exist_ok=True)
                        name = f"{op}-{program.replace('+', '-')}-{variant}.hlo.txt"
                        (opts.dump_hlo / name).write_text(compiled[variant].as_text())
            want = compiled["xla"](*args) if "xla" in compiled else None
            for variant, fn in compiled.items():
                if variant != "xla" and want is not None:
                    check_relative(info[variant], fn(*args), want, opts.tol)
            timed(results, bench, compiled, args, opts, info)
            _auto_vs_best(results, bench)
            set_mode((op,), "auto")  # as the ports ship
            jax.clear_caches()


def check_relative(record: dict, got, want, tol: float) -> None:
    """Note in ``record`` whether each output leaf is within ``tol`` of XLA's, relative to that leaf's largest
    magnitude (at least 1): both are bf16, and a weight gradient summed over 16k rows is in the thousands, where
    one bf16 step is 16-64 (run1's absolute tolerance flagged those)."""
    import jax
    import numpy as np

    worst = 0.0
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        worst = max(worst, float(np.max(np.abs(g - w))) / max(1.0, float(np.max(np.abs(w)))))
    record["max_rel_diff"] = worst
    record["check"] = "ok" if worst <= tol else f"MISMATCH (max relative diff {worst:.3g} > {tol})"


def _auto_vs_best(results: Results, bench: str) -> None:
    auto, launch, inline = (results.find(bench, v) for v in ("auto", "launch", "inline"))
    best = [r["median_us"] for r in (launch, inline) if r and r.get("median_us")]
    if auto and auto.get("median_us") and best:
        auto["auto_vs_best"] = auto["median_us"] / min(best)
    xla = results.find(bench, "xla")
    for r in (auto, launch, inline):
        if r and r.get("median_us") and xla and xla.get("median_us"):
            r["vs_xla"] = r["median_us"] / xla["median_us"]


def part_cpu(results: Results, opts, cfg) -> None:
    """The translations' gathers, scatters and while loops at ``cfg``'s shapes, lowered for the CPU, inlined."""
    import jax

    import tritonplug
    from examples.llama import ops as llama_ops

    for op in opts.ops:
        args, n_diff, static = inputs(op, cfg)
        specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype) if hasattr(a, "shape") else a, args)
        for program in ("forward", "forward+backward"):
            bench = f"{op} {program} cpu translation"
            with results.guard(bench, "inline"):
                set_mode((op,), True)
                jax.clear_caches()
                fn = programs(op, llama_ops.IMPLEMENTATIONS[op]["tritonplug"], n_diff, static)[program]
                before = len(tritonplug.inspection.paths())
                jax.jit(fn).trace(*specs).lower(lowering_platforms=("cpu",))
                taken = tritonplug.inspection.paths()[before:]
                if not taken or any(p.unfusible is None for p in taken):
                    raise RuntimeError(f"the lowering inlined no kernel, or left one unchecked: {taken}")
                totals = {k: sum(p.unfusible.get(k, 0) for p in taken) for k in ("gather", "scatter", "while")}
                results.add(bench, "inline", median_us=None, unfusible=totals,
                            kernels=[[p.kernel, dict(p.unfusible)] for p in taken])
        set_mode((op,), "auto")


def part_step(results: Results, opts, cfg) -> None:
    import jax
    import jax.numpy as jnp

    import tritonplug
    from examples.llama import model
    from examples.llama.ops import Ops

    params = model.init(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (cfg.batch, cfg.seq), 0, cfg.vocab, jnp.int32)
    targets = jnp.roll(tokens, -1, axis=1)
    # tune times the program once per inline='auto' candidate (a compile each): a model of --tune-layers layers
    # makes the same calls (every layer's are alike, and path records are per call), at a fraction of the compile
    tune_cfg = cfg.replace(layers=min(cfg.layers, opts.tune_layers)) if opts.tune_layers else cfg
    tune_params = params if tune_cfg == cfg else model.init(tune_cfg, jax.random.key(0))
    compiled, info = {}, {}
    for choice in opts.step_choices:
        text, _, mode = choice.partition(":")
        ops = Ops.parse(text)
        swapped = tuple(op for op in ("rms_norm", "rope", "swiglu") if ops.choice[op] == "tritonplug")
        step = jax.value_and_grad(functools.partial(model.loss, cfg=cfg, ops=ops))
        with results.guard("step build", choice):
            if mode == "auto" and not opts.no_tune:
                set_mode(swapped, "auto")
                tune_step = jax.value_and_grad(functools.partial(model.loss, cfg=tune_cfg, ops=ops))
                report = tritonplug.tune(tune_step, tune_params, tokens, targets)
                results.add("step tune", choice, median_us=None, tuned=report.to_json(), layers=tune_cfg.layers)
            compiled[choice], info[choice] = build(step, (params, tokens, targets), swapped,
                                                   MODES[mode] if mode else None)
    timed(results, "step", compiled, (params, tokens, targets), opts, info)
    xla = results.find("step", "jax")
    for choice in compiled:
        record = results.find("step", choice)
        if record and record.get("median_us"):
            record["tokens_per_s"] = cfg.batch * cfg.seq / (record["median_us"] * 1e-6)
            if xla and xla.get("median_us"):
                record["vs_xla"] = record["median_us"] / xla["median_us"]  # < 1: faster than XLA's ops
    set_mode(("rms_norm", "rope", "swiglu"), "auto")


PARTS = {"ops": part_ops, "cpu": part_cpu, "step": part_step}
STEP_CHOICES = ("jax", "tritonplug:launch", "tritonplug:inline", "tritonplug:auto", "jax,rms_norm=tritonplug:auto",
                "jax,rope=tritonplug:auto", "jax,swiglu=tritonplug:auto")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="ops,cpu,step")
    p.add_argument("--ops", type=lambda s: tuple(s.split(",")), default=("rms_norm", "rope", "swiglu"),
                   help=f"of {OPS}")
    p.add_argument("--config", default="1b", help="examples/llama/config.py's name (its shapes and dtype)")
    p.add_argument("--batch", type=int, help="the config's batch, unless given")
    p.add_argument("--step-choices", type=lambda s: tuple(s.split(";")), default=STEP_CHOICES,
                   help="';'-separated op choices for the step part, each OPS[:launch|inline|auto]")
    p.add_argument("--tokens", action="store_true", help="ops part: RMSNorm's and SwiGLU's activations as (batch * "
                   "seq, features), one row per token, not (batch, seq, features): the ports' rows view no reshape")
    p.add_argument("--no-tune", action="store_true", help="no tritonplug.tune before timing: 'auto' launches")
    p.add_argument("--tune-layers", type=int, default=2, help="step part: tune the 'auto' choices on the model cut "
                   "to this many layers (the same calls; 0: the whole model)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--tol", type=float, default=0.02, help="largest |variant - xla| / max(1, |xla|) per output that "
                   "passes the check")
    p.add_argument("--dump-hlo", type=Path, help="ops part: write each compiled program's optimized HLO here (why "
                   "one variant is slower than another: what XLA fused)")
    p.add_argument("--smoke", action="store_true", help="the tiny config, 2 rounds of 2 calls: checks the script")
    p.add_argument("--out", type=Path, required=True)
    opts = p.parse_args(argv)
    from examples.llama.config import CONFIGS

    unknown = set(opts.ops) - set(OPS)
    if unknown:
        p.error(f"--ops: unknown {sorted(unknown)}; the ops are {OPS}")
    if opts.smoke:
        opts.config, opts.rounds, opts.calls = "tiny", 2, 2
        if opts.step_choices == STEP_CHOICES:
            opts.step_choices = ("jax", "jax,rms_norm=tritonplug:launch", "jax,swiglu=tritonplug:auto")
    cfg = CONFIGS[opts.config]
    if opts.batch:
        cfg = cfg.replace(batch=opts.batch)
    results = Results(opts.out, parts=opts.parts, config=opts.config, batch=cfg.batch, ops=opts.ops,
                      tuned=not opts.no_tune)
    for part in opts.parts.split(","):
        PARTS[part](results, opts, cfg)
        results.save()
    print(format_table([r for r in results.records if "samples" in r or "error" in r or "unfusible" in r],
                       ["bench", "impl", "median_us", "vs_xla", "auto_vs_best", "kernel_calls", "unfusible",
                        "check", "error"]))
    print(f"wrote {opts.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
