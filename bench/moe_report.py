"""Render ``docs/moe.md``'s figure tables from every MoE run recorded under ``bench/results/moe-*/``.

    python bench/moe_report.py            # rewrite the tables between the markers of docs/moe.md
    python bench/moe_report.py --check    # exit 1 when docs/moe.md differs from its rendering

Two kinds of file are read: ``bench/moe.py`` runs (``records``) and ``examples/moe/train.py`` reports (``runs``,
the expert-parallel scaling). A configuration's figure is the median over all its recorded runs (each run's own
median), with the range of those medians and the number of runs; a run in which anything failed says so in the
runs table and gives no figure. Ratios are taken within a run (side by side), then their median over runs.
The forward + backward records of runs made before ``bench/moe.py`` returned the forward are marked: there XLA
dropped the forward of the dense matmul and of ``ragged_dot`` (a linear objective's gradients do not need it),
but not of the custom call. A run's kernel configurations are named per run: autotuned on the device, one fixed
configuration, or ``tritonplug.tune``'s records.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # for _report, when loaded by path (tests)
from _moe_parallel import ep_layer_table, median_range, scaling_goals, scaling_table  # noqa: E402
from _report import RESULTS, ROOT, replace_between, rewrite, run_number, timed_by_bench  # noqa: E402

DOC = ROOT / "docs" / "moe.md"
BEGIN, END = "<!-- moe-report: begin (bench/moe_report.py writes this part) -->", "<!-- moe-report: end -->"


def _load(kind: str) -> list[tuple[str, dict]]:
    """``kind``: ``bench`` (bench/moe.py runs), ``kernels`` (bench/moe_kernels.py runs) or ``train``
    (examples/moe/train.py reports)."""
    found = []
    for path in sorted(RESULTS.glob("moe-*/**/*.json")):
        data = json.loads(path.read_text())
        script = f"bench/moe{'_kernels' if kind == 'kernels' else ''}.py"
        if (kind in ("bench", "kernels") and "records" in data and script in data.get("command", "")) or (
                kind == "train" and "runs" in data and data.get("command", "").startswith("train.py")):
            found.append((str(path.relative_to(RESULTS)), data))
    return found


def runs() -> list[tuple[str, dict]]:
    """``(path relative to bench/results, JSON)`` of every bench/moe.py run, in path order."""
    return _load("bench")


def _fair(data: dict, bench: str) -> bool:
    return "forward+backward" not in bench or bool(data.get("fwd_bwd_returns_forward"))


def _usable(data: dict) -> bool:
    """A run's figures count only when nothing in it failed: a fault poisons every later call of its process."""
    return not any(r.get("error") for r in data["records"])


def _mode(data: dict) -> str:
    """How the run's kernels chose their configuration."""
    if data.get("tuned"):
        return "tuned"
    if data.get("autotune"):
        return "autotuned on the device"
    return f"configs {data['configs']}" if data.get("configs") else "first config"


#: The runs (their folders' numbers) from which the kernels changed; the figures of different code are never one
#: median. From run 14 ``grouped_matmul``'s dW reads each group's rows directly
#: (``kernels.grouped_matmul_dw_rows_kernel``; before: through the plan's row ids); the layer and the model
#: (``gathered_matmul``, top-k rows through the plan) ran the same kernels before and after.
DW_ON_ROWS_FROM_RUN = 14
#: Later changes: (first run, what changed, the benches it changed). From run 18 no result is zero-filled before
#: the kernels write it (the plan gives the rows past the groups to expert -1 blocks, which vLLM's kernel writes as
#: zeros); from run 19 128 experts of 512 rows align to 128-row blocks (before: 64); from run 20 the tuning
#: chooses among 8 forward and 9 dW configurations (before: 6 and 6); from run 22 the layer's dW copies its rows
#: into group order and reads them there (``kernels.GATHER_DW_ROWS``; before: through the plan's row ids).
KERNEL_CHANGES = ((18, "no zero fill", ("gmm", "layer")),
                  (19, "128-row block", ("gmm qwen3 m=65536 k=2048 n=768 experts=128 ",
                                         "layer qwen3 tokens=8192 d=2048 f=768 experts=128 ")),
                  (20, "8 + 9 configurations", ("gmm", "layer")),
                  (22, "dW on copied rows", ("layer",)))


