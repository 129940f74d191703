"""docs/benchmarks.md's per-call figures: ``bench/launch_ab.py``, ``bench/profile_eager.py``, ``bench/eager_floor.py``.

Each block takes every recorded run of one version of the code (the run folders named here; their READMEs say
what each was) and gives the median of the runs' values with their range. A run whose GPU argument tests
(``args-pytest.txt``) failed is named beside the figures and not counted.
"""

from __future__ import annotations

from collections.abc import Sequence

from _report import RESULTS, cell, excluded, find, load, pytest_counts, records, runs, span, table

PAIRED = ["eager-h100-paired/run1", "eager-h100-paired/run2"]
GUARDS = ["eager-h100-guards/run1", "eager-h100-guards/run2"]
#: the runners' code before the review, with profile_eager and eager_floor beside launch_ab
RUNNERS_PROFILED = ["eager-h100-runners/run1", "eager-h100-runners/single-process/runners-1",
                    "eager-h100-runners/single-process/runners-3"]
#: (ours, the code before) in five processes each, one pair per machine
RUNNER_PAIRS = [("run1", "before-run1"), ("processes-a/runners", "processes-a/before"),
                ("processes-b/runners", "processes-b/before")]
#: every five-process run of the runners, after the review included
RUNNERS_ALL = ["run1", "processes-a/runners", "processes-b/runners", "after-review/run2", "after-review/two-dicts",
               "after-review/one-dict"]
H200_LAUNCH_AB = ["h200-launch-ab-run1.json", "h200-launch-ab.json"]
SYNC_GOAL, ASYNC_GOAL = 1.05, 1.15


def _failed_checks(run: str) -> str | None:
    """Why a run's figures do not count: its GPU argument tests failed (``args-pytest.txt``), else ``None``."""
    log = RESULTS / run / "args-pytest.txt"
    if not log.exists():
        return None
    counts = pytest_counts(f"{run}/args-pytest.txt")
    return f"{counts['failed']} of its GPU tests failed" if counts.get("failed") else None


