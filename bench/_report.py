"""Shared by the scripts that write documents' figures from ``bench/results/`` (``figures.py``, ``moe_report.py``).

A document's generated part stands between two HTML comments (invisible once rendered); the script rewrites what
lies between them, and with ``--check`` exits 1 instead when the document differs from that rendering, so a figure
typed over, or a new run recorded without rendering again, fails ``tests/test_readme_figures.py``.

The rule every rendering follows: a configuration's figure is the median over all its recorded runs, with the range
of the runs' values where there is more than one; a run in which the configuration's checks failed gives no figure
and is named beside it, so a failure cannot hide behind a better run.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

Record = dict[str, Any]


# ------------------------------------------------------------------ markers


def replace_between(text: str, begin: str, end: str, rendered: str) -> str:
    """``text`` with the part from ``begin`` through ``end`` replaced by ``rendered`` (which holds both markers).

    A marker missing, or ``end`` before ``begin``, raises ``ValueError``: a document that lost a marker must fail
    the check, not keep its old figures.
    """
    start = text.find(begin)
    stop = text.find(end, start + 1) if start >= 0 else -1
    if start < 0 or stop < 0:
        raise ValueError(f"the markers {begin!r} ... {end!r} are missing or out of order")
    return text[:start] + rendered + text[stop + len(end):]


def rewrite(documents: Mapping[Path, Callable[[str], str]], check: bool, script: str) -> int:
    """Render each document; write it, or with ``check`` report each one that differs. Returns the exit status."""
    stale = []
    for path, render in documents.items():
        text = path.read_text(encoding="utf-8")
        new = render(text)
        if new == text:
            continue
        if check:
            stale.append(path)
        else:
            path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{path} differs from its rendering: run python {script}", file=sys.stderr)
    return 1 if stale else 0


# ------------------------------------------------------------------ recorded results


def load(rel: str) -> Any:
    """The JSON file ``bench/results/<rel>``."""
    return json.loads((RESULTS / rel).read_text(encoding="utf-8"))


def records(rel: str) -> list[Record]:
    """A run's records: ``bench/_util.write_json``'s ``records``, or a merged file's plain list."""
    data = load(rel)
    return data if isinstance(data, list) else data["records"]


def find(recs: Iterable[Record], **fields: Any) -> Record | None:
    """The first record whose fields equal ``fields``, or ``None``."""
    return next((r for r in recs if all(r.get(k) == v for k, v in fields.items())), None)


def failure(record: Record | None) -> str | None:
    """Why a record gives no figure (its ``error``, a ``check`` other than ``ok``, no median), or ``None``."""
    if record is None:
        return "not recorded"
    if record.get("error"):
        return f"error: {record['error'].splitlines()[0][:80]}"
    if record.get("check") not in (None, "ok"):
        return f"check: {record['check']}"
    if record.get("median_us", 0) is None:
        return record.get("skipped") or "no time"
    return None


_SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def pytest_counts(rel: str) -> dict[str, int]:
    """The counts of a pytest log's last summary line (``25 failed, 26 passed in 48.00s``)."""
    lines = (RESULTS / rel).read_text(encoding="utf-8").splitlines()
    last = next(line for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line))
    return {word.rstrip("s") if word.startswith("error") else word: int(n) for n, word in _SUMMARY.findall(last)}


def pytest_failures(rel: str) -> Counter[str]:
    """How many cases of each test function a pytest log lists as ``FAILED``."""
    found: Counter[str] = Counter()
    for line in (RESULTS / rel).read_text(encoding="utf-8").splitlines():
        match = re.match(r"FAILED \S+::(\w+)", line)
        if match:
            found[match.group(1)] += 1
    return found


# ------------------------------------------------------------------ figures


def run_number(path: str) -> int:
    """The N of a ``.../runN-...`` results folder in ``path`` (0 where there is none)."""
    found = re.search(r"/run(\d+)", path)
    return int(found.group(1)) if found else 0


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def cell(values: Sequence[float], fmt: str = "{:.1f}", unit: str = "") -> str:
    """The median of the runs' values, then their range where the runs differ once formatted; ``—`` for none."""
    if not values:
        return "—"
    text = fmt.format(median(values)) + unit
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return text if lo == hi else f"{text} ({lo}–{hi}{unit})"


def span(values: Sequence[float], fmt: str = "{:.3f}", unit: str = "") -> str:
    """``lo–hi`` of several values (one value alone when they are equal once formatted)."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"


def runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def excluded(failed: Sequence[tuple[str, str]]) -> str:
    """A sentence naming the runs that gave no figure and why (empty when none failed)."""
    if not failed:
        return ""
    return " Not counted: " + "; ".join(f"`{run}` ({why})" for run, why in failed) + "."


def timed_by_bench(data: dict, prefix: str) -> dict[str, dict[str, dict]]:
    """A run's timed records (a ``median_us``) of the benches starting with ``prefix``: ``bench -> impl -> record``."""
    by_bench: dict[str, dict[str, dict]] = {}
    for r in data["records"]:
        if r["bench"].startswith(prefix) and r.get("median_us") is not None:
            by_bench.setdefault(r["bench"], {})[r["impl"]] = r
    return by_bench