def _code(path: str, bench: str) -> str:
    """The kernels a run's benchmark ran, where they changed between runs (``DW_ON_ROWS_FROM_RUN``,
    ``KERNEL_CHANGES``)."""
    run = run_number(path)
    labels = [("dW on rows" if run >= DW_ON_ROWS_FROM_RUN else "dW via row ids")] if bench.startswith("gmm") else []
    labels += [label for first, label, benches in KERNEL_CHANGES if run >= first and bench.startswith(benches)]
    return ", ".join(labels)


def _current(timed: dict) -> dict:
    """Of the tuned entries, per bench, those of the newest kernels measured (the longest :func:`_code`)."""
    newest: dict[str, str] = {}
    for bench, mode in timed:
        if mode.startswith("tuned") and mode.count(",") >= newest.get(bench, "").count(",") and "row ids" not in mode:
            newest[bench] = mode
    return {(bench, mode): timed[bench, mode] for bench, mode in newest.items()}


def _timed(recorded, prefix: str) -> dict[tuple[str, str], list[tuple[dict, dict]]]:
    """``(bench, mode) -> [(run's records by impl, run)]`` for the usable runs' timed records of ``prefix``; the
    mode names the configurations and, where they changed, the kernels (:func:`_code`)."""
    out: dict[tuple[str, str], list[tuple[dict, dict]]] = {}
    for path, data in recorded:
        if not _usable(data):
            continue
        for bench, impls in timed_by_bench(data, prefix).items():
            mode = ", ".join(filter(None, (_mode(data), _code(path, bench))))
            out.setdefault((bench, mode), []).append((impls, data))
    return out


def gmm_table(recorded) -> str:
    lines = ["| benchmark | configurations | implementation | median µs (range over runs) | TFLOP/s | "
             "× the dense matmul (same run) | runs |", "|---|---|---|---|---|---|---|"]
    for (bench, mode), entries in sorted(_timed(recorded, "gmm").items()):
        note = "" if _fair(entries[0][1], bench) else " (XLA dropped the dense forward: not comparable)"
        for impl in sorted({i for impls, _ in entries for i in impls}):
            rows = [(impls[impl], impls.get("dense")) for impls, _ in entries if impl in impls]
            ratios = [r["median_us"] / d["median_us"] for r, d in rows if d]
            tflops = [r["tflops"] for r, _ in rows if r.get("tflops")]
            lines.append(f"| {bench}{note} | {mode} | {impl} | {median_range([r['median_us'] for r, _ in rows])} | "
                         f"{f'{statistics.median(tflops):.0f}' if tflops else '–'} | "
                         f"{median_range(ratios, 2)} | {len(rows)} |")
    return "\n".join(lines)


def layer_table(recorded) -> str:
    lines = ["| MoE layer, forward + backward | configurations | `jax` (ragged_dot) µs | `jax-dense` µs | "
             "`tritonplug` µs | speed-up over `jax` | over the better XLA choice | runs |",
             "|---|---|---|---|---|---|---|---|"]
    for (bench, mode), entries in sorted(_timed(recorded, "layer").items()):
        full = [impls for impls, _ in entries if {"jax", "jax-dense", "tritonplug"} <= set(impls)]
        if not full:  # only other choices (``--layer-choices``): ep_layer_table
            continue
        us = {c: [impls[c]["median_us"] for impls in full] for c in ("jax", "jax-dense", "tritonplug")}
        over_jax = [i["jax"]["median_us"] / i["tritonplug"]["median_us"] for i in full]
        over_best = [min(i["jax"]["median_us"], i["jax-dense"]["median_us"]) / i["tritonplug"]["median_us"]
                     for i in full]
        lines.append(f"| {bench.removeprefix('layer ').removesuffix(' forward+backward')} | {mode} | "
                     f"{median_range(us['jax'], 0)} | {median_range(us['jax-dense'], 0)} | "
                     f"{median_range(us['tritonplug'], 0)} | {median_range(over_jax, 2)}× | "
                     f"{median_range(over_best, 2)}× | {len(full)} |")
    return "\n".join(lines)


#: The model part's choices in the table's order; ``jax (no donation)``: the ``jax`` choice whose step keeps its
#: inputs (``bench/moe.py --model-choices jax:no-donate``).
MODEL_CHOICES = ("jax", "jax (no donation)", "jax-dense", "tritonplug")


def _model_bench(record: dict, data: dict) -> str:
    """A model record's benchmark with the training arguments its command added (``--model-train-args``)."""
    words = shlex.split(data["command"])
    extra = words[words.index("--model-train-args") + 1] if "--model-train-args" in words else ""
    return f"{record['bench']} {extra}".strip()


