"""The performance figures of the README and docs/ are the recorded benchmark results, not numbers copied by hand.

Each figure a document quotes is recomputed from the JSON a benchmark wrote under ``bench/results/``; a new
benchmark run that changes them fails here until the document says the same.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RESULTS = ROOT / "bench" / "results"


def _records(name: str) -> list[dict]:
    return json.loads((RESULTS / name).read_text())["records"]


def test_the_cpu_speedup_range_is_the_recorded_one() -> None:
    speedups = [r["speedup"] for r in _records("interpret-cpu.json") if r["impl"] == "xla"]
    quoted = f"run {min(speedups):.0f}–{max(speedups):.0f}× faster than Triton's interpreter"
    assert quoted in " ".join(README.split()), quoted


def test_the_cpu_path_is_within_three_times_jnp_as_the_readme_says() -> None:
    paired = [r["vs_jnp_paired"] for r in _records("interpret-cpu.json") if r["impl"] == "xla"]
    assert max(paired) <= 3 and "within 3× of `jnp`" in README


def test_the_warm_start_figures_are_the_recorded_ones() -> None:
    by_scenario = {r["scenario"]: r for r in _records("startup-gpu.json")}
    cold, warm = by_scenario["cold"]["program_s"], min(r["program_s"] for r in by_scenario.values())
    quoted = f"the jitted program: {cold:.2f} s cold → {warm:.3f} s"
    assert quoted in " ".join(README.split()), quoted


def test_no_document_says_every_cpu_kernel_runs_in_the_interpreter() -> None:
    for document in DOCUMENTS:
        assert "runs every kernel in Triton's interpreter" not in document.read_text(), document.name


def test_the_tutorial_attention_backward_times_are_the_recorded_ones() -> None:
    by_impl = {r["impl"]: r for r in _records("cpu-attention-bwd.json")}
    first, warmed = by_impl["median first"]["total_s"], by_impl["median warmed"]["total_s"]
    quoted = f"now takes {warmed:.2f} s from call to result in a process that has run a kernel before and {first:.2f} s"
    assert quoted in " ".join(ARCHITECTURE.split()), quoted


@pytest.mark.parametrize("run", ["eager-h100-paired/run2", "eager-h100-guards/run2"])
def test_the_eager_ratios_to_xla_are_the_recorded_ones(run: str) -> None:
    launch = {(r["bench"], r["impl"]): r for r in _records(f"{run}/launch-ab.json")}
    profile = {(r["bench"], r["impl"]): r for r in _records(f"{run}/profile-eager.json")}
    text = " ".join((ROOT / "docs" / "benchmarks.md").read_text().split())
    for ours, theirs in (("eager", "sync"), ("eager_async", "async")):
        quoted = f"{launch[ours, 'tritonplug']['vs_xla']:.3f}× / {profile[theirs, 'tritonplug']['vs_xla']:.3f}×"
        assert quoted in text, quoted



@pytest.mark.parametrize(("runners", "before"), [("run1", "before-run1"), ("processes-a/runners", "processes-a/before"),
                                                 ("processes-b/runners", "processes-b/before")])
def test_the_runner_ratios_are_the_recorded_ones(runners: str, before: str) -> None:
    """Each pair of ``launch_ab`` runs in docs/benchmarks.md's runner table: ours, and the code before, to XLA."""
    def ratios(run: str) -> dict[str, float]:
        records = _records(f"eager-h100-runners/{run}/launch-ab.json")
        return {r["bench"]: r["vs_xla"] for r in records if r["impl"] == "tritonplug" and "vs_xla" in r}

    ours, theirs = ratios(runners), ratios(before)
    text = " ".join((ROOT / "docs" / "benchmarks.md").read_text().split())
    for bench in ("eager", "eager_async"):
        quoted = f"{ours[bench]:.3f}× (before {theirs[bench]:.3f}×)"
        assert quoted in text, quoted
    assert ours["eager"] <= 1.05 and ours["eager_async"] <= 1.15  # the goals the table says are met


def test_the_runners_process_summary_is_the_recorded_one() -> None:
    """docs/benchmarks.md's count over every process of the six five-process runs of the runners."""
    runs = ["run1", "processes-a/runners", "processes-b/runners", "after-review/run2", "after-review/two-dicts",
            "after-review/one-dict"]
    values: dict[str, list[float]] = {"eager": [], "eager_loop": []}
    for run in runs:
        for r in _records(f"eager-h100-runners/{run}/launch-ab.json"):
            if r["impl"] == "tritonplug" and r["bench"] in values:
                values[r["bench"]] += r["process_vs_xla"]
    eager, loop = values["eager"], values["eager_loop"]
    text = " ".join((ROOT / "docs" / "benchmarks.md").read_text().split())
    quoted = (f"the synchronised ratio's median is {statistics.median(eager):.3f}× and {sum(v <= 1.05 for v in eager)}"
              f" of the {len(eager)} processes read ≤ 1.05×; `eager_loop`'s median is {statistics.median(loop):.3f}×")
    assert quoted in text, quoted
