"""Mamba-2's SSD and block on one GPU: the ``jnp`` SSD under ``jit``, the tritonplug port of mamba-ssm's kernels, and
mamba-ssm's own function on torch tensors, side by side in one run.

    python bench/mamba2.py --out bench/results/mamba2-h200/run1.json                 # every part
    python bench/mamba2.py --parts ssd --seqs 8192 --out ...                         # some of it
    python bench/mamba2.py --smoke --out /tmp/mamba2-cpu.json                        # tiny shapes, any backend

Parts (``--parts``, comma-separated):

* ``ssd``: ``mamba_chunk_scan_combined(x, dt, A, B, C, chunk, D, dt_bias, dt_softplus=True)`` (the model's call) at
  the issue's shape (64 heads of 64, state 128, chunk 256, one group; ``--batch`` sequences of 2048 to 16384):
  ``jnp`` (``examples/mamba2/ssd_jnp.py`` under ``jit``), ``tritonplug`` (``examples/ports/mamba_ssd.py``) and
  ``torch`` (``mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined``, Triton's own launch), forward and
  forward + backward (the output and the gradients in ``x, dt, A, B, C, D, dt_bias`` of ``<y, cot>``). Each
  choice's output and gradients are checked against torch's (``jnp``'s where torch cannot run), recorded as the
  ``check`` record of the shape.
* ``block``: the Mamba-2 mixer (``examples/mamba2/block.py``: in-projection, convolution, SSD, gated norm,
  out-projection) forward + backward per SSD choice at the ``1.3b-4l`` config's width (``--block-seqs``).

``--profile`` adds, per SSD shape, each JAX choice's forward + backward kernel by kernel (a ``jax.profiler``
trace of ``--calls`` calls: ``bench/_profile.py``), the ``kernels`` record.

Timing, as ``bench/moe.py``: each implementation jitted (torch: called eagerly); a sample is ``--calls``
back-to-back calls synchronised once (``block_until_ready``; ``torch.cuda.synchronize``); implementations
alternate round by round; medians over ``--rounds`` rounds. Memory: ``peak_bytes``, the call's inputs plus what it
allocates at its high-water mark: XLA's memory plan of the compiled program (arguments + outputs - aliased +
temporaries) for the JAX choices, torch's ``max_memory_allocated`` over the inputs for torch. Tuning: before a
shape is timed, ``tritonplug.tune`` picks each autotuned kernel's configuration for the tritonplug calls
(``--no-tune``: the first). A choice that cannot run here (the port not merged; no torch or CUDA) leaves a
``skipped`` record saying why. The JSON holds the command, the machine, every record and sample; keep each run
under ``bench/results/mamba2-<gpu>/`` (``bench/mamba2_report.py`` renders them into docs/mamba2.md).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import mamba2_torch  # noqa: E402
from _util import Results, batched_seconds, format_table  # noqa: E402

SEQS = (2048, 4096, 8192, 16384)
#: heads, head_dim, state, groups, chunk
SHAPE, SMOKE_SHAPE = (64, 64, 128, 1, 256), (4, 8, 16, 2, 16)
SMOKE_SEQS = (40, 64)
GRADS = ("x", "dt", "A", "B", "C", "D", "dt_bias")
#: a check passes when every output is within this fraction of its largest magnitude (bf16 inputs)
TOLERANCE = 2e-2


def ssd_inputs(batch: int, seq: int, shape, seed: int) -> dict:
    """NumPy fp32 arguments as the model passes them: ``x``, ``B``, ``C`` unit normals, ``dt`` the in-projection's
    (small, before the bias), ``dt_bias`` the inverse softplus of log-uniform steps in [0.001, 0.1], ``A`` in
    [-16, -1], ``D`` around 1; and a cotangent ``cot`` like ``x``."""
    import numpy as np

    heads, head_dim, state, groups, _ = shape
    rng = np.random.default_rng(seed)
    normal = lambda *s, scale=1.0: (scale * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    step = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), heads))
    return {"x": normal(batch, seq, heads, head_dim), "dt": normal(batch, seq, heads, scale=0.1),
            "A": -rng.uniform(1.0, 16.0, heads).astype(np.float32), "B": normal(batch, seq, groups, state),
            "C": normal(batch, seq, groups, state), "D": 1.0 + normal(heads, scale=0.1),
            "dt_bias": (step + np.log(-np.expm1(-step))).astype(np.float32), "cot": normal(batch, seq, heads, head_dim)}


def _jax_inputs(arrays: dict) -> dict:
    import jax.numpy as jnp

    return {k: jnp.asarray(v, jnp.bfloat16 if k in ("x", "dt", "B", "C", "cot") else jnp.float32)
            for k, v in arrays.items()}


def _ssd_of(impl: str):
    from examples.mamba2 import block

    return {"jnp": block.ssd_jax, "tritonplug": block.ssd_tritonplug}[impl]


def _forward(ssd, chunk: int, a: dict):
    return ssd(a["x"], a["dt"], a["A"], a["B"], a["C"], chunk, D=a["D"], dt_bias=a["dt_bias"], dt_softplus=True)


def _forward_backward(ssd, chunk: int, a: dict):
    """The output and the gradients of ``<y, cot>``: the forward returned too, so XLA cannot drop it."""
    import jax

    def f(*values):
        return _forward(ssd, chunk, dict(zip(GRADS, values, strict=True)))

    y, vjp = jax.vjp(f, *(a[k] for k in GRADS))
    return y, vjp(a["cot"])


def plan_bytes(compiled) -> int | None:
    """XLA's memory plan of a compiled program: arguments + outputs - aliased + temporaries."""
    mem = compiled.memory_analysis()
    if mem is None:
        return None
    return int(mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
               + mem.temp_size_in_bytes)


