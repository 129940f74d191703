"""Backends from outside the host, installed by pip for real.

* ``tests/plugins/example_backend``: a working third-party backend (``tritonplug-example``) for the
  cpu platform; the tox env ``plugins`` installs it, elsewhere its tests skip.
* ``tests/plugins/broken_*`` and ``conflicting``: tiny distributions that fail in one way each. They
  are pip-installed into a private ``--target`` directory, and only processes given that directory
  on ``PYTHONPATH`` (or a fresh ``Host`` with it on ``sys.path``) see their entry points, so the
  rest of the suite never does.
* ``tritonplug.register_plugin`` with plugin objects, valid and invalid.
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
import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import installed_backends, requires_backend

import tritonplug
from tritonplug.errors import PluginError
from tritonplug.hookspecs import hookimpl
from tritonplug.host import Host
from tritonplug.records import BackendInfo, Binary, HostKernel, Options, Target
from tritonplug.state import state

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "tests" / "plugins"
BROKEN = ("broken_import", "broken_hook", "broken_signature", "conflicting")
BROKEN_MODULES = tuple(f"tritonplug_{name}" for name in BROKEN)
SUBPROCESS_TIMEOUT_S = 240


def _distribution_installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


requires_interpret = requires_backend("interpret")
requires_example = pytest.mark.skipif(
    not _distribution_installed("tritonplug-example"),
    reason="the example backend (tests/plugins/example_backend, distribution tritonplug-example) is not "
           "installed in this environment; its tests run in `tox -e plugins`")


@triton.jit
def add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def on_cpu(n: int) -> jax.Array:
    """``arange(n)`` on the CPU device, so calls lower for the cpu platform even where a GPU is visible."""
    return jax.device_put(np.arange(n, dtype=np.float32), jax.devices("cpu")[0])


def add(x: jax.Array, **options) -> jax.Array:
    n = x.shape[0]
    return tritonplug.triton_call(x, x, n, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=1, BLOCK=tritonplug.next_power_of_2(n), **options)


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
    from tritonplug.state import state

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


def _environment(site: Path | None, env: dict[str, str]) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TRITONPLUG_BACKENDS", "TRITONPLUG_DISABLE_PLUGINS")}
    paths = [str(ROOT / "tests"), str(site) if site else "", environment.get("PYTHONPATH", "")]
    environment["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    environment["JAX_PLATFORMS"] = "cpu"
    environment.update(env)
    return environment


def run_python(script: str, *args: str, site: Path | None = None, env: dict[str, str] | None = None) -> dict:
    """Run ``script`` in a fresh interpreter; it prints one line ``REPORT <json>``."""
    proc = subprocess.run([sys.executable, "-c", script, *args], env=_environment(site, env or {}), cwd=ROOT,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    reports = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and reports, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(reports[-1][len("REPORT "):])


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
    quiet = probe(broken_site, [{"n": 512}],
                  TRITONPLUG_DISABLE_PLUGINS=" broken_import , broken_signature,broken_hook,conflicting,example")
    assert quiet["warnings"] == [] and quiet["problems"] == []
    assert not set(BROKEN) & set(quiet["backends"])
    assert quiet["calls"] == [{"result": doubled(512)}]  # no conflict left on cpu, no TRITONPLUG_BACKENDS needed


def test_info_cli_lists_the_problems_and_each_backends_target(broken_site: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tritonplug", "--json", "info"], cwd=ROOT, capture_output=True,
                          text=True, env=_environment(broken_site, {}), timeout=SUBPROCESS_TIMEOUT_S)
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


# --------------------------------------------------------------------------- register_plugin

#: Capabilities of a backend that compiles no IR and runs kernels on the host: no front end, nothing
#: to cache, compiled in this process, first autotune configuration only.
HOST_ONLY = dict(ir_stages=(), cache_binaries=False, compile_in_worker=False, autotune="first")

class Hooks:
    """A complete, valid plugin object; the invalid ones below change one thing each."""

    name = "runtime_fill"

    @hookimpl
    def tritonplug_backend_info(self):
        return BackendInfo(self.name, ("cpu",), "0.0.1", "test plugin object", **HOST_ONLY)

    @hookimpl
    def tritonplug_detect_target(self, platform, device, requested):
        return Target(self.name, "cpu", "host", 1, None) if platform == "cpu" else None

    @hookimpl
    def tritonplug_parse_options(self, target, call_options):
        return Options()

    @hookimpl
    def tritonplug_compile(self, job):
        return Binary(job.kernel_name, self.name)

    @hookimpl
    def tritonplug_make_kernel(self, target, binary, launch):
        return HostKernel(launch.kernel_name, lambda operands, results: None, launch)


class NoHooks:
    def tritonplug_compile(self, job):  # not marked with hookimpl: pluggy does not see it
        return None


class WrongSignature(Hooks):
    @hookimpl
    def tritonplug_compile(self, job, extra):
        return None


class InfoRaises(Hooks):
    @hookimpl
    def tritonplug_backend_info(self):
        raise OSError("cannot read the device list")


class InfoWrongType(Hooks):
    @hookimpl
    def tritonplug_backend_info(self):
        return {"name": "dict_is_not_info"}


class NoPlatforms(Hooks):
    @hookimpl
    def tritonplug_backend_info(self):
        return BackendInfo("no_platforms", "cpu", "0")  # a str, not a tuple of platforms


class UnknownHook(Hooks):
    @hookimpl
    def tritonplug_compile_fast(self, job):
        return None


@pytest.mark.parametrize(("plugin", "match"), [
    (NoHooks(), r"plugin 'NoHooks' .*lacks hooks \['tritonplug_backend_info', .*hookimpl"),
    (WrongSignature(), r"plugin 'WrongSignature' does not match the tritonplug hook specs: .*extra"),
    (InfoRaises(), r"plugin 'InfoRaises' raised in tritonplug_backend_info: OSError: cannot read the device list"),
    (InfoWrongType(), r"plugin 'InfoWrongType': tritonplug_backend_info returned .*not a BackendInfo"),
    (NoPlatforms(), r"plugin 'NoPlatforms': its BackendInfo needs a name and a tuple of platform names"),
    (UnknownHook(), r"plugin 'UnknownHook' implements unknown hooks \['tritonplug_compile_fast'\]"),
], ids=["no_hooks", "wrong_signature", "info_raises", "info_wrong_type", "no_platforms", "unknown_hook"])
def test_register_plugin_rejects_a_broken_object_and_leaves_the_host_unchanged(plugin: object, match: str) -> None:
    host = state.host()
    before = (list(tritonplug.backends()), list(host.manager.get_plugins()))
    with pytest.raises(PluginError, match=match):
        tritonplug.register_plugin(plugin, name=type(plugin).__name__)
    assert (list(tritonplug.backends()), list(host.manager.get_plugins())) == before


def test_register_plugin_rejects_a_second_backend_of_the_same_name() -> None:
    if not tritonplug.backends():
        pytest.skip("no backend is installed to collide with")
    taken = tritonplug.backends()[0].name
    plugin = type("Clash", (Hooks,), {"name": taken})()
    before = list(state.host().manager.get_plugins())
    with pytest.raises(PluginError, match=f"a backend named '{taken}' is already loaded"):
        tritonplug.register_plugin(plugin)
    assert list(state.host().manager.get_plugins()) == before


def test_fresh_host_accepts_a_valid_plugin_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONPLUG_BACKENDS", raising=False)
    host = Host()
    backend = host.register(Hooks(), name="fill")
    assert backend is not None and backend.name == "runtime_fill" and host.backend_for("cpu") is backend
    assert backend.detect_target("cuda", None, {}) is None
    with pytest.raises(PluginError, match="'fill' is already registered"):
        host.register(backend.plugin, name="fill")


REGISTER = r"""
import json, os
import numpy as np
import jax
import jax.numpy as jnp
import tritonplug
from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, HostKernel, Options, Target
from kernels import add_kernel

