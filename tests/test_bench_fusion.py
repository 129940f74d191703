"""``bench/fusion.py --smoke`` on the CPU (about 7 s): SwiGLU's programs as XLA's op, launched, inlined and
``"auto"``, each checked against XLA's numbers and each lowering's path recorded; its translations' gathers,
scatters and while loops counted. The GPU run is the lead's; this holds the script to running and to reporting
what each variant did."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT, load_bench, requires_backend

pytestmark = [requires_backend("interpret"),
              pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None,
                                 reason="liger_kernel is not installed (tox's cpu env installs it)")]


def test_the_smoke_run_times_every_variant_and_counts_the_translations(tmp_path):
    out = tmp_path / "fusion.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fusion.py"), "--smoke", "--parts", "ops,cpu",
                           "--ops", "swiglu", "--out", str(out)], capture_output=True, text=True, timeout=300,
                          env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert "bench/fusion.py --smoke" in report["command"]
    records = {(r["bench"], r["impl"]): r for r in report["records"]}
    assert not [r for r in report["records"] if "error" in r], [r["error"] for r in report["records"] if "error" in r]
    for program in ("forward", "forward+backward", "fused"):
        for variant in ("xla", "launch", "inline", "auto"):
            record = records[(f"swiglu {program}", variant)]
            assert record["median_us"] > 0 and len(record["samples"]) == 2
            assert record["kernel_calls"] == 0  # the CPU backend: translations, never a GPU kernel call
        for variant, mode in (("launch", False), ("inline", True), ("auto", "auto")):
            record = records[(f"swiglu {program}", variant)]
            assert record["check"] == "ok", record["check"]
            assert record["paths"] and {p["mode"] for p in record["paths"]} == {mode}, record["paths"]
            assert {p["kernel"] for p in record["paths"]} <= {"_swiglu_forward_kernel", "_swiglu_backward_kernel"}
    for program in ("forward", "forward+backward"):
        record = records[(f"swiglu {program} cpu translation", "inline")]
        assert record["unfusible"] == {"gather": 0, "scatter": 0, "while": 0}
        assert len(record["kernels"]) == (1 if program == "forward" else 2)


def test_docs_quote_the_recorded_cpu_translations():
    """docs/benchmarks.md's sentence on the 1b translations against the run it quotes."""
    report = json.loads((ROOT / "bench/results/fusion-cpu/translations-1b.json").read_text())
    records = [r for r in report["records"] if r["bench"].endswith("cpu translation")]
    assert len(records) == 6 and all(r["unfusible"] == {"gather": 0, "scatter": 0, "while": 0} for r in records)
    calls = sum(len(r["kernels"]) for r in records)
    assert report["config"] == "1b" and f"({calls} kernel calls in the six programs)" in (
        ROOT / "docs/benchmarks.md").read_text()


def test_a_run_cut_by_its_time_limit_keeps_every_record_it_made(tmp_path):
    """bench/_util.Results, given its output file (bench/fusion.py, mamba2.py and moe.py give theirs), saves after
    every record: a device call's time limit cuts a run, not what it measured before the cut."""
    out = tmp_path / "run.json"
    results = load_bench("_util").Results(out, parts="step")
    results.add("step", "jax", median_us=1.0)
    assert [(r["bench"], r["impl"]) for r in json.loads(out.read_text())["records"]] == [("step", "jax")]
    with results.guard("step", "tritonplug:auto"):
        raise TimeoutError("cut")
    saved = json.loads(out.read_text())
    assert saved["parts"] == "step" and saved["records"][-1]["error"] == "TimeoutError: cut"