def _timed(results: Results, bench: str, fns: dict, args, extra: dict) -> None:
    """``fns``: name -> ``(call, sync)``; one record per name with the median, range and samples, and ``extra``'s
    fields for that name."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, (fn, sync) in fns.items():
            with results.guard(bench, name):
                samples[name] += batched_seconds(lambda i, fn=fn: fn(), args.calls, 1, 1, sync)
    for name, s in samples.items():
        if s:
            med = sorted(s)[len(s) // 2]
            results.add(bench, name, median_us=med * 1e6, min_us=min(s) * 1e6, max_us=max(s) * 1e6,
                        samples=[x * 1e6 for x in s], **extra.get(name, {}))


def _tune(results: Results, bench: str, fn, args, *operands) -> None:
    """``tritonplug.tune(fn, *operands)`` unless ``--no-tune`` (as ``bench/moe.py``)."""
    import tritonplug

    if args.no_tune:
        return
    with results.guard(bench + " tune", "tritonplug"):
        report = tritonplug.tune(fn, *operands)
        results.add(bench + " tune", "tritonplug", median_us=None, tuned=report.to_json())


def _available(results: Results, benches: list[str], impls: list[str]) -> list[str]:
    """The implementations that can run here; a ``skipped`` record in each bench for each that cannot."""
    from examples.mamba2 import block

    why = {}
    if "tritonplug" in impls:
        try:
            import importlib

            importlib.import_module(block.PORT_MODULE)
        except ModuleNotFoundError as exc:
            why["tritonplug"] = f"{block.PORT_MODULE} (the SSD port) is not importable: {exc}"
    if "torch" in impls and (reason := mamba2_torch.unavailable()):
        why["torch"] = reason
    for impl, reason in why.items():
        for bench in benches:
            results.skip(bench, impl, reason)
    return [i for i in impls if i not in why]


def _compare(results: Results, bench: str, outputs: dict, reference: str) -> None:
    """Each implementation's forward + backward outputs against ``reference``'s: per output the largest absolute
    difference over the reference's largest magnitude; ``check`` ``ok`` when all are within :data:`TOLERANCE`."""
    import numpy as np

    names = ("y", *(f"d{k}" for k in GRADS))
    want = outputs[reference]
    for impl, got in outputs.items():
        if impl == reference:
            continue
        diffs = {n: float(np.max(np.abs(g - w))) / (float(np.max(np.abs(w))) or 1.0)
                 for n, g, w in zip(names, got, want, strict=True)}
        worst = max(diffs, key=diffs.get)
        check = "ok" if diffs[worst] <= TOLERANCE else f"MISMATCH: {worst} off by {diffs[worst]:.3g} of its scale"
        results.add(bench + " check", f"{impl} vs {reference}", median_us=None, check=check, max_rel_diff=diffs)


