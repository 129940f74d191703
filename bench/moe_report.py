"""Render ``docs/moe.md``'s figure tables from every ``bench/moe.py`` run recorded under ``bench/results/moe-*/``.

    python bench/moe_report.py            # rewrite the tables between the markers of docs/moe.md
    python bench/moe_report.py --check    # exit 1 when docs/moe.md differs from its rendering

A configuration's figure is the median over all its recorded runs (each run's own median), with the range of
those medians and the number of runs; a run in which anything failed says so in the runs table and gives no figure. The
forward + backward records of runs made before ``bench/moe.py`` returned the forward are marked: there XLA
dropped the forward of the dense matmul and of ``ragged_dot`` (a linear objective's gradients do not need it),
but not of the custom call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # for _report, when loaded by path (tests)
from _report import RESULTS, ROOT, replace_between, rewrite  # noqa: E402

DOC = ROOT / "docs" / "moe.md"
BEGIN, END = "<!-- moe-report: begin (bench/moe_report.py writes this part) -->", "<!-- moe-report: end -->"


def runs() -> list[tuple[str, dict]]:
    """``(path relative to bench/results, JSON)`` of every bench/moe.py run, in path order."""
    found = []
    for path in sorted(RESULTS.glob("moe-*/**/*.json")):
        data = json.loads(path.read_text())
        if "records" in data and "bench/moe.py" in data.get("command", ""):
            found.append((str(path.relative_to(RESULTS)), data))
    return found


def _fair(data: dict, bench: str) -> bool:
    return "forward+backward" not in bench or bool(data.get("fwd_bwd_returns_forward"))


def _usable(data: dict) -> bool:
    """A run's figures count only when nothing in it failed: a fault poisons every later call of its process."""
    return not any(r.get("error") for r in data["records"])


def figures(recorded: list[tuple[str, dict]]) -> str:
    by_config: dict[tuple[str, str, bool], list[tuple[dict, float | None]]] = {}
    for _, data in recorded:
        if not _usable(data):
            continue
        for r in data["records"]:
            if r.get("median_us") is not None:
                dense = next((d["median_us"] for d in data["records"] if d["bench"] == r["bench"]
                              and d["impl"] == "dense" and d.get("median_us")), None)
                by_config.setdefault((r["bench"], r["impl"], _fair(data, r["bench"])), []).append(
                    (r, r["median_us"] / dense if dense else None))
    lines = ["| benchmark | implementation | median µs (over runs) | range of the runs' medians | TFLOP/s | "
             "× the dense matmul (same run) | runs |", "|---|---|---|---|---|---|---|"]
    for (bench, impl, fair), entries in sorted(by_config.items()):
        medians = [r["median_us"] for r, _ in entries]
        tflops = [r["tflops"] for r, _ in entries if r.get("tflops")]
        ratios = [x for _, x in entries if x is not None]
        note = "" if fair else " (XLA dropped the dense forward: not comparable)"
        lines.append(f"| {bench}{note} | {impl} | {statistics.median(medians):.1f} | {min(medians):.1f}–"
                     f"{max(medians):.1f} | {f'{statistics.median(tflops):.0f}' if tflops else '–'} | "
                     f"{f'{statistics.median(ratios):.2f}' if ratios else '–'} | {len(entries)} |")
    return "\n".join(lines)


def run_table(recorded: list[tuple[str, dict]]) -> str:
    lines = ["| run (bench/results/) | command | timed | failed | checks | figures used |", "|---|---|---|---|---|---|"]
    for path, data in recorded:
        records = data["records"]
        timed = sum(1 for r in records if r.get("median_us") is not None)
        failed = [r for r in records if r.get("error")]
        checks = [r.get("check") for r in records if r.get("check")]
        first = f"; first: {failed[0]['error'][:90]}" if failed else ""
        bad = [c for c in checks if c != "ok"]
        verdict = (f"{len(checks) - len(bad)} ok" + (f", {len(bad)} FAILED" if bad else "")) if checks else "none"
        lines.append(f"| `{path}` | `{data['command'].split(' --out ')[0]}` | {timed} | {len(failed)}{first} | "
                     f"{verdict} | {'yes' if _usable(data) else 'no: it failed'} |")
    return "\n".join(lines)


def render() -> str:
    recorded = runs()
    return "\n\n".join([BEGIN, "Every run:", run_table(recorded), "Figures:", figures(recorded), END])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    return rewrite({DOC: lambda text: replace_between(text, BEGIN, END, render())}, args.check, "bench/moe_report.py")


if __name__ == "__main__":
    sys.exit(main())
