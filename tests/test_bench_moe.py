"""``bench/moe.py --smoke`` on the CPU: the grouped matmul against ``ragged_dot`` and the dense matmul, the MoE layer
per choice, each forward + backward also kernel by kernel (``--profile``). The GPU runs are the lead's
(bench/results/moe-h200); this holds the script to running, checking and reporting."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

GMM = "gmm smoke m=96 k=32 n=48 experts=4"
LAYER = "layer smoke tokens=48 d=32 f=16 experts=4 top_k=2 forward+backward"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "moe.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "moe.py"), "--smoke", "--parts", "gmm,layer",
                           "--rounds", "1", "--calls", "1", "--profile", "--out", str(out)], capture_output=True,
                          text=True, timeout=900, env=env, cwd=ROOT / "bench")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def _by(report: dict) -> dict[tuple[str, str], dict]:
    return {(r["bench"], r["impl"]): r for r in report["records"]}


def test_every_implementation_is_timed_and_the_grouped_matmul_checked(smoke):
    assert "bench/moe.py --smoke" in smoke["command"]
    assert not [r for r in smoke["records"] if "error" in r], [r["error"] for r in smoke["records"] if "error" in r]
    records = _by(smoke)
    assert records[(f"{GMM} check", "grouped_matmul")]["check"] == "ok"
    for program in ("forward", "forward+backward"):
        for impl in ("dense", "grouped_matmul", "ragged_dot"):
            assert records[(f"{GMM} {program}", impl)]["median_us"] > 0
    for choice in ("jax", "jax-dense", "tritonplug"):
        assert records[(LAYER, choice)]["median_us"] > 0


def test_profile_lists_each_forward_backward_kernel_by_kernel(smoke):
    records = _by(smoke)
    for bench, impls in ((f"{GMM} forward+backward", ("dense", "grouped_matmul", "ragged_dot")),
                         (LAYER, ("jax", "jax-dense", "tritonplug"))):
        for impl in impls:
            record = records[(f"{bench} kernels", impl)]
            assert record["median_us"] is None      # not a timing: the report tables skip it
            times = [k["us"] for k in record["kernels"]]
            assert times and min(times) > 0 and times == sorted(times, reverse=True), record["kernels"][:3]
    assert (f"{GMM} forward kernels", "dense") not in records     # forward + backward only
