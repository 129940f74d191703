"""The example backend from outside the host (``tests/plugins/example_backend``, distribution
``tritonplug-example``), installed by pip for real: the tox env ``plugins`` installs it, elsewhere these
tests skip. Broken plugins: ``test_plugins_broken.py``; plugin objects: ``test_plugins_register.py``.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import installed_backends
from outside_plugins_support import ROOT, SUBPROCESS_TIMEOUT_S, add, on_cpu, requires_example, subprocess_environment

import tritonplug
from tritonplug.errors import PluginError
from tritonplug.process.state import state

# --------------------------------------------------------------------------- the example backend

@requires_example
def test_example_backend_is_found_through_its_entry_point() -> None:
    (ep,) = [ep for ep in importlib.metadata.entry_points(group="tritonplug.backends") if ep.name == "example"]
    assert ep.value == "tritonplug_example.plugin"
    assert ep.dist is not None and ep.dist.metadata["Name"] == "tritonplug-example"
    (info,) = [b for b in tritonplug.backends() if b.name == "example"]
    assert info.platforms == ("cpu",)
    assert state.host().backends["example"].source == "entry point example = tritonplug_example.plugin"


@requires_example
def test_example_backend_in_the_info_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "tritonplug", "--json", "info"], cwd=ROOT, capture_output=True,
                          text=True, env=subprocess_environment(None, {"TRITONPLUG_BACKENDS": "cpu:example"}),
                          timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    example = json.loads(proc.stdout)["backends"]["example"]
    assert example["platforms"] == "cpu" and example["target[cpu]"] == "example:host"
    assert example["source"] == "entry point example = tritonplug_example.plugin"


@requires_example
def test_example_backend_lowers_and_runs_a_call_when_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonplug_example.plugin import BINARY_FORMAT, RECORD

    monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu:example")
    before = {hook: len(seen) for hook, seen in RECORD.items()}
    x = on_cpu(40)
    out = jax.jit(lambda v: add(v, backend_options={"example_tag": "from-test"}))(x)
    np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(40, dtype=np.float32))
    assert {hook: len(seen) - before[hook] for hook, seen in RECORD.items()} == {
        "detect_target": 1, "parse_options": 1, "compile": 1, "make_kernel": 1, "run": 1}
    assert RECORD["make_kernel"][-1] == (BINARY_FORMAT, "add_kernel", (1, 1, 1))
    assert RECORD["run"][-1] == ("add_kernel", "from-test")
    assert RECORD["parse_options"][-1]["example_tag"] == "from-test"


@requires_example
def test_example_backend_rejects_an_unknown_option_before_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonplug_example.plugin import RECORD

    monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu:example")
    compiled = len(RECORD["compile"])
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['maxnreg'\] for the example backend"):
        add(on_cpu(41), backend_options={"maxnreg": 64})
    assert len(RECORD["compile"]) == compiled


@requires_example
def test_example_and_interpret_conflict_without_tritonplug_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    if "interpret" not in installed_backends():
        pytest.skip("the interpret backend is not installed, so nothing conflicts with the example backend")
    monkeypatch.delenv("TRITONPLUG_BACKENDS", raising=False)
    with pytest.raises(PluginError, match=r"(?=.*'example')(?=.*'interpret').*all serve platform 'cpu'"):
        add(on_cpu(42))


@requires_example
def test_the_example_backends_own_variable_is_declared_not_a_typo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A third-party backend declares ``TRITONPLUG_EXAMPLE_TAG`` through the plugin API: ``tritonplug info`` lists it
    with its owner, never among the undeclared variables, and a value it refuses under problems."""
    def info(tag: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "tritonplug", "--json", "info"], cwd=ROOT, capture_output=True,
                              text=True, timeout=SUBPROCESS_TIMEOUT_S, env=subprocess_environment(
                                  None, {"TRITONPLUG_BACKENDS": "cpu:example", "TRITONPLUG_EXAMPLE_TAG": tag}))
        assert proc.returncode == 0, proc.stderr[-4000:]
        return json.loads(proc.stdout)

    report = info("from-env")
    assert report["settings"]["TRITONPLUG_EXAMPLE_TAG"] == "from-env (set)"
    assert report["setting owners"]["example"] == "TRITONPLUG_EXAMPLE_TAG"
    assert "TRITONPLUG_EXAMPLE_TAG" not in report["undeclared variables"]
    refused = info("two words")
    assert any(p.startswith("TRITONPLUG_EXAMPLE_TAG must be a word") for p in refused["problems"])
    from tritonplug_example.plugin import RECORD

    monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu:example")
    monkeypatch.setenv("TRITONPLUG_EXAMPLE_TAG", "from-env")
    np.testing.assert_array_equal(np.asarray(add(on_cpu(43))), 2 * np.arange(43, dtype=np.float32))
    assert RECORD["run"][-1] == ("add_kernel", "from-env")
