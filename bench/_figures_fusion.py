"""docs/benchmarks.md's figures of ``bench/fusion.py`` (issue 38): each op's programs launched, inlined and
``"auto"`` against XLA's own op, from every run recorded under ``bench/results/fusion-h200/``.

A figure is the median over the runs of a variant's time over XLA's, each ratio taken within its run, with the range;
a run's output check (against XLA's op) is named beside it. The check of ``run1`` was an absolute tolerance of
0.06, which bf16 outputs in the tens (SwiGLU) and weight gradients in the thousands (RMSNorm's dW) exceed by one
bf16 step; later runs compare each output relative to its magnitude (``bench/fusion.py --tol``). ``run1``'s
``"auto"`` chose by timing each call alone, the rule before ``tune`` timed the whole program: its figures are a
column of their own (:data:`TIMED_ALONE`), never pooled with today's rule. Runs of different translations are
never pooled either (:data:`CODE_CHANGES`).
"""

from __future__ import annotations

import json
from collections import defaultdict

from _report import RESULTS, cell, run_number, table

FOLDER = "fusion-h200"
VARIANTS = ("launch", "inline", "auto", "auto, each call timed alone")
#: runs whose ``"auto"`` chose by timing each call in a program of its own (path prefix under bench/results)
TIMED_ALONE = ("fusion-h200/run1/",)
#: The runs (their folders' numbers) from which the code changed, and how: from run 4 ``"auto"`` keeps an
#: inlining only when it beats the whole program beyond the noise of its samples (``program_paths.beats``); from
#: run 6 RMSNorm's backward runs on programs that divide the rows (no loop bound per program, no gathers:
#: ``equal_loops``); from run 7 an access needs no bounds mask where every lane its mask leaves live is inside
#: the buffer (``lanes.within``); from run 10 a window starting inside a row is a slice of the buffer reshaped to
#: its rows (``windows._aligned``; run 10 wrote it in place), from run 11 written as a select over the buffer; from
#: run 14 ``tune``'s search ends with a joint trial of the calls the greedy trials did not keep; from run 16 a call
#: not kept before a later one was is tried again against the program chosen; from run 17 the variants' timing order
#: turns each round; from run 20 a mask true in every lane is dropped and stores that write a buffer whole are one
#: concatenation (``windows.write_whole``; run 19 measured the forms by hand); from run 22 a window store whose mask
#: is its box in every program (``mask_rules.EXACT_RULES``) is written without it; from run 23 a lane-wise kernel's
#: block is cut to its live lanes (``live_block``).
CODE_CHANGES = ((4, "auto beyond noise"), (6, "rows on equal loops"), (7, "no bounds mask on live lanes inside"),
                (10, "aligned windows"), (11, "stores as selects"), (14, "a joint trial"), (16, "tried again"),
                (17, "order turned"), (20, "full masks, whole stores"), (22, "exact masks"), (23, "live block"))


#: Side-by-side runs of two translators (run 21): a file named ``*-old.json`` ran the translator before run 20's
#: change (the plugin of the tree of e3e99b6 first on ``PYTHONPATH``), so it counts as this run's code.
OLD_TRANSLATOR_RUN = 19


def _code(path: str) -> str:
    """The code a run ran (:data:`CODE_CHANGES`, :data:`OLD_TRANSLATOR_RUN`)."""
    run = OLD_TRANSLATOR_RUN if path.endswith("-old.json") else run_number(path)
    return ", ".join(label for first, label in CODE_CHANGES if run >= first) or "before run 4"


def _in_order(code: str) -> int:
    """Where ``code`` (a :func:`_code`) stands in time: how many changes it holds."""
    return 0 if code.startswith("before") else code.count(",") + 1


def _recorded(script: str) -> list[tuple[str, dict]]:
    """``(path relative to bench/results, JSON)`` of every run of ``script`` recorded under :data:`FOLDER`."""
    found = []
    for path in sorted((RESULTS / FOLDER).glob("**/*.json")):
        data = json.loads(path.read_text())
        if script in data.get("command", ""):
            found.append((str(path.relative_to(RESULTS)), data))
    return found


def _runs() -> list[tuple[str, list[dict]]]:
    """``(path relative to bench/results, records)`` of every recorded ``bench/fusion.py`` run; a run without
    ``tune`` (``--no-tune``) keeps no ``"auto"`` record: untuned, ``"auto"`` only launches."""
    return [(path, [r for r in data["records"] if data.get("tuned", True) or r["impl"] != "auto"])
            for path, data in _recorded("bench/fusion.py")]


def _unfusible(record: dict) -> str:
    """The kernels whose translation holds gathers, scatters or loops, by name (the check ``"auto"`` applies)."""
    bad = [f"{p['kernel']} ({', '.join(f'{n} {k}' for k, n in p['unfusible'].items() if n)})"
           for p in record.get("paths") or [] if p.get("unfusible") and any(p["unfusible"].values())]
    return "; ".join(bad) or "none"


