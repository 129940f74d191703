"""Render ``docs/mamba2.md``'s figure tables from every ``bench/mamba2.py`` run recorded under
``bench/results/mamba2-*/``.

    python bench/mamba2_report.py            # rewrite the tables between the markers of docs/mamba2.md
    python bench/mamba2_report.py --check    # exit 1 when docs/mamba2.md differs from its rendering

The rule of ``bench/_report.py``: a configuration's figure is the median over all its recorded runs (each run's own
median), with the range of those medians where the runs differ; ratios are taken within a run (side by side), then
their median over runs. A run in which anything failed (an error, or a check of the port against torch) gives no
figure and is named in the runs table; a failed ``tritonplug.tune`` (its own programs, before anything is timed)
only says so there: the timed programs then ran the configurations recorded before the failure, or the first.
Smoke runs (``--smoke``) are never read. With no run recorded, each table says so: not measured yet.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from statistics import median

sys.path.append(str(Path(__file__).resolve().parent))  # for _report, when loaded by path (tests)
from _report import RESULTS, ROOT, cell, replace_between, rewrite, table, timed_by_bench  # noqa: E402

DOC = ROOT / "docs" / "mamba2.md"
BEGIN, END = "<!-- mamba2-report: begin (bench/mamba2_report.py writes this part) -->", "<!-- mamba2-report: end -->"
IMPLS = ("jnp", "tritonplug", "torch")
NOT_MEASURED = "Not measured yet: no `bench/mamba2.py` run is recorded under `bench/results/mamba2-*/`."
#: issue 40's goals, at this sequence length: forward + backward speed-up over ``jnp``, and peak memory
GOAL_SEQ, GOAL_SPEEDUP, GOAL_MEMORY = 8192, 3.0, 1.0
#: recorded runs whose `jnp` SSD or port is older code than today's (path prefix -> what changed since): their
#: figures are a configuration of their own, never pooled with today's (as bench/moe_report.py's KERNEL_CHANGES)
_RECOMPUTING = "port's backward recomputing the forward's (before 2050dbb)"
CODE_CHANGES = {"mamba2-h200/run1-": "`jnp` SSD before 4907fb2 (not stepped), " + _RECOMPUTING,
                **{f"mamba2-h200/run{i}-": _RECOMPUTING for i in (2, 3, 4, 5)}}
#: the label of tuned runs whose matmul kernels were tuned over more configurations than mamba-ssm's (``--configs
#: wide``; runs before the option, and ``--configs mamba``, tuned over mamba-ssm's)
WIDE_CONFIGS = "over more configurations (`--configs wide`)"
#: kernels listed per choice in the kernels table
TOP_KERNELS = 8
#: the configuration the goals are judged in: tuned, today's code
GOAL_CONFIGURATION = "tuned"


def runs(results: Path = RESULTS) -> list[tuple[str, dict]]:
    """``(path relative to bench/results, JSON)`` of every non-smoke bench/mamba2.py run, in path order."""
    found = []
    for path in sorted(results.glob("mamba2-*/**/*.json")):
        data = json.loads(path.read_text())
        if "records" in data and "bench/mamba2.py" in data.get("command", "") and not data.get("smoke"):
            found.append((str(path.relative_to(results)), data))
    return found


def _failed(data: dict) -> list[dict]:
    return [r for r in data["records"] if (r.get("error") and not _tune(r)) or r.get("check") not in (None, "ok")]


def _tune(record: dict) -> bool:
    return record["bench"].endswith(" tune")


def _usable(data: dict) -> bool:
    """A run's figures count only when nothing in it failed: a fault poisons every later call of its process, and a
    port that disagrees with torch is not timed for the table."""
    return not _failed(data)


def _gpu(data: dict) -> str:
    devices = data.get("environment", {}).get("devices")
    return devices[0] if isinstance(devices, list) and devices else "?"


def configuration(path: str, data: dict) -> str:
    """What a run's figures are pooled with: tuned by ``tritonplug.tune`` or not, over which configurations, and
    the code of its `jnp` SSD."""
    labels = ["tuned" if data.get("tuned", True) else "not tuned (`--no-tune`)"]
    if data.get("tuned", True) and data.get("configs", "mamba") == "wide":
        labels.append(WIDE_CONFIGS)
    return ", ".join(labels + [label for prefix, label in CODE_CHANGES.items() if path.startswith(prefix)])


def _timed(recorded, prefix: str) -> dict[tuple[str, str], list[dict]]:
    """``(configuration, bench) -> [the run's timed records by impl]`` over the usable runs, for benches starting
    with ``prefix``."""
    out: dict[tuple[str, str], list[dict]] = {}
    for path, data in recorded:
        if not _usable(data):
            continue
        for bench, impls in timed_by_bench(data, prefix).items():
            out.setdefault((configuration(path, data), bench), []).append(impls)
    return out


def _seq(bench: str) -> int:
    found = re.search(r"seq=(\d+)", bench)
    return int(found.group(1)) if found else 0


def _order(bench: str) -> tuple:
    return (bench.split(" seq=")[0], _seq(bench), bench)


def _by_configuration(item) -> tuple:
    (config, bench), _ = item
    return (config != GOAL_CONFIGURATION, config, _order(bench))


def _ratio(entries: list[dict], num: str, den: str, field: str = "median_us") -> list[float]:
    return [e[num][field] / e[den][field] for e in entries
            if num in e and den in e and e[num].get(field) and e[den].get(field)]


def ssd_table(recorded) -> str:
    rows = []
    for (config, bench), entries in sorted(_timed(recorded, "ssd ").items(), key=_by_configuration):
        us = [cell([e[i]["median_us"] for e in entries if i in e], "{:.0f}") for i in IMPLS]
        gb = [cell([e[i]["peak_bytes"] / 1e9 for e in entries if e.get(i, {}).get("peak_bytes")], "{:.2f}")
              for i in IMPLS]
        rows.append([bench.removeprefix("ssd "), config, *us, cell(_ratio(entries, "jnp", "tritonplug"), "{:.2f}", "×"),
                     cell(_ratio(entries, "torch", "tritonplug"), "{:.2f}", "×"), *gb,
                     cell(_ratio(entries, "tritonplug", "jnp", "peak_bytes"), "{:.2f}", "×"), str(len(entries))])
    if not rows:
        return NOT_MEASURED
    return table(["SSD shape and program", "configuration", "`jnp` µs", "`tritonplug` µs", "torch µs",
                  "`jnp` / `tritonplug`", "torch / `tritonplug`", "`jnp` peak GB", "`tritonplug` peak GB",
                  "torch peak GB", "`tritonplug` peak / `jnp`", "runs"], rows)


def block_table(recorded) -> str:
    rows = []
    for (config, bench), entries in sorted(_timed(recorded, "block ").items(), key=_by_configuration):
        rows.append([bench.removeprefix("block ").removesuffix(" forward+backward"), config,
                     *(cell([e[i]["median_us"] for e in entries if i in e], "{:.0f}") for i in IMPLS[:2]),
                     cell(_ratio(entries, "jnp", "tritonplug"), "{:.2f}", "×"),
                     *(cell([e[i]["peak_bytes"] / 1e9 for e in entries if e.get(i, {}).get("peak_bytes")], "{:.2f}")
                       for i in IMPLS[:2]), str(len(entries))])
    if not rows:
        return NOT_MEASURED
    return table(["Mamba-2 block, forward + backward", "configuration", "`jnp` SSD µs", "`tritonplug` SSD µs",
                  "speed-up", "`jnp` peak GB", "`tritonplug` peak GB", "runs"], rows)


def checks_table(recorded) -> str:
    """Per shape and comparison: the worst output's relative difference over the runs, and the runs' verdicts."""
    found: dict[tuple[str, str], list[dict]] = {}
    for _, data in recorded:
        for r in data["records"]:
            if r["bench"].endswith(" check") and "max_rel_diff" in r:
                found.setdefault((r["bench"].removesuffix(" check"), r["impl"]), []).append(r)
    rows = []
    for (bench, impl), recs in sorted(found.items(), key=lambda kv: (_order(kv[0][0]), kv[0][1])):
        worst = [max(r["max_rel_diff"].values()) for r in recs]
        verdicts = sorted({r["check"] for r in recs})
        rows.append([bench.removeprefix("ssd "), impl, cell(worst, "{:.2g}"), ", ".join(verdicts), str(len(recs))])
    if not rows:
        return NOT_MEASURED
    return table(["SSD shape", "compared", "largest difference / the reference's largest magnitude (output or "
                  "gradient)", "verdict", "runs"], rows)


def goals_table(recorded) -> str:
    entries = [e for (config, bench), es in _timed(recorded, "ssd ").items() if config == GOAL_CONFIGURATION
               and _seq(bench) == GOAL_SEQ and bench.endswith("forward+backward") for e in es]
    speed = _ratio(entries, "jnp", "tritonplug")
    memory = _ratio(entries, "tritonplug", "jnp", "peak_bytes")
    checks = [r["check"] for _, data in recorded for r in data["records"]
              if r["impl"].startswith("tritonplug vs") and r.get("check")]

    def verdict(values, ok) -> str:
        return "not measured yet" if not values else ("met" if all(map(ok, values)) else "NOT met")

    rows = [[f"SSD forward + backward, seq {GOAL_SEQ}, {GOAL_CONFIGURATION}: `tritonplug` ≥ {GOAL_SPEEDUP:g}× `jnp`",
             cell(speed, "{:.2f}", "×"), verdict(speed, lambda x: x >= GOAL_SPEEDUP)],
            [f"its peak memory ≤ {GOAL_MEMORY:.1f}× `jnp`'s", cell(memory, "{:.2f}", "×"),
             verdict(memory, lambda x: x <= GOAL_MEMORY)],
            ["the port's outputs and gradients equal torch's (every run, every shape)",
             f"{checks.count('ok')} of {len(checks)} checks ok" if checks else "—",
             verdict(checks, lambda c: c == "ok")]]
    return table(["goal (issue 40)", "figure (median over runs, range)", "verdict"], rows)


def needs_table(recorded) -> str:
    """What the speed goal asks of the port at its shape, beside what the port's kernels alone take there (the
    ``--profile`` runs of the goal's configuration: the sum of every kernel of one forward + backward): where the
    kernels alone take longer than the goal allows, no launch, fusion or residual kept around them can meet it."""
    entries = [e for (config, bench), es in _timed(recorded, "ssd ").items() if config == GOAL_CONFIGURATION
               and _seq(bench) == GOAL_SEQ and bench.endswith("forward+backward") for e in es]
    jnp = [e["jnp"]["median_us"] for e in entries if "jnp" in e]
    port = [e["tritonplug"]["median_us"] for e in entries if "tritonplug" in e]
    kernels = [sum(k["us"] for k in r["kernels"]) for path, data in recorded
               if configuration(path, data) == GOAL_CONFIGURATION for r in data["records"]
               if r["impl"] == "tritonplug" and r.get("kernels") and _seq(r["bench"]) == GOAL_SEQ
               and r["bench"].endswith("forward+backward kernels")]
    if not jnp or not port or not kernels:
        return "Not measured yet."
    need = median(jnp) / GOAL_SPEEDUP
    verdict = "within reach" if median(kernels) <= need else "out of reach of mamba-ssm's kernels as they are"
    return table([f"SSD forward + backward, seq {GOAL_SEQ}, {GOAL_CONFIGURATION}", f"≥ {GOAL_SPEEDUP:g}× needs "
                  "`tritonplug` ≤ µs", "`tritonplug` µs", "its kernels alone µs (`--profile`)", ""],
                 [["`jnp` " + cell(jnp, "{:.0f}") + " µs", f"{need:.0f}", cell(port, "{:.0f}"),
                   cell(kernels, "{:.0f}"), verdict]])


def kernels_table(recorded) -> str:
    """The ``--profile`` records: per run, shape and choice, the slowest kernels' µs per forward + backward (of
    one trace, not a median) and what all kernels add up to."""
    rows = []
    for path, data in recorded:
        for r in data["records"]:
            if r["bench"].endswith(" kernels") and r.get("kernels"):
                total = sum(k["us"] for k in r["kernels"])
                top = ", ".join(f"`{k['kernel'][:48]}` {k['us']:.0f}" for k in r["kernels"][:TOP_KERNELS])
                rows.append([f"`{path}`", r["bench"].removeprefix("ssd ").removesuffix(" forward+backward kernels"),
                             r["impl"], f"{total:.0f}", str(len(r["kernels"])), top])
    if not rows:
        return "No `--profile` run is recorded yet."
    return table(["run", "SSD shape", "choice", "all kernels µs", "kernels", f"the {TOP_KERNELS} slowest (µs)"],
                 rows)


def _over(values: list[float], base: list[float]) -> str:
    return f"{median(values) / median(base):.2f}×" if values and base else "—"


def tuning_table(recorded) -> str:
    """Per kernel of the forward + backward at ``GOAL_SEQ``, its fastest configuration's µs in ``tritonplug.tune``
    (each configuration timed alone) by the configurations tuned over: median over runs, range, and how many
    configurations were timed. Runs cut before timing count here: tuning is what they measured."""
    found: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for _, data in recorded:
        label = "wide" if data.get("configs") == "wide" else "mamba"
        for r in data["records"]:
            if not (_tune(r) and _seq(r["bench"]) == GOAL_SEQ and "forward+backward" in r["bench"]):
                continue
            for kernel in r.get("tuned") or []:
                timed = [t["median_us"] for t in kernel["timings"] if t.get("median_us")]
                if timed:
                    found.setdefault((kernel["kernel"], label), []).append((min(timed), len(timed)))
    kernels = sorted({k for k, _ in found}, key=lambda k: -min(b for b, _ in found.get((k, "mamba"), [(0, 0)])))
    if not any(label == "wide" for _, label in found):
        return "No run tuned over `--configs wide` yet."
    rows, sums = [], {"mamba": 0.0, "wide": 0.0}
    for kernel in kernels:
        for label in sums:
            sums[label] += median([b for b, _ in found.get((kernel, label), [(0.0, 0)])])
        mamba, wide = found.get((kernel, "mamba"), []), found.get((kernel, "wide"), [])
        rows.append([f"`{kernel}`", cell([b for b, _ in mamba], "{:.0f}"), cell([b for b, _ in wide], "{:.0f}"),
                     _over([b for b, _ in wide], [b for b, _ in mamba]),
                     f"{max((n for _, n in mamba), default=0)} / {max((n for _, n in wide), default=0)}"])
    rows.append(["all (the sum of the medians)", f"{sums['mamba']:.0f}", f"{sums['wide']:.0f}",
                 _over([sums["wide"]], [sums["mamba"]]), ""])
    return table(["kernel (forward + backward, seq 8192)", "mamba-ssm's configurations: fastest µs",
                  "`--configs wide`: fastest µs", "wide / mamba-ssm's (medians)", "configurations timed"], rows)


def run_table(recorded) -> str:
    if not recorded:
        return NOT_MEASURED
    rows = []
    for path, data in recorded:
        failed = _failed(data)
        first = f"; first: {(failed[0].get('error') or failed[0]['check'])[:90]}" if failed else ""
        tunes = [r for r in data["records"] if _tune(r) and r.get("error")]
        used = "yes" if _usable(data) else "no: it failed"
        if tunes and _usable(data):
            used += f" ({len(tunes)} tunings failed: {tunes[0]['error'][:60]})"
        rows.append([f"`{path}`", f"`{data['command'].split(' --out ')[0]}`", configuration(path, data), _gpu(data),
                     str(sum(1 for r in data["records"] if r.get("median_us") is not None)), f"{len(failed)}{first}",
                     used])
    return table(["run (bench/results/)", "command", "configuration", "device", "timed", "failed", "figures used"],
                 rows)


def render(results: Path = RESULTS) -> str:
    recorded = runs(results)
    return "\n\n".join([BEGIN, "The goals:", goals_table(recorded),
                        "What the speed goal asks, against the port's kernels alone:", needs_table(recorded),
                        "Every run of `bench/mamba2.py`:",
                        run_table(recorded), "The SSD (`jnp` / `tritonplug`: how many times faster the port is):",
                        ssd_table(recorded), "The port and `jnp` against mamba-ssm's torch function:",
                        checks_table(recorded), "The Mamba-2 block:", block_table(recorded),
                        "Forward + backward kernel by kernel (`--profile`, one trace of `--calls` calls each):",
                        kernels_table(recorded),
                        "Each kernel's fastest configuration in `tritonplug.tune`, by the configurations tried:",
                        tuning_table(recorded), END])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    return rewrite({DOC: lambda text: replace_between(text, BEGIN, END, render())}, args.check,
                   "bench/mamba2_report.py")


if __name__ == "__main__":
    sys.exit(main())