def _split(candidates: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    good, bad = [], []
    for run in candidates:
        why = _failed_checks(run)
        (bad.append((run, why)) if why else good.append(run))
    return good, bad


def _names(paths: Sequence[str]) -> str:
    return ", ".join(f"`{path.split('/')[-1]}`" for path in paths)


def _value(run: str, name: str, bench: str, impl: str, field: str = "vs_xla") -> float:
    record = find(records(f"{run}/{name}"), bench=bench, impl=impl)
    assert record is not None, (run, name, bench, impl)
    return record[field]


def _ratio(values: Sequence[float], goal: float) -> str:
    return f"{cell(values, '{:.3f}', '×')}; ≤ {goal:.2f}× in {sum(v <= goal for v in values)} of {len(values)}"


def _eager_table(candidates: Sequence[str], floor: bool) -> str:
    """Synchronised and asynchronous eager calls against XLA's ``x + y``, over the runs of one version."""
    good, bad = _split(candidates)
    header = ["", "tritonplug", "XLA `x + y`", "`launch_ab` ratio", "`profile_eager` ratio"]
    header += ["`eager_floor` ratio"] if floor else []
    rows = []
    for label, ab, prof, goal in (("synchronised each call", "eager", "sync", SYNC_GOAL),
                                  ("500 back to back, one sync", "eager_async", "async", ASYNC_GOAL)):
        row = [label, cell([_value(r, "launch-ab.json", ab, "tritonplug", "median_us") for r in good], unit=" µs"),
               cell([_value(r, "launch-ab.json", ab, "xla", "median_us") for r in good], unit=" µs")]
        sources = [("launch-ab.json", ab)] + [("profile-eager.json", prof)] + ([("eager-floor.json", prof)] if floor
                                                                                else [])
        for name, bench in sources:
            row.append(_ratio([_value(r, name, bench, "tritonplug") for r in good], goal))
        rows.append(row)
    caption = (f"Median of the {runs(len(good))} ({_names(good)}) and, in "
               f"brackets, their range; each ratio is to XLA's `x + y` of the same work, with how many runs met the "
               f"goal.{excluded(bad)}")
    return caption + "\n\n" + table(header, rows)


def _python_per_call(candidates: Sequence[str]) -> tuple[str, str, str]:
    """``python_only_us``, ``python_in_loop_us`` (synchronised) and the program alone's ratio, over the runs."""
    good, _ = _split(candidates)
    hot = [_value(r, "profile-eager.json", "no-op dispatch", "python_only_us", "median_us") for r in good]
    loop = [find(records(f"{r}/profile-eager.json"), bench="sync", impl="python_in_loop_us") for r in good]
    alone = [_value(r, "profile-eager.json", "sync", "dispatch") for r in good]
    in_loop = [x["median_us"] for x in loop if x]
    partial = f" (recorded by {len(in_loop)} of the {len(good)} runs)" if len(in_loop) < len(good) else ""
    return cell(hot, "{:.2f}", " µs"), cell(in_loop, "{:.2f}", " µs") + partial, cell(alone, "{:.3f}", "×")


def eager_paired() -> str:
    hot, in_loop, alone = _python_per_call(PAIRED)
    return (_eager_table(PAIRED, floor=False) + "\n\n"
            f"Our jitted program called directly costs {alone} XLA's op (XLA's `x + y` runs `Array.__add__` in "
            f"Python in front of jnp's C++ dispatch). The rest is the host's Python per repeat call: {hot} hot "
            f"(`python_only_us`), {in_loop} where it runs (`python_in_loop_us`, timed around the call less its "
            f"program's dispatch).")


def eager_guards() -> str:
    paired_hot, paired_loop, _ = _python_per_call(PAIRED)
    hot, in_loop, _ = _python_per_call(GUARDS)
    return (_eager_table(GUARDS, floor=True) + "\n\n"
            f"The host's Python per repeat call fell from {paired_hot} to {hot} hot (`python_only_us`) and from "
            f"{paired_loop} to {in_loop} where it runs (`python_in_loop_us`; medians over each table's runs).")


def _launch_ab(run: str) -> dict[str, float]:
    path = f"eager-h100-runners/{run}/launch-ab.json"
    return {r["bench"]: r["vs_xla"] for r in records(path) if r["impl"] == "tritonplug" and "vs_xla" in r}


def eager_runners() -> str:
    """One row per machine (ours, then the code before, in five processes each); the ladder and the Python."""
    rows = []
    for ours, before in RUNNER_PAIRS:
        new, old = _launch_ab(ours), _launch_ab(before)
        sync_met = new["eager"] <= SYNC_GOAL and new["eager_async"] <= ASYNC_GOAL
        label = f"`{ours.split('/')[0]}/`" if "/" in ours else f"`{ours}/`, `{before}/`"
        rows.append([label, f"{new['eager']:.3f}× (before {old['eager']:.3f}×)",
                     f"{new['eager_async']:.3f}× (before {old['eager_async']:.3f}×)", "met" if sync_met else "not met"])
    loops = [(_launch_ab(o), _launch_ab(b)) for o, b in RUNNER_PAIRS]
    loops = [(o["eager_loop"], b["eager_loop"]) for o, b in loops if "eager_loop" in o and "eager_loop" in b]
    good, bad = _split([f"{r}" for r in RUNNERS_PROFILED])
    ladder = [("`triton_call`", "tritonplug"), ("the runner found by the kernel's id and called", "looked_up"),
              ("the runner called directly", "runner"), ("a check written by hand for this one call", "matcher"),
              ("no check", "floor"), ("the program alone", "dispatch")]
    steps = ", ".join(f"{what} {cell([_value(r, 'eager-floor.json', 'sync', impl) for r in good], '{:.3f}', '×')}"
                      for what, impl in ladder)
    hot, in_loop, _ = _python_per_call(good)
    guards_hot, guards_loop, _ = _python_per_call(GUARDS)
    return "\n\n".join([
        table(["`launch_ab`, 5 processes", "synchronised each call", "asynchronous, 500 back to back",
               f"goals ≤ {SYNC_GOAL:.2f}× and ≤ {ASYNC_GOAL:.2f}×"], rows),
        f"`eager_loop` (in the runs that have it): {', '.join(f'{o:.3f}×' for o, _ in loops)} (before "
        f"{', '.join(f'{b:.3f}×' for _, b in loops)}). Over the {runs(len(good))} of this code with `profile_eager` "
        f"and `eager_floor` ({_names(good)}; medians, ranges in brackets): the host's Python per repeat is {hot} hot "
        f"(with the guards: {guards_hot}) and {in_loop} where it runs (with the guards: {guards_loop}); "
        f"`eager_floor`'s ladder, synchronised, to XLA's op: {steps}.{excluded(bad)}"])


def eager_runners_summary() -> str:
    """Every process of the six five-process runs of the runners."""
    values: dict[str, list[float]] = {"eager": [], "eager_loop": []}
    for run in RUNNERS_ALL:
        for r in records(f"eager-h100-runners/{run}/launch-ab.json"):
            if r["impl"] == "tritonplug" and r["bench"] in values:
                values[r["bench"]] += r["process_vs_xla"]
    sync, loop = values["eager"], values["eager_loop"]
    return (f"Over all {len(RUNNERS_ALL)} five-process runs of the runners, the synchronised ratio's median is "
            f"{cell(sync, '{:.3f}').split(' ')[0]}× (processes {span(sync)}×) and {sum(v <= SYNC_GOAL for v in sync)} "
            f"of the {len(sync)} processes read ≤ {SYNC_GOAL:.2f}×; `eager_loop`'s median is "
            f"{cell(loop, '{:.3f}').split(' ')[0]}× ({sum(v <= SYNC_GOAL for v in loop)} of {len(loop)} processes "
            f"≤ {SYNC_GOAL:.2f}×).")


def h200_launch_ab() -> str:
    """``bench/launch_ab.py`` on the H200 against jax-triton 0.3.1, both runs of the session."""
    data = [(path, load(path)["records"]) for path in H200_LAUNCH_AB]
    impls = ["tritonplug", "tritonplug_out_shape", "jax_triton", "xla"]
    rows = []
    for label, bench in (("`jit`: 1000 chained calls in one program", "jit"),
                         ("eager, synchronised each call", "eager"), ("eager, 500 back to back, one sync",
                                                                       "eager_async")):
        got = [[find(recs, bench=bench, impl=impl) for _, recs in data] for impl in impls]
        row = [label] + [cell([r["median_us"] for r in found if r]) if any(found) else "—" for found in got]
        ours = got[0]
        row += [cell([r["vs_jax_triton"] for r in ours], "{:.2f}", "×"),
                f"{sum(r['rounds_won'] for r in ours)} / {sum(r['rounds'] for r in ours)}"]
        rows.append(row)
    caption = (f"Both runs of the session ({', '.join(f'`bench/results/{p}`' for p in H200_LAUNCH_AB)}): the median "
               f"of the runs' medians and, in brackets, their range; µs per call:")
    return caption + "\n\n" + table(["bench", "tritonplug (`out_type=`)", "tritonplug (`out_shape=`, warns)",
                                     "jax-triton", "XLA `x + y`", "tritonplug / jax-triton", "rounds won"], rows)