def _host(out) -> list:
    """``(y, grads)`` of any implementation as a flat list of fp32 NumPy arrays."""
    from _util import to_numpy

    y, grads = out
    return [to_numpy(v).astype("float32") for v in (y, *grads)]


def part_ssd(results: Results, args) -> None:
    for seq in (SMOKE_SEQS if args.smoke else args.seqs):
        _ssd_shape(results, args, seq, SMOKE_SHAPE if args.smoke else SHAPE)


def _ssd_shape(results: Results, args, seq: int, shape) -> None:
    import jax

    heads, head_dim, state, groups, chunk = shape
    b = 1 if args.smoke else args.batch
    bench = f"ssd b={b} seq={seq} heads={heads} head_dim={head_dim} state={state} groups={groups} chunk={chunk}"
    impls = _available(results, [bench + " forward", bench + " forward+backward"], args.impls.split(","))
    arrays = ssd_inputs(b, seq, shape, args.seed)
    a = _jax_inputs(arrays)
    fns: dict[str, dict] = {"forward": {}, "forward+backward": {}}
    extra: dict[str, dict] = {"forward": {}, "forward+backward": {}}
    outputs = {}
    for impl in impls:
        if impl == "torch":
            continue
        ssd = _ssd_of(impl)
        for program, f in (("forward", _forward), ("forward+backward", _forward_backward)):
            with results.guard(f"{bench} {program}", impl):
                if impl == "tritonplug":
                    _tune(results, f"{bench} {program}", functools.partial(f, ssd, chunk), args, a)
                compiled = jax.jit(functools.partial(f, ssd, chunk)).lower(a).compile()
                fns[program][impl] = (functools.partial(compiled, a), jax.block_until_ready)
                extra[program][impl] = {"peak_bytes": plan_bytes(compiled)}
        if impl in fns["forward+backward"]:
            with results.guard(bench + " check", impl):
                outputs[impl] = _host(fns["forward+backward"][impl][0]())
    if "torch" in impls:
        with results.guard(bench + " forward", "torch"):
            t = mamba2_torch.tensors(arrays)
            forward, forward_backward = mamba2_torch.functions(t, chunk)
            outputs["torch"] = _host(forward_backward())
            reads = {k: t[k] for k in GRADS}
            for program, fn, held in (("forward", forward, reads), ("forward+backward", forward_backward, t)):
                fns[program]["torch"] = (fn, mamba2_torch.sync)
                extra[program]["torch"] = {"peak_bytes": mamba2_torch.peak_bytes(fn, held)}
    if len(outputs) > 1:
        _compare(results, bench, outputs, "torch" if "torch" in outputs else "jnp")
    del outputs
    for program in fns:
        _timed(results, f"{bench} {program}", fns[program], args, extra[program])
    if args.profile:
        from _profile import kernel_times

        for impl, (fn, _) in fns["forward+backward"].items():
            if impl != "torch":
                with results.guard(f"{bench} forward+backward kernels", impl):
                    results.add(f"{bench} forward+backward kernels", impl, median_us=None,
                                kernels=kernel_times(fn, args.calls))