def _models(recorded, prefix: str = "model") -> list[dict[str, dict]]:
    """Per usable run with model records: ``{impl: record}``, each record's ``bench`` with its training arguments."""
    found = []
    for _, data in recorded:
        if _usable(data):
            impls = {r["impl"]: {**r, "bench": _model_bench(r, data)} for r in data["records"]
                     if r["bench"].startswith(prefix) and r.get("tokens_per_s")}
            if impls:
                found.append(impls)
    return found


def _parting_step(a: list[float], b: list[float], tolerance: float = 0.05) -> str:
    """The first step whose losses differ by more than ``tolerance``, or ``none``."""
    return next((str(i) for i, (x, y) in enumerate(zip(a, b, strict=True)) if abs(x - y) > tolerance), "none")


def model_table(recorded) -> str:
    lines = ["| model | choice | tokens/s (range over runs) | × `jax` (same run) | device peak GB | "
             "largest loss difference from `tritonplug` (same run) | first step differing by > 0.05 | runs |",
             "|---|---|---|---|---|---|---|---|"]
    by_bench: dict[str, list[dict]] = {}
    for impls in _models(recorded):
        by_bench.setdefault(next(iter(impls.values()))["bench"], []).append(impls)
    for bench, entries in sorted(by_bench.items()):
        for choice in MODEL_CHOICES:
            rows = [impls for impls in entries if choice in impls]
            if not rows:
                continue
            tps = [i[choice]["tokens_per_s"] for i in rows]
            ratio = [i[choice]["tokens_per_s"] / i["jax"]["tokens_per_s"] for i in rows if "jax" in i]
            peak = [i[choice]["device_peak_bytes"] / 1e9 for i in rows if i[choice].get("device_peak_bytes")]
            pairs = [(i[choice]["losses"], i["tritonplug"]["losses"]) for i in rows if "tritonplug" in i]
            diff = [max(abs(a - b) for a, b in zip(x, y, strict=True)) for x, y in pairs]
            parting = ", ".join(_parting_step(x, y) for x, y in pairs) if choice != "tritonplug" else "–"
            lines.append(f"| {bench} | {choice} | {median_range(tps, 0)} | {median_range(ratio, 2)} | "
                         f"{median_range(peak, 1)} | {median_range(diff, 3)} | {parting} | {len(rows)} |")
    return "\n".join(lines)


def grads_table(recorded) -> str:
    lines = ["| gradients of the model's loss | choice | loss (reference) | largest relative L2 error over "
             "the parameters | smallest cosine |", "|---|---|---|---|---|"]
    for _, data in recorded:
        for r in data["records"]:
            if r["bench"].startswith("grads") and r.get("per_param"):
                cos = min(v["cosine"] for v in r["per_param"].values())
                lines.append(f"| {r['bench'].removeprefix('grads ')} | {r['impl']} | {r['loss']:.4f} "
                             f"({r['ref_loss']:.4f}) | {r['worst_rel_l2']:.4f} | {cos:.4f} |")
    return "\n".join(lines)


def _goal(text: str, values: list[float], met, digits: int = 2) -> str:
    if not values:
        return f"| {text} | not measured | – |"
    return f"| {text} | {median_range(values, digits)} | {'met' if met(statistics.median(values)) else 'NOT met'} |"


