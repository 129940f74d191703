"""Broken backends from outside the host, installed by pip for real.

``tests/plugins/broken_*`` and ``conflicting`` are tiny distributions that fail in one way each. They
are pip-installed into a private ``--target`` directory, and only processes given that directory
on ``PYTHONPATH`` (or a fresh ``Host`` with it on ``sys.path``) see their entry points, so the
rest of the suite never does. Plugin objects: ``test_plugins_register.py``; the working example
backend: ``test_plugins_example.py``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import filelock
import pytest
from helpers import installed_backends
from outside_plugins_support import (
    ROOT,
    SUBPROCESS_TIMEOUT_S,
    requires_interpret,
    run_python,
    subprocess_environment,
)

from tritonplug.compile.backends import Host
from tritonplug.errors import PluginError

PLUGINS = ROOT / "tests" / "plugins"
BROKEN = ("broken_import", "broken_hook", "broken_signature", "conflicting")
BROKEN_MODULES = tuple(f"tritonplug_{name}" for name in BROKEN)


# --------------------------------------------------------------------------- installing the broken plugins

def _pip_build_args() -> list[str]:
    """Build the wheels with this environment's setuptools when it can (fast, offline); else let pip isolate."""
    try:
        major, minor = (int(part) for part in importlib.metadata.version("setuptools").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return []
    can_build_wheels = (major, minor) >= (70, 1) or (major >= 64 and importlib.util.find_spec("wheel") is not None)
    return ["--no-build-isolation", "--no-index"] if can_build_wheels else []


@pytest.fixture(scope="session")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The broken distributions, installed by ``pip install --target`` once per test run (xdist workers share)."""
    root = tmp_path_factory.getbasetemp()
    shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    site = shared / "broken-plugins-site"
    with filelock.FileLock(str(shared / "broken-plugins.lock")):
        if not (site / ".installed").exists():
            sources = shared / "broken-plugins-src"  # build from copies: pip writes build/ and *.egg-info there
            shutil.rmtree(sources, ignore_errors=True)
            shutil.rmtree(site, ignore_errors=True)
            for name in BROKEN:
                shutil.copytree(PLUGINS / name, sources / name)
            command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *_pip_build_args(),
                       "--target", str(site), *(str(sources / name) for name in BROKEN)]
            proc = subprocess.run(command, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
            assert proc.returncode == 0, f"pip failed:\n{proc.stdout}\n{proc.stderr}"
            (site / ".installed").write_text("")
    return site


# --------------------------------------------------------------------------- fresh processes

PROBE = r"""
import json, os, sys, warnings

steps = json.loads(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import tritonplug
    from tritonplug.process.state import state

    host = state.host()
report = {"warnings": [str(w.message) for w in caught if str(w.message).startswith("tritonplug:")],
          "backends": {b.name: list(b.platforms) for b in tritonplug.backends()},
          "problems": list(host.problems), "calls": []}
if steps:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from kernels import add_kernel

    def add(x):
        return tritonplug.triton_call(x, x, x.size, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                      grid=1, BLOCK=tritonplug.next_power_of_2(x.size))
for step in steps:
    os.environ.update(step.get("env", {}))
    x = jnp.arange(step["n"], dtype=jnp.float32)
    try:
        report["calls"].append({"result": np.asarray(add(x)).tolist()})
    except Exception as exc:
        report["calls"].append({"error": type(exc).__name__, "message": str(exc)})
print("REPORT " + json.dumps(report))
"""


def probe(site: Path | None, steps: list[dict] = (), **env: str) -> dict:
    return run_python(PROBE, json.dumps(list(steps)), site=site, env=env)


def doubled(n: int) -> list[float]:
    return [2.0 * i for i in range(n)]


def named_in(messages: list[str], *plugins: str) -> set[str]:
    return {p for p in plugins for m in messages if repr(p) in m}


@requires_interpret
def test_broken_plugins_are_reported_by_name_and_the_others_keep_working(broken_site: Path) -> None:
    report = probe(broken_site, [{"n": 8}], TRITONPLUG_BACKENDS="cpu:interpret")
    warned = report["warnings"]
    assert named_in(warned, *BROKEN) == {"broken_import", "broken_signature"}, warned
    (import_warning,) = [w for w in warned if "'broken_import'" in w]
    assert "failed to import" in import_warning and "libexample_driver.so" in import_warning
    (signature_warning,) = [w for w in warned if "'broken_signature'" in w]
    assert "does not match the tritonplug hook specs" in signature_warning and "extra" in signature_warning
    assert {"interpret", "broken_hook", "conflicting"} <= set(report["backends"])
    assert not {"broken_import", "broken_signature"} & set(report["backends"])
    assert named_in(report["problems"], *BROKEN) == {"broken_import", "broken_signature"}
    assert report["calls"] == [{"result": doubled(8)}]


@requires_interpret
def test_a_hook_that_raises_is_an_error_naming_its_plugin_and_the_process_carries_on(broken_site: Path) -> None:
    report = probe(broken_site, [{"n": 16}, {"n": 32, "env": {"TRITONPLUG_BACKENDS": "cpu:interpret"}}],
                   TRITONPLUG_BACKENDS="cpu:broken_hook",
                   TRITONPLUG_DISABLE_PLUGINS="broken_import,broken_signature")
    assert report["warnings"] == []  # the two disabled plugins are never imported
    failed, ran = report["calls"]
    assert failed["error"] == "PluginError"
    for part in ("'broken_hook'", "tritonplug_detect_target", "RuntimeError", "device driver crashed"):
        assert part in failed["message"]
    assert ran == {"result": doubled(32)}


@requires_interpret
def test_a_conflict_is_an_error_until_tritonplug_backends_picks_one(broken_site: Path) -> None:
    report = probe(broken_site, [
        {"n": 64},
        {"n": 128, "env": {"TRITONPLUG_BACKENDS": "cpu:conflicting"}},
        {"n": 256, "env": {"TRITONPLUG_BACKENDS": "cpu:interpret"}},
    ], TRITONPLUG_DISABLE_PLUGINS="broken_hook,example")
    unresolved, conflicting, interpret = report["calls"]
    assert unresolved["error"] == "PluginError"
    assert named_in([unresolved["message"]], "interpret", "conflicting") == {"interpret", "conflicting"}
    assert "TRITONPLUG_BACKENDS=cpu:" in unresolved["message"]
    assert conflicting == {"result": [7.0] * 128}  # the conflicting backend fills every result with 7
    assert interpret == {"result": doubled(256)}
    (conflict,) = [p for p in report["problems"] if "platform 'cpu'" in p]
    assert "'conflicting'" in conflict and "'interpret'" in conflict


@requires_interpret
def test_disabling_plugins_silences_them_one_by_one(broken_site: Path) -> None:
    one = probe(broken_site, TRITONPLUG_DISABLE_PLUGINS="broken_import")
    assert named_in(one["warnings"], *BROKEN) == {"broken_signature"}
    # the example backend where it is installed (tox -e plugins): naming a plugin that is not installed warns
    example = ",example" if "example" in installed_backends() else ""
    quiet = probe(broken_site, [{"n": 512}],
                  TRITONPLUG_DISABLE_PLUGINS=" broken_import , broken_signature,broken_hook,conflicting" + example)
    assert quiet["warnings"] == [] and quiet["problems"] == []
    assert not set(BROKEN) & set(quiet["backends"])
    assert quiet["calls"] == [{"result": doubled(512)}]  # no conflict left on cpu, no TRITONPLUG_BACKENDS needed


def test_info_cli_lists_the_problems_and_each_backends_target(broken_site: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tritonplug", "--json", "info"], cwd=ROOT, capture_output=True,
                          text=True, env=subprocess_environment(broken_site, {}), timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    info = json.loads(proc.stdout)
    assert any("'broken_import'" in p and "failed to import" in p for p in info["problems"])
    assert any("'broken_signature'" in p and "does not match" in p for p in info["problems"])
    (conflict,) = [p for p in info["problems"] if "all serve platform 'cpu'" in p]
    assert named_in([conflict], *BROKEN) == {"broken_hook", "conflicting"}
    assert info["backends"]["conflicting"]["target[cpu]"] == "conflicting:host"
    hook_target = info["backends"]["broken_hook"]["target[cpu]"]
    assert hook_target.startswith("not detected") and "device driver crashed" in hook_target
    assert "RuntimeWarning: tritonplug: plugin 'broken_import'" in proc.stderr


# --------------------------------------------------------------------------- a fresh Host in this process

@pytest.fixture
def broken_on_path(broken_site: Path, monkeypatch: pytest.MonkeyPatch):
    """The broken distributions' entry points visible to this process for one test; their modules forgotten after."""
    monkeypatch.syspath_prepend(str(broken_site))
    monkeypatch.delenv("TRITONPLUG_BACKENDS", raising=False)
    monkeypatch.delenv("TRITONPLUG_DISABLE_PLUGINS", raising=False)
    yield broken_site
    for module in [m for m in sys.modules if m.startswith(BROKEN_MODULES)]:
        del sys.modules[module]


def test_fresh_host_reports_each_broken_plugin(broken_on_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host()
    with pytest.warns(RuntimeWarning) as caught:
        host.load_entry_points()
    warned = [str(w.message) for w in caught]
    assert named_in(warned, *BROKEN) == {"broken_import", "broken_signature"}
    assert {"broken_hook", "conflicting"} <= set(host.backends)
    assert set(installed_backends()) - {"broken_import", "broken_signature"} <= set(host.backends)

    with pytest.raises(PluginError, match=r"backend 'broken_hook' raised in tritonplug_detect_target: "
                                          r"RuntimeError: the broken_hook device driver crashed"):
        host.backends["broken_hook"].detect_target("cpu", None, {})
    with pytest.raises(PluginError, match=r"(?=.*'broken_hook')(?=.*'conflicting').*all serve platform 'cpu'"):
        host.backend_for("cpu")

    monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu:conflicting")
    assert host.backend_for("cpu").name == "conflicting"
    monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu:broken_signature")
    with pytest.raises(PluginError, match="picks backend 'broken_signature'.*not loaded"):
        host.backend_for("cpu")
    monkeypatch.setenv("TRITONPLUG_BACKENDS", "broken_signature_platform:conflicting")
    with pytest.raises(PluginError, match=r"picks backend 'conflicting'.*serves only \['cpu'\]"):
        host.backend_for("broken_signature_platform")
    monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu=conflicting")
    with pytest.raises(ValueError, match="TRITONPLUG_BACKENDS entries must look like platform:backend"):
        host.backend_for("cpu")


def test_fresh_host_skips_disabled_plugins_without_importing_them(broken_on_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONPLUG_DISABLE_PLUGINS", "broken_import,broken_signature,broken_hook")
    host = Host()
    host.load_entry_points()
    assert host.problems == [p for p in host.problems if "all serve platform" in p]
    assert "conflicting" in host.backends and "broken_hook" not in host.backends
    assert not any(m.startswith(("tritonplug_broken_import", "tritonplug_broken_signature", "tritonplug_broken_hook"))
                   for m in sys.modules)

