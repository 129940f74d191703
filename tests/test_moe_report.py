"""docs/moe.md's tables are bench/moe_report.py's rendering of the recorded runs (bench/results/moe-*/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _report():
    spec = importlib.util.spec_from_file_location("moe_report", ROOT / "bench" / "moe_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_moe_tables_are_the_rendering_of_the_recorded_runs():
    assert _report().main(["--check"]) == 0, "run: python bench/moe_report.py"


def test_a_changed_figure_or_a_hidden_failure_is_caught(tmp_path, monkeypatch):
    report = _report()
    text = report.DOC.read_text()
    figure = "| 630.3 (630.3–630.3) |"  # the one usable untuned run's figure
    assert figure in text and "no: it failed" in text and "| NOT met |" in text  # the faulted runs, a missed goal
    for edited in (text.replace(figure, "| 530.3 (530.3–530.3) |"), text.replace("no: it failed", "yes"),
                   text.replace("| NOT met |", "| met |", 1)):
        doc = tmp_path / "moe.md"
        doc.write_text(edited)
        monkeypatch.setattr(report, "DOC", doc)
        assert report.main(["--check"]) == 1
