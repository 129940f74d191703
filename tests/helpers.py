"""Helpers the test modules import: which backends are installed, which devices are visible, and
marks that skip (with a reason) what this environment cannot run. Fixtures live in conftest.py."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: The repository's root directory.
ROOT = Path(__file__).resolve().parent.parent


def load_bench(script: str):
    """``bench/<script>.py`` loaded by path (bench/ is no package; its scripts put bench/ on ``sys.path``)."""
    spec = importlib.util.spec_from_file_location(script, ROOT / "bench" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installed_backends() -> set[str]:
    return {ep.name for ep in importlib.metadata.entry_points(group="tritonplug.backends")}


def gpu_platforms() -> list[str]:
    import jax

    found = []
    for platform in ("cuda", "rocm"):
        try:
            if jax.devices(platform):
                found.append(platform)
        except RuntimeError:
            pass
    return found


#: How a test that needs a tritonplug backend says so: the start of its skip reason, which ``backends_required``
#: reads back (``test_env_coverage.py`` checks with it that some tox env installs what every test needs).
BACKEND_REASON = "needs the tritonplug backend"


def requires_backend(*names: str) -> pytest.MarkDecorator:
    """Skip unless one of the backends ``names`` (entry points of ``tritonplug.backends``) is installed."""
    from tox_envs import envs_installing

    envs = envs_installing(*names)
    return pytest.mark.skipif(not set(names) & installed_backends(),
                              reason=f"{BACKEND_REASON} {' or '.join(names)}, not installed in this environment "
                                     f"(tox envs that install {'it' if len(names) == 1 else 'one'}: "
                                     f"{', '.join(envs) or 'none'})")


def backends_required(reason: str) -> frozenset[str] | None:
    """The backends a ``requires_backend`` skip reason names (one of them is needed), or None for another reason."""
    found = re.match(rf"{BACKEND_REASON} ([\w-]+(?: or [\w-]+)*),", reason)
    return frozenset(found.group(1).split(" or ")) if found else None


def for_backend(name: str):
    """Mark a test as exercising backend ``name`` (tox selects by marker) and skip it where not installed."""
    def apply(test):
        return getattr(pytest.mark, name)(requires_backend(name)(test))
    return apply


requires_cuda_device = pytest.mark.skipif(
    "cuda" not in os.environ.get("TRITONPLUG_TEST_PLATFORMS", "cuda") or not any(p == "cuda" for p in gpu_platforms()),
    reason="no CUDA device is visible")


def execution_platforms() -> list:
    """Platforms numeric tests run on: the interpreter on CPU, and each visible GPU."""
    params = [pytest.param("cpu", marks=requires_backend("interpret"))]
    params.append(pytest.param("cuda", marks=[pytest.mark.cuda, requires_backend("cuda"), requires_cuda_device]))
    return params


def cpu_devices_env(count: int | None, **variables: str) -> dict[str, str]:
    """This process's environment for a child Python on ``count`` CPU devices (``None``: JAX's default, one),
    with ``tests/`` importable and ``variables`` set. XLA reads the device count from ``XLA_FLAGS`` only when
    it starts, hence the child; the other XLA flags of this run (tox.ini's) are kept."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    if count is not None:
        flags.append(f"{DEVICE_COUNT_FLAG}={count}")
    env = {**os.environ, "XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    env.update(variables)
    return env


DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def case_ran(report: dict, name: str) -> dict:
    """One case of a child suite's report (``{"ok": ..., "error": ..., "trace": ...}``), asserted to have run."""
    entry = report[name]
    assert entry["ok"], f"{entry.get('error')}\n{entry.get('trace')}"
    return entry


def run_exported(script: str, exported_path: Path) -> list[str]:
    """Run ``script`` (which deserialises and calls ``sys.argv[1]``) in a fresh CPU-only Python that cannot
    import this checkout (no PYTHONPATH, another working directory); its printed words."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run([sys.executable, "-c", script, str(exported_path)], capture_output=True, text=True,
                          env=env, cwd=exported_path.parent, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def run_sharding_suite(script: str, mode: str, *args: str) -> dict:
    """``tests/<script> mode *args`` in a child on 8 CPU devices: its last ``REPORT {json}`` line, checked to come
    from 8 devices in ``mode``. Checked mode is off there: its debug callback crashes XLA:CPU inside a partitioned
    body (jax 0.10.2; docs/partitioned.md)."""
    env = cpu_devices_env(8, TRITONPLUG_INTERPRET_CHECK="0")
    done = subprocess.run([sys.executable, str(ROOT / "tests" / script), mode, *args], capture_output=True,
                          text=True, timeout=900, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, f"suite failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    report = json.loads(lines[-1].removeprefix("REPORT "))
    assert report["devices"] == 8 and report["mode"] == mode
    return report
