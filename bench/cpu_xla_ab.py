"""CPU: two checkouts of tritonplug (before/after a change to the XLA path) on the same machine, interleaved.

    python bench/cpu_xla_ab.py --before /work/main --after . [--rounds 2] [--reps 3] [--only softmax_rows,...]
                               [--out bench/results/cpu-xla-passes]

Each checkout runs with its own ``.venv``: per round, ``bench/interpret_corpus.py --xla-only`` (every kernel of
the corpus: compile time and run time of the XLA path) and ``bench/interpret.py`` (its five cases, every path),
the two checkouts alternating (before first in even rounds, after first in odd ones) so that drift and the
other load of a shared machine hit both alike. A warm-up run of the corpus per checkout first fills each one's
own ``TRITONPLUG_CACHE_DIR`` (Triton's front end is then out of ``compile_s``, which is the translation, JAX's
trace and XLA's compile). Writes the raw JSON of every run under ``OUT/raw/`` and ``OUT/summary.json``: per
kernel, the median over rounds of each figure for before and after, and after/before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIELDS = {"corpus": ("compile_s", "lower_s", "median_ms"), "interpret": ("compile_s", "median_ms")}


def _run(tree: Path, script: str, args: list[str], out: Path, cache: Path) -> dict:
    env = dict(os.environ, TRITONPLUG_CACHE_DIR=str(cache), JAX_PLATFORMS="cpu")
    command = [str(tree / ".venv" / "bin" / "python"), str(tree / "bench" / script), *args, "--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 and not out.exists():
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"  {tree.name}/{script}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return json.loads(out.read_text())


def _figures(payload: dict, kind: str) -> dict[str, dict[str, float]]:
    """bench → {field: value} for the xla path's records."""
    out: dict[str, dict[str, float]] = {}
    for record in payload["records"]:
        if record.get("impl") != "xla":
            continue
        out[record["bench"]] = {f: record[f] for f in FIELDS[kind] if isinstance(record.get(f), int | float)}
        if "path" in record:
            out[record["bench"]]["path"] = record["path"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="checkout with a .venv (e.g. /work/main)")
    parser.add_argument("--after", default=str(ROOT), help="checkout with a .venv (default: this one)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default="", help="corpus kernels (default: all)")
    parser.add_argument("--skip-interpret", action="store_true", help="only the corpus")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu-xla-passes"))
    args = parser.parse_args(argv)
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    for label, tree in trees.items():
        if not (tree / ".venv" / "bin" / "python").exists():
            parser.error(f"--{label}: {tree} has no .venv")
    out = Path(args.out).resolve()  # the runs work in each checkout
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    caches = {label: Path(tempfile.mkdtemp(prefix=f"cpu-xla-ab-{label}-")) for label in trees}
    only = ["--only", args.only] if args.only else []
    for label, tree in trees.items():   # warm-up: each checkout's Triton front-end cache
        print(f"warm-up {label}", file=sys.stderr)
        _run(tree, "interpret_corpus.py", ["--xla-only", "--reps", "1", "--warmup", "0", *only],
             raw / f"warmup-{label}.json", caches[label])
    runs: dict[str, dict[str, list[dict]]] = {label: {"corpus": [], "interpret": []} for label in trees}
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        print(f"round {r}: {' then '.join(order)}", file=sys.stderr)
        for label in order:
            payload = _run(trees[label], "interpret_corpus.py", ["--xla-only", "--reps", str(args.reps), *only],
                           raw / f"corpus-{label}-r{r}.json", caches[label])
            runs[label]["corpus"].append(_figures(payload, "corpus"))
            if not args.skip_interpret:
                payload = _run(trees[label], "interpret.py", ["--reps", str(args.reps), "--warmup", "1",
                                                              "--pair-reps", "20"],
                               raw / f"interpret-{label}-r{r}.json", caches[label])
                runs[label]["interpret"].append(_figures(payload, "interpret"))
    summary: dict[str, dict] = {}
    for kind in ("corpus", "interpret"):
        benches = sorted({b for label in trees for run in runs[label][kind] for b in run})
        for bench in benches:
            row: dict[str, object] = {"suite": kind}
            for field in FIELDS[kind]:
                for label in trees:
                    values = [run[bench][field] for run in runs[label][kind] if field in run.get(bench, {})]
                    row[f"{field}_{label}"] = statistics.median(values) if values else None
                b, a = row[f"{field}_before"], row[f"{field}_after"]
                row[f"{field}_ratio"] = a / b if isinstance(a, float) and isinstance(b, float) and b else None
            paths = {run[bench].get("path") for label in trees for run in runs[label][kind] if bench in run}
            if paths - {None}:
                row["path"] = sorted(p for p in paths if p)
            summary[f"{kind}/{bench}"] = row
    payload = {"command": " ".join([sys.executable, *sys.argv]), "before": str(trees["before"]),
               "after": str(trees["after"]), "rounds": args.rounds, "reps": args.reps, "summary": summary}
    (out / "summary.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(f"{'bench':34} {'compile before':>14} {'after':>7} {'run ms before':>13} {'after':>8}")
    for name, row in summary.items():
        print(f"{name:34} {row.get('compile_s_before') or 0:14.2f} {row.get('compile_s_after') or 0:7.2f} "
              f"{row.get('median_ms_before') or 0:13.3f} {row.get('median_ms_after') or 0:8.3f}")
    print(f"wrote {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