def goals_table(recorded, reports) -> str:
    """Issue 36's goals, each from the tuned runs' side-by-side ratios (medians over runs, their range)."""
    lines = ["| goal (issue 36) | measured: median (range over runs) | |", "|---|---|---|"]
    timed = _current(_timed(recorded, ""))
    for (bench, _), entries in sorted(timed.items()):
        if bench.startswith("gmm") and bench.endswith("forward+backward") and "unrouted" not in bench:
            ratios = [i["grouped_matmul"]["median_us"] / i["dense"]["median_us"] for i, _ in entries
                      if "grouped_matmul" in i and "dense" in i]
            lines.append(_goal(f"{bench}: `grouped_matmul` ≤ 1.4× the dense matmul", ratios, lambda x: x <= 1.4))
    for (bench, _), entries in sorted(timed.items()):
        if bench.startswith("layer"):
            full = [i for i, _ in entries if {"jax", "jax-dense", "tritonplug"} <= set(i)]
            best = [min(i["jax"]["median_us"], i["jax-dense"]["median_us"]) / i["tritonplug"]["median_us"]
                    for i in full]
            lines.append(_goal(f"{bench}: `tritonplug` ≥ 1.5× the better XLA choice", best, lambda x: x >= 1.5))
            if "experts=64 " in bench:
                over = [i["jax"]["median_us"] / i["tritonplug"]["median_us"] for i in full]
                lines.append(_goal(f"{bench}: `tritonplug` ≥ 3× `ragged_dot`", over, lambda x: x >= 3))
    models = [m for m in _models(recorded, "model qwen3-64e") if {"jax", "tritonplug"} <= set(m)]
    speed = [m["tritonplug"]["tokens_per_s"] / m["jax"]["tokens_per_s"] for m in models]
    lines.append(_goal("model qwen3-64e: tokens/s ≥ 2.5× `jax`", speed, lambda x: x >= 2.5))
    lines.append(_goal("model qwen3-64e: device peak ≤ 1.0× `jax`'s",
                       [m["tritonplug"]["device_peak_bytes"] / m["jax"]["device_peak_bytes"] for m in models],
                       lambda x: x <= 1.0))
    curves: dict[tuple[str, str], list[float]] = {}
    for m in _models(recorded, "model qwen3-64e"):
        for ref in ("jax", "jax (no donation)"):
            if ref in m and "tritonplug" in m and len(m[ref]["losses"]) >= 50:
                curves.setdefault((m[ref]["bench"], ref), []).append(
                    max(abs(a - b) for a, b in zip(m["tritonplug"]["losses"], m[ref]["losses"], strict=True)))
    for (bench, ref), diffs in sorted(curves.items()):
        why = " (its donating step changes the parameters at learning rate 0: the first-steps table)" * (ref == "jax")
        lines.append(_goal(f"{bench}: losses agree with `{ref}`'s{why} (largest difference; bf16: ≤ 0.05)",
                           diffs, lambda x: x <= 0.05, 3))
    lines += scaling_goals(reports, _goal)
    return "\n".join(lines)


def _shape(bench: str) -> dict[str, int]:
    """A benchmark name's ``key=value`` sizes (``tokens=32768 d=4096 ...``)."""
    return {k: int(v) for k, _, v in (w.partition("=") for w in bench.split()) if v.isdigit()}


def needs_table(recorded) -> str:
    """Per MoE layer measured (the goals' runs), what ``≥ 1.5×`` the better XLA choice asks of ``tritonplug``'s
    time, beside the time of the layer's three grouped matmuls (gate, up, down: ``tokens × top_k`` rows, ``d`` by
    ``f``) were each as fast as XLA's dense matmul of its FLOPs (``--parts gmm``'s ``dense``, forward + backward,
    every fair run at that shape): a floor no grouped matmul slower than the dense matmul goes under."""
    dense: dict[tuple[int, int, int], list[float]] = {}
    for (bench, _), entries in _timed(recorded, "gmm").items():
        size = _shape(bench)
        if bench.endswith("forward+backward") and {"m", "k", "n"} <= set(size):
            dense.setdefault((size["m"], size["k"], size["n"]), []).extend(
                i["dense"]["median_us"] for i, data in entries if "dense" in i and _fair(data, bench))
    lines = ["| MoE layer, forward + backward | the better XLA choice µs | ≥ 1.5× needs `tritonplug` ≤ µs | "
             "`tritonplug` µs | its three grouped matmuls at the dense matmul's speed µs | |",
             "|---|---|---|---|---|---|"]
    for (bench, _), entries in sorted(_current(_timed(recorded, "layer")).items()):
        full = [i for i, _ in entries if {"jax", "jax-dense", "tritonplug"} <= set(i)]
        size = _shape(bench)
        floor = dense.get((size.get("tokens", 0) * size.get("top_k", 0), size.get("d"), size.get("f")))
        if not full or not floor:
            continue
        best = statistics.median(min(i["jax"]["median_us"], i["jax-dense"]["median_us"]) for i in full)
        floor_us = 3 * statistics.median(floor)
        verdict = "within reach" if floor_us <= best / 1.5 else "out of reach of matmuls at the dense matmul's speed"
        lines.append(f"| {bench.removeprefix('layer ').removesuffix(' forward+backward')} | {best:.0f} | "
                     f"{best / 1.5:.0f} | {statistics.median(i['tritonplug']['median_us'] for i in full):.0f} | "
                     f"{floor_us:.0f} | {verdict} |")
    return "\n".join(lines)


