"""``bench/mamba2.py --smoke`` on the CPU: the SSD forward and forward + backward and the Mamba-2 block timed per
implementation with their memory plans, the port checked against the ``jnp`` SSD (torch's own launch needs a
GPU: on the CPU it must say so). The GPU run is the lead's; this holds the script to running and reporting."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "mamba2.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "mamba2.py"), "--smoke", "--rounds", "2", "--calls",
                           "1", "--no-tune", "--profile", "--out", str(out)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def _records(report: dict, impl: str) -> dict:
    return {r["bench"]: r for r in report["records"] if r["impl"] == impl}


def test_the_smoke_run_times_the_jnp_ssd_and_block_with_their_memory(smoke):
    assert "bench/mamba2.py --smoke" in smoke["command"] and smoke["environment"]["jax"]
    assert not [r for r in smoke["records"] if "error" in r], [r["error"] for r in smoke["records"] if "error" in r]
    jnp = _records(smoke, "jnp")
    expected = [f"ssd b=1 seq={s} heads=4 head_dim=8 state=16 groups=2 chunk=16 {p}"
                for s in (40, 64) for p in ("forward", "forward+backward")]
    expected.append("block tiny-bf16 b=1 seq=40 hidden=32 heads=4 state=16 forward+backward")
    for bench in expected:
        record = jnp[bench]
        assert record["median_us"] > 0 and len(record["samples"]) == 2, record
        assert record["peak_bytes"] > 0
    forward, both = (jnp[f"ssd b=1 seq=64 heads=4 head_dim=8 state=16 groups=2 chunk=16 {p}"]["peak_bytes"]
                     for p in ("forward", "forward+backward"))
    assert both > forward  # the backward's gradients and residuals are in its plan
    torch = _records(smoke, "torch")
    assert set(torch) == {b for b in expected if b.startswith("ssd")}  # torch is no block choice
    for record in torch.values():  # without a GPU torch cannot run, and says why
        assert record["median_us"] is None and "needs torch" in record["skipped"]


def test_the_smoke_run_times_the_port_and_checks_it_against_the_jnp_ssd(smoke):
    port = _records(smoke, "tritonplug")
    assert not [r for r in port.values() if r.get("skipped")], port
    timed = [r for r in port.values() if r.get("samples")]
    assert len(timed) == 5 and all(r["median_us"] > 0 and r["peak_bytes"] > 0 for r in timed)
    checks = _records(smoke, "tritonplug vs jnp")
    assert len(checks) == 2 and all(r["check"] == "ok" for r in checks.values()), checks
    assert set(next(iter(checks.values()))["max_rel_diff"]) == {"y", "dx", "ddt", "dA", "dB", "dC", "dD",
                                                                "ddt_bias"}


def test_the_smoke_run_profiles_each_jax_choice_kernel_by_kernel(smoke):
    for impl in ("jnp", "tritonplug"):
        profiles = {b: r for b, r in _records(smoke, impl).items() if b.endswith("kernels")}
        assert len(profiles) == 2, profiles.keys()  # one per shape
        for record in profiles.values():
            kernels = record["kernels"]
            assert kernels and all(k["us"] > 0 and k["launches"] > 0 for k in kernels), kernels
            assert [k["us"] for k in kernels] == sorted((k["us"] for k in kernels), reverse=True)
            assert not [k for k in kernels if k["kernel"].startswith("ThunkExecutor")]  # wrappers, not kernels
