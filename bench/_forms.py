"""What the forms scripts share (``fusion_store_forms.py``: RoPE's forward, ``fusion_swiglu_forms.py``: SwiGLU's
forward + backward, each written several ways): their command line, and every form compiled, timed side by side
and compared with ``xla``'s."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

from _util import Results, batched_seconds


def options(doc: str, argv=None, tokens: str | None = None) -> argparse.Namespace:
    """The forms scripts' options; ``tokens``: the help of a ``--tokens`` flag, where the script has one."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if tokens:
        p.add_argument("--tokens", action="store_true", help=tokens)
    p.add_argument("--out", required=True)
    p.add_argument("--config", default="1b")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--batch", type=int, default=None, help="the config's batch unless given (small: a CPU)")
    p.add_argument("--dump-hlo", default=None, help="a folder: each form's optimised HLO written there")
    return p.parse_args(argv)


def config(opts: argparse.Namespace):
    """The Llama config ``--config`` names, at ``--batch`` where given."""
    from examples.llama.config import CONFIGS

    cfg = CONFIGS[opts.config]
    return dataclasses.replace(cfg, batch=opts.batch) if opts.batch else cfg


def run(opts: argparse.Namespace, cfg, bench: str, programs: dict[str, Callable], args: tuple) -> None:
    """Each program (``xla`` among them) compiled at ``args`` and timed, round by round (the order turning each
    round: ``bench/fusion.py``'s reason), its outputs' largest difference from ``xla``'s relative to each output's
    largest magnitude, and its fusion count, recorded in ``--out``."""
    import jax
    import numpy as np

    results = Results(opts.out, config=opts.config, batch=cfg.batch)
    compiled = {name: jax.jit(fn).lower(*args).compile() for name, fn in programs.items()}
    if opts.dump_hlo:
        folder = Path(opts.dump_hlo)
        folder.mkdir(parents=True, exist_ok=True)
        for name, c in compiled.items():
            (folder / f"{name.replace(', ', '-').replace(' ', '_')}.hlo.txt").write_text(c.as_text())
    want = [np.asarray(w, np.float32) for w in jax.tree.leaves(compiled["xla"](*args))]
    samples: dict[str, list[float]] = {name: [] for name in compiled}
    names = list(compiled)
    for r in range(opts.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = compiled[name]
            samples[name] += batched_seconds(lambda i, fn=fn: fn(*args), opts.calls, 1, 1, jax.block_until_ready)
    for name, s in samples.items():
        got = [np.asarray(g, np.float32) for g in jax.tree.leaves(compiled[name](*args))]
        diff = max(float(np.max(np.abs(g - w))) / max(float(np.max(np.abs(w))), 1e-30)
                   for g, w in zip(got, want, strict=True))
        results.add(bench, name, median_us=float(np.median(s)) * 1e6, min_us=min(s) * 1e6,
                    samples=[x * 1e6 for x in s], max_relative_diff_vs_xla=diff,
                    fusions=compiled[name].as_text().count(" fusion("))
    for record in results.records:
        print(f"{record['impl']:>24}: {record['median_us']:8.1f} us  diff {record['max_relative_diff_vs_xla']:.3g}  "
              f"fusions {record['fusions']}")