def add(x):
    return tritonplug.triton_call(x, x, x.size, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=1, BLOCK=tritonplug.next_power_of_2(x.size))

class Fill:
    def __init__(self, name, value):
        self.name, self.value, self.runs = name, value, 0

    @hookimpl
    def tritonplug_backend_info(self):
        return BackendInfo(self.name, ("cpu",), "1.0", ir_stages=(), cache_binaries=False, compile_in_worker=False,
                           autotune="first")

    @hookimpl
    def tritonplug_detect_target(self, platform, device, requested):
        return Target(self.name, platform, "host", 1, None)

    @hookimpl
    def tritonplug_parse_options(self, target, call_options):
        return Options.from_mapping({k: v for k, v in call_options.items() if v is not None})

    @hookimpl
    def tritonplug_compile(self, job):
        return Binary(job.kernel_name, "fill")

    @hookimpl
    def tritonplug_make_kernel(self, target, binary, launch):
        def run(operands, results):
            self.runs += 1
            results[0][...] = self.value
        return HostKernel(launch.kernel_name, run, launch)

report = {}
plugin = Fill("runtime_fill", 3.0)
report["info"] = tritonplug.register_plugin(plugin).name
report["listed"] = [b.name for b in tritonplug.backends()]
os.environ["TRITONPLUG_BACKENDS"] = "cpu:runtime_fill"
report["result"] = np.asarray(add(jnp.ones(8, jnp.float32))).tolist()
report["runs"] = plugin.runs
for again in (plugin, Fill("runtime_fill", 4.0)):
    try:
        tritonplug.register_plugin(again)
    except tritonplug.PluginError as exc:
        report.setdefault("errors", []).append(str(exc))
print("REPORT " + json.dumps(report))
"""


def test_register_plugin_at_run_time_serves_a_call() -> None:
    report = run_python(REGISTER, env={"TRITONPLUG_DISABLE_PLUGINS": "example"})
    assert report["info"] == "runtime_fill" and "runtime_fill" in report["listed"]
    assert report["result"] == [3.0] * 8 and report["runs"] == 1
    already, clash = report["errors"]
    assert "is already registered" in already
    assert "a backend named 'runtime_fill' is already loaded (register_plugin)" in clash


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
                          text=True, env=_environment(None, {"TRITONPLUG_BACKENDS": "cpu:example"}),
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