def ops() -> str:
    ratios: dict[tuple[tuple[str, str], str], list[float]] = defaultdict(list)
    best: dict[tuple[str, str], list[float]] = defaultdict(list)
    checks: dict[tuple[tuple[str, str], str], set[str]] = defaultdict(set)
    xla_us: dict[tuple[str, str], list[float]] = defaultdict(list)
    unfusible: dict[tuple[str, str], str] = {}
    for path, records in _runs():
        code = _code(path)
        for r in records:
            if r.get("median_us") is None or r["bench"].endswith((" tune", " build")):
                continue
            key = (r["bench"], code)
            if r["impl"] == "xla":
                xla_us[key].append(r["median_us"])
            elif r.get("vs_xla") is not None:
                alone = r["impl"] == "auto" and path.startswith(TIMED_ALONE)
                ratios[(key, VARIANTS[3] if alone else r["impl"])].append(r["vs_xla"])
                checks[(key, r["impl"])].add(f"{r.get('check', 'not checked')} (`{path}`)")
                if r["impl"] == "inline":
                    unfusible[key] = _unfusible(r)
            if r.get("auto_vs_best") is not None and not path.startswith(TIMED_ALONE):
                best[key].append(r["auto_vs_best"])
    rows = []
    for bench in sorted(xla_us, key=lambda k: (k[0], _in_order(k[1]))):
        rows.append([*bench, cell(xla_us[bench], "{:.0f}"),
                     *(cell(ratios[(bench, v)], "{:.2f}", "×") for v in VARIANTS),
                     cell(best[bench], "{:.2f}", "×"), unfusible.get(bench, "—"),
                     "; ".join(sorted(checks[(bench, "launch")] | checks[(bench, "inline")]))])
    return table(["op, program", "translations", "XLA µs", "launched", "inlined", "`auto`", "`auto` timed alone (run1)",
                  "`auto` over the better path",
                  "gathers, scatters, loops in the inlined translation", "outputs against XLA's"], rows)


def step() -> str:
    """The ``step`` part: the Llama loss and gradient per op choice, its tokens/s over the ``jax`` choice's (each
    ratio within its run; the median over runs, with the range), and the choices that failed, by run."""
    speed: dict[tuple[str, str], list[float]] = defaultdict(list)
    us: dict[tuple[str, str], list[float]] = defaultdict(list)
    failed: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path, records in _runs():
        for r in records:
            key = (r["impl"], _code(path))
            if r["bench"] == "step" and r.get("vs_xla"):
                speed[key].append(1.0 / r["vs_xla"])
                us[key].append(r["median_us"])
            elif r["bench"].startswith("step") and r.get("error"):
                failed[key].append(f"`{path}`: {r['error'].splitlines()[0][:120]}")
    order = sorted(speed, key=lambda k: (k[0] != "jax", k[0], _in_order(k[1])))
    rows = [[f"`{c}`", code, cell([u / 1e3 for u in us[c, code]], "{:.1f}"), cell(speed[c, code], "{:.3f}", "×"),
             str(len(speed[c, code])), "; ".join(failed.get((c, code), [])) or "—"] for c, code in order]
    rows += [[f"`{c}`", code, "—", "—", "0", "; ".join(f)] for (c, code), f in sorted(failed.items())
             if (c, code) not in speed]
    return table(["op choice", "code", "step ms", "tokens/s over `jax`", "runs", "failed"], rows)


def forms(script: str) -> str:
    """A forms script's runs (``bench/fusion_store_forms.py``: RoPE's forward written each way;
    ``bench/fusion_swiglu_forms.py``: SwiGLU's forward + backward): each form's time over XLA's op in the same run (the
    median over runs, with the range) and how many fusions XLA:GPU compiled it to, by the activations' layout (the
    model's, or one row per token: ``--tokens``) and the translator the run's ``inline`` form ran
    (:data:`CODE_CHANGES`)."""
    ratio: dict[tuple[str, str], list[float]] = defaultdict(list)
    fusions: dict[tuple[str, str], set[int]] = defaultdict(set)
    for path, data in _recorded(script):
        records = {r["impl"]: r for r in data["records"]}
        code = _code(path)
        for impl, r in records.items():
            layout = "(tokens, ·)" if r["bench"].endswith(" tokens") else "the model's"
            key = (impl, layout, code if impl == "inline" else "—")
            ratio[key].append(r["median_us"] / records["xla"]["median_us"])
            if r.get("fusions") is not None:
                fusions[key].add(r["fusions"])
    rows = [[f"`{impl}`", layout, code, cell(values, "{:.2f}", "×"),
             ", ".join(str(n) for n in sorted(fusions[impl, layout, code])) or "—", str(len(values))]
            for (impl, layout, code), values in sorted(
                ratio.items(), key=lambda kv: (kv[0][1] != "the model's", kv[0][0] != "xla", kv[0][0],
                                               _in_order(kv[0][2])))]
    return table(["form", "activations", "the translator (for `inline`)", "time over XLA's op", "fusions", "runs"],
                 rows)