def first_steps_table(recorded) -> str:
    lines = ["| run (bench/results/) | choice | step losses | the same losses computed apart | largest parameter "
             "change at learning rate 0 |", "|---|---|---|---|---|"]
    for path, data in recorded:
        for r in data["records"]:
            if r["bench"].startswith("first steps") and "step_losses" in r:
                losses = lambda xs: ", ".join(f"{x:.4f}" for x in xs)  # noqa: E731
                lines.append(f"| `{path}` | {r['impl']} | {losses(r['step_losses'])} | {losses(r['apart_losses'])} | "
                             f"{r['largest_change']:.3g} |")
    return "\n".join(lines)


def kernels_table(kernel_runs) -> str:
    """Per shape and kernel: its fastest configuration over cuBLAS's matmul of the same shape (same run), median
    and range over runs."""
    lines = ["| shape | kernel | fastest configuration, × cuBLAS (range over runs) | checked | runs |",
             "|---|---|---|---|---|"]
    best: dict[tuple[str, str], list[float]] = {}
    checks: dict[tuple[str, str], list[str]] = {}
    for _, data in kernel_runs:
        per: dict[tuple[str, str], list[float]] = {}
        for r in data["records"]:
            if r.get("over_dense") is not None:
                key = (r["bench"].removeprefix("kernels "), r["impl"].rsplit(" config ", 1)[0])
                per.setdefault(key, []).append(r["over_dense"])
                if r.get("check"):
                    checks.setdefault(key, []).append(r["check"])
        for key, ratios in per.items():
            best.setdefault(key, []).append(min(ratios))
    for (shape, kernel), ratios in best.items():
        verdict = ", ".join(sorted(set(checks.get((shape, kernel), [])))) or "no"
        lines.append(f"| {shape} | {kernel} | {median_range(ratios, 2)} | {verdict} | {len(ratios)} |")
    return "\n".join(lines)


def run_table(recorded: list[tuple[str, dict]]) -> str:
    lines = ["| run (bench/results/) | command | configurations | timed | failed | checks | figures used |",
             "|---|---|---|---|---|---|---|"]
    for path, data in recorded:
        records = data["records"]
        timed = sum(1 for r in records if r.get("median_us") is not None)
        failed = [r for r in records if r.get("error")]
        checks = [r.get("check") for r in records if r.get("check")]
        first = f"; first: {failed[0]['error'][:90]}" if failed else ""
        bad = [c for c in checks if c != "ok"]
        verdict = (f"{len(checks) - len(bad)} ok" + (f", {len(bad)} FAILED" if bad else "")) if checks else "none"
        lines.append(f"| `{path}` | `{data['command'].split(' --out ')[0]}` | {_mode(data)} | {timed} | "
                     f"{len(failed)}{first} | {verdict} | {'yes' if _usable(data) else 'no: it failed'} |")
    return "\n".join(lines)


def render() -> str:
    recorded, reports = runs(), _load("train")
    return "\n\n".join([BEGIN, "The goals (from the tuned runs of the newest kernels each shape was measured with):",
                        goals_table(recorded, reports),
                        "What the layer goal asks, against the floor its matmuls set (the layer's three grouped "
                        "matmuls as fast as XLA's dense matmul of their FLOPs; the rest of the layer not counted):",
                        needs_table(recorded),
                        "Every run of `bench/moe.py`:", run_table(recorded),
                        "The grouped matmul (`gmm`):", gmm_table(recorded),
                        "Its kernels one by one (`bench/moe_kernels.py`: launched by Triton on torch tensors, each "
                        "configuration timed against cuBLAS's matmul of the same shape):",
                        kernels_table(_load("kernels")),
                        "The MoE layer:", layer_table(recorded),
                        "The expert-parallel layers on one device (`--layer-choices`, their exchange an identity):",
                        ep_layer_table([(path, data) for path, data in recorded if _usable(data)]),
                        "The model (`examples/moe/train.py`, one process per choice, same init and batches):",
                        model_table(recorded),
                        "The first two training steps (`--parts first-steps`; the first step's learning rate is 0):",
                        first_steps_table(recorded),
                        "Gradients (`--parts grads`: one step's gradients against a reference, per parameter):",
                        grads_table(recorded),
                        "Expert parallel (`examples/moe/train.py` reports):", scaling_table(reports), END])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    return rewrite({DOC: lambda text: replace_between(text, BEGIN, END, render())}, args.check, "bench/moe_report.py")


if __name__ == "__main__":
    sys.exit(main())
