"""``docs/moe.md``'s expert-parallel figures (``bench/moe_report.py`` renders them): the scaling of
``examples/moe/train.py`` reports over GPUs, its goal per expert-parallel choice, and the expert-parallel layers on
one device (``bench/moe.py --layer-choices``).

Where the code of an expert-parallel choice changed between runs, its figures are labelled by the run's code and
never one median (:func:`code`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from _report import run_number, timed_by_bench

#: the expert-parallel op choices of ``examples/moe/model.py``, each measured against its own one-GPU run
EXPERT_PARALLEL = ("tritonplug-ep", "tritonplug-ep-ragged")
#: from this run of moe-h200 on, a data-parallel mesh (``model=1``) splits the experts over ``data``
#: (``examples/moe/model.py: expert_axis``); before it they stayed whole there
EXPERTS_OVER_DATA_FROM = 26
#: from this run on, ``tritonplug-ep-ragged`` cuts each slice of its exchange into pieces (``ragged.pieces``: XLA's
#: kernel runs one block per slice) and permutes its slots by gathers both ways (``ragged.slot_rows``, ``unsorted``)
RAGGED_PIECES_FROM = 29


def code(choice: str, path: str) -> str:
    """``choice`` with the code its run ran, where that changed (``RAGGED_PIECES_FROM``)."""
    if choice == "tritonplug-ep-ragged" and run_number(path) < RAGGED_PIECES_FROM:
        return f"{choice} (one slice per expert, scatters: superseded)"
    return choice


def median_range(values: list[float], digits: int = 1) -> str:
    """``median (min–max)`` of a configuration's per-run figures."""
    return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"
            if values else "–")


def scaling_table(reports) -> str:
    lines = ["| run (bench/results/) | command | devices | tokens/s | tokens/s per device |", "|---|---|---|---|---|"]
    for path, data in reports:
        devices = data["machine"]["devices"]
        for label, run in data["runs"].items():
            lines.append(f"| `{path}` | `{data['command'].split(' --json ')[0]}` ({code(label, path)}) | {devices} | "
                         f"{run['tokens_per_s']:.0f} | {run['tokens_per_s'] / devices:.0f} |")
    return "\n".join(lines)


def _experts_split(path: str, mesh: dict) -> str:
    """Over which mesh axis a report's experts were split (``whole``: on no axis)."""
    if mesh.get("model", 1) > 1:
        return "model"
    return "data" if run_number(path) >= EXPERTS_OVER_DATA_FROM else "whole"


def scaling_goals(reports, goal: Callable[..., str]) -> list[str]:
    """Expert parallelism's scaling: each multi-GPU report's tokens/s per GPU of an expert-parallel choice against
    the one-GPU reports of the same call (side by side: the same folder), per choice and its code, GPU count, mesh
    and experts' split; and against one GPU's ``tritonplug``. ``goal(text, values, met)`` renders a row."""
    by_folder: dict[str, list[tuple[str, dict]]] = {}
    for path, data in reports:
        by_folder.setdefault(str(Path(path).parent), []).append((path, data))
    ep: dict[tuple[str, int, str, str], list[float]] = {}
    dense: dict[tuple[str, int, str, str], list[float]] = {}
    for entries in by_folder.values():
        one = {label: run["tokens_per_s"] for _, data in entries if data["machine"]["devices"] == 1
               for label, run in data["runs"].items()}
        for path, data in entries:
            devices, mesh = data["machine"]["devices"], data.get("mesh") or {}
            if devices == 1:
                continue
            layout = (",".join(f"{a}={n}" for a, n in mesh.items() if n > 1), _experts_split(path, mesh))
            for choice in EXPERT_PARALLEL:
                run = data["runs"].get(choice)
                if run is None or choice not in one:
                    continue
                key = (code(choice, path), devices, *layout)
                ep.setdefault(key, []).append(run["tokens_per_s"] / devices / one[choice])
                if "tritonplug" in one:
                    dense.setdefault(key, []).append(run["tokens_per_s"] / devices / one["tritonplug"])
    lines = []
    for key, ratios in sorted(ep.items(), key=lambda kv: (kv[0][0], -kv[0][1], kv[0][2:])):
        choice, devices, mesh, split = key
        experts = "experts whole: data parallel" if split == "whole" else f"experts over {split}"
        where = f"{devices} GPUs (`--mesh {mesh}`, {experts})"
        unmet = "" if devices == 4 else " (the goal's 4 GPUs not measured here)"
        lines.append(goal(f"expert parallel, {where}: tokens/s per GPU ≥ 0.85× one GPU's (`{choice}`){unmet}",
                          ratios, lambda x: x >= 0.85))
        lines.append(goal("the same against one GPU's `tritonplug` (no exchange)", dense.get(key, []),
                          lambda x: x >= 0.85))
    return lines


def ep_layer_table(recorded) -> str:
    """The layer's forward + backward per expert-parallel choice on one device, beside ``tritonplug`` in the same
    run: median over runs of the same code, with the range."""
    lines = ["| MoE layer, forward + backward, one device | choice | µs (range over runs) | × `tritonplug`'s time "
             "(same run) | runs |", "|---|---|---|---|---|"]
    rows: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
    for path, data in recorded:
        for bench, impls in timed_by_bench(data, "layer").items():
            for choice in EXPERT_PARALLEL:
                if choice in impls:
                    base = impls.get("tritonplug")
                    rows.setdefault((bench, code(choice, path)), []).append(
                        (impls[choice]["median_us"], base and impls[choice]["median_us"] / base["median_us"]))
    for (bench, choice), values in sorted(rows.items()):
        ratios = [r for _, r in values if r is not None]
        lines.append(f"| {bench.removeprefix('layer ').removesuffix(' forward+backward')} | {choice} | "
                     f"{median_range([us for us, _ in values], 0)} | {median_range(ratios, 2)} | {len(values)} |")
    return "\n".join(lines)
