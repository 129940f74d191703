"""docs/benchmarks.md's figures of ``bench/fusion.py`` (issue 38): each op's programs launched, inlined and
``"auto"`` against XLA's own op, from every run recorded under ``bench/results/fusion-h200/``.

A figure is the median over the runs of a variant's time over XLA's, each ratio taken within its run, with the range;
a run's output check (against XLA's op) is named beside it. The check of ``run1`` was an absolute tolerance of
0.06, which bf16 outputs in the tens (SwiGLU) and weight gradients in the thousands (RMSNorm's dW) exceed by one
bf16 step; later runs compare each output relative to its magnitude (``bench/fusion.py --tol``). ``run1``'s
``"auto"`` chose by timing each call alone, the rule before ``tune`` timed the whole program: its figures are a
column of their own (:data:`TIMED_ALONE`), never pooled with today's rule.
"""

from __future__ import annotations

import json
from collections import defaultdict

from _report import RESULTS, cell, table

FOLDER = "fusion-h200"
VARIANTS = ("launch", "inline", "auto", "auto, each call timed alone")
#: runs whose ``"auto"`` chose by timing each call in a program of its own (path prefix under bench/results)
TIMED_ALONE = ("fusion-h200/run1/",)


def _runs() -> list[tuple[str, list[dict]]]:
    """``(path relative to bench/results, records)`` of every recorded ``bench/fusion.py`` run of the ops part."""
    found = []
    for path in sorted((RESULTS / FOLDER).glob("**/*.json")):
        data = json.loads(path.read_text())
        if "bench/fusion.py" in data.get("command", ""):
            found.append((str(path.relative_to(RESULTS)), data["records"]))
    return found


def _unfusible(record: dict) -> str:
    """The kernels whose translation holds gathers, scatters or loops, by name (the check ``"auto"`` applies)."""
    bad = [f"{p['kernel']} ({', '.join(f'{n} {k}' for k, n in p['unfusible'].items() if n)})"
           for p in record.get("paths") or [] if p.get("unfusible") and any(p["unfusible"].values())]
    return "; ".join(bad) or "none"


def ops() -> str:
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    best: dict[str, list[float]] = defaultdict(list)
    checks: dict[tuple[str, str], set[str]] = defaultdict(set)
    xla_us: dict[str, list[float]] = defaultdict(list)
    unfusible: dict[str, str] = {}
    for path, records in _runs():
        for r in records:
            if r.get("median_us") is None or r["bench"].endswith((" tune", " build")):
                continue
            if r["impl"] == "xla":
                xla_us[r["bench"]].append(r["median_us"])
            elif r.get("vs_xla") is not None:
                alone = r["impl"] == "auto" and path.startswith(TIMED_ALONE)
                ratios[(r["bench"], VARIANTS[3] if alone else r["impl"])].append(r["vs_xla"])
                checks[(r["bench"], r["impl"])].add(f"{r.get('check', 'not checked')} (`{path}`)")
                if r["impl"] == "inline":
                    unfusible[r["bench"]] = _unfusible(r)
            if r.get("auto_vs_best") is not None and not path.startswith(TIMED_ALONE):
                best[r["bench"]].append(r["auto_vs_best"])
    rows = []
    for bench in sorted(xla_us):
        rows.append([bench, cell(xla_us[bench], "{:.0f}"),
                     *(cell(ratios[(bench, v)], "{:.2f}", "×") for v in VARIANTS),
                     cell(best[bench], "{:.2f}", "×"), unfusible.get(bench, "—"),
                     "; ".join(sorted(checks[(bench, "launch")] | checks[(bench, "inline")]))])
    return table(["op, program", "XLA µs", "launched", "inlined", "`auto`", "`auto` timed alone (run1)",
                  "`auto` over the better path",
                  "gathers, scatters, loops in the inlined translation", "outputs against XLA's"], rows)


def step() -> str:
    """The ``step`` part: the Llama loss and gradient per op choice, its tokens/s over the ``jax`` choice's (each
    ratio within its run; the median over runs, with the range), and the choices that failed, by run."""
    speed: dict[str, list[float]] = defaultdict(list)
    us: dict[str, list[float]] = defaultdict(list)
    failed: dict[str, list[str]] = defaultdict(list)
    for path, records in _runs():
        for r in records:
            if r["bench"] == "step" and r.get("vs_xla"):
                speed[r["impl"]].append(1.0 / r["vs_xla"])
                us[r["impl"]].append(r["median_us"])
            elif r["bench"].startswith("step") and r.get("error"):
                failed[r["impl"]].append(f"`{path}`: {r['error'].splitlines()[0][:120]}")
    rows = [[f"`{c}`", cell([u / 1e3 for u in us[c]], "{:.1f}"), cell(speed[c], "{:.3f}", "×"), str(len(speed[c])),
             "; ".join(failed.get(c, [])) or "—"] for c in sorted(speed, key=lambda c: (c != "jax", c))]
    rows += [[f"`{c}`", "—", "—", "0", "; ".join(f)] for c, f in sorted(failed.items()) if c not in speed]
    return table(["op choice", "step ms", "tokens/s over `jax`", "runs", "failed"], rows)