def part_block(results: Results, args) -> None:
    import jax
    import jax.numpy as jnp

    from examples.mamba2 import block
    from examples.mamba2.config import CONFIGS

    for seq in (SMOKE_SEQS[:1] if args.smoke else args.block_seqs):
        b = 1 if args.smoke else args.block_batch
        cfg = CONFIGS["tiny-bf16" if args.smoke else args.block_config].replace(layers=1, seq=seq, batch=b)
        bench = (f"block {'tiny-bf16' if args.smoke else args.block_config} b={b} seq={seq} hidden={cfg.hidden} "
                 f"heads={cfg.heads} state={cfg.state} forward+backward")
        choices = _available(results, [bench], [i for i in args.impls.split(",") if i != "torch"])
        keys = jax.random.split(jax.random.key(args.seed), 3)
        p = jax.tree.map(lambda w: w[0], block.init_layers(cfg, keys[0]))
        p = {k: v if k in block.FP32_PARAMS else v.astype(jnp.bfloat16) for k, v in p.items()}
        h = jax.random.normal(keys[1], (b, seq, cfg.hidden), jnp.bfloat16)
        cot = jax.random.normal(keys[2], h.shape, jnp.bfloat16)

        def step(h, p, cot, ssd, cfg=cfg):  # the forward returned too (see _forward_backward)
            from examples.llama.ops import rms_norm_jax

            out, vjp = jax.vjp(lambda h, p: block.mixer(h, p, cfg, ssd, rms_norm_jax), h, p)
            return out, vjp(cot)

        fns, extra = {}, {}
        for impl in choices:
            with results.guard(bench, impl):
                f = functools.partial(step, ssd=_ssd_of(impl))
                if impl == "tritonplug":
                    _tune(results, bench, f, args, h, p, cot)
                compiled = jax.jit(f).lower(h, p, cot).compile()
                fns[impl] = (functools.partial(compiled, h, p, cot), jax.block_until_ready)
                extra[impl] = {"peak_bytes": plan_bytes(compiled)}
        _timed(results, bench, fns, args, extra)


PARTS = {"ssd": part_ssd, "block": part_block}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="ssd,block")
    p.add_argument("--impls", default="jnp,tritonplug,torch", help="which SSD implementations to run")
    p.add_argument("--seqs", type=_ints, default=list(SEQS), help="ssd part: sequence lengths")
    p.add_argument("--batch", type=int, default=2, help="ssd part: sequences per call")
    p.add_argument("--block-seqs", type=_ints, default=[2048, 8192], help="block part: sequence lengths")
    p.add_argument("--block-batch", type=int, default=2, help="block part: sequences per call")
    p.add_argument("--block-config", default="1.3b-4l", help="block part: the examples/mamba2 config")
    p.add_argument("--no-tune", action="store_true", help="no tritonplug.tune before timing")
    p.add_argument("--profile", action="store_true",
                   help="ssd part: each JAX choice's forward + backward per kernel (bench/_profile.py)")
    p.add_argument("--configs", choices=("mamba", "wide"), default="mamba",
                   help="the port's matmul kernels tuned over mamba-ssm's configurations or more (CONFIGS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--smoke", action="store_true", help="tiny shapes: checks the script on any backend")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    unknown = set(args.parts.split(",")) - set(PARTS)
    if unknown:
        p.error(f"argument --parts: unknown part(s) {sorted(unknown)}; expected some of {sorted(PARTS)}")
    from examples.ports import mamba_source

    mamba_source.CONFIGS = args.configs  # before the port's launchers are imported (they read it then)
    results = Results(args.out, parts=args.parts, impls=args.impls, tuned=not args.no_tune, smoke=args.smoke,
                      tolerance=TOLERANCE, configs=args.configs)
    for part in args.parts.split(","):
        PARTS[part](results, args)
        results.save()
    print(format_table([r for r in results.records if "samples" in r or "error" in r or "check" in r],
                       ["bench", "impl", "median_us", "peak_bytes", "check", "error"]))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    # torch shares the GPU with JAX here: leave it a quarter (XLA's default preallocates 75%)
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", ".7")
    main()
