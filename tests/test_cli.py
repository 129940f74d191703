"""``tritonplug info`` and ``tritonplug cache ...``, run as real subprocesses against a temporary cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from helpers import installed_backends, requires_backend

import tritonplug
from tritonplug.cache.disk import DiskCache

SCRIPT = shutil.which("tritonplug", path=os.path.dirname(sys.executable)) or shutil.which("tritonplug")


def run(*args: str, cache_dir: Path, script: bool = False, **env: str) -> subprocess.CompletedProcess:
    """``python -m tritonplug ARGS``, or the ``tritonplug`` console script when ``script``."""
    if script and SCRIPT is None:
        pytest.fail("the tritonplug console script is not installed beside this Python")
    command = [SCRIPT] if script else [sys.executable, "-m", "tritonplug"]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TRITONPLUG_")}
    environment.update(JAX_PLATFORMS="cpu", TRITONPLUG_CACHE_DIR=str(cache_dir), **env)
    return subprocess.run([*command, *args], env=environment, capture_output=True, text=True, timeout=120)


def run_json(*args: str, cache_dir: Path, **kwargs) -> dict:
    done = run(*args, "--json", cache_dir=cache_dir, **kwargs)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def filled_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_state) -> Path:
    """A cache directory holding the binaries of two real lowerings (two entries)."""
    from kernels import add_kernel

    directory = tmp_path / "cache"
    monkeypatch.setenv("TRITONPLUG_CACHE_DIR", str(directory))
    fresh_state.reset()
    x = jax.ShapeDtypeStruct((512,), jnp.float32)
    try:
        for block in (128, 256):
            def f(x, y, block=block):
                return tritonplug.triton_call(x, y, 512, kernel=add_kernel, out_shape=x, grid=(512 // block,),
                                              BLOCK=block, compute_capability=90)
            jax.jit(f).trace(x, x).lower(lowering_platforms=("cuda",))
    finally:
        monkeypatch.undo()
        fresh_state.reset()
    assert DiskCache(directory).stats().entries == 2
    return directory


@pytest.mark.cuda
@requires_backend("cuda")
def test_cache_stats_prune_and_clear(filled_cache: Path, tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    shutil.copytree(filled_cache, backup)
    size = sum(p.stat().st_size for p in filled_cache.glob("entries/*/*.bin"))

    stats = run_json("cache", "stats", cache_dir=filled_cache)
    assert stats == {"directory": str(filled_cache), "entries": 2, "total_bytes": size, "max_bytes": 1 << 30}
    text = run("cache", "stats", cache_dir=filled_cache, script=True)
    assert text.returncode == 0, text.stderr
    assert f"directory: {filled_cache}\nentries: 2\ntotal_bytes: {size}\n" in text.stdout

    kept = run_json("cache", "prune", cache_dir=filled_cache)  # to the bound, 1 GiB: nothing to do
    assert (kept["removed_entries"], kept["entries"]) == (0, 2)
    one = run_json("cache", "prune", "--max-bytes", str(size - 1), cache_dir=filled_cache, script=True)
    assert (one["removed_entries"], one["entries"]) == (1, 1) and one["total_bytes"] <= size - 1
    none = run_json("--json", "cache", "prune", "--max-bytes", "0", cache_dir=filled_cache)  # --json first works too
    assert (none["removed_entries"], none["entries"], none["total_bytes"]) == (1, 0, 0)

    shutil.rmtree(filled_cache)
    shutil.copytree(backup, filled_cache)
    cleared = run("cache", "clear", cache_dir=filled_cache, script=True)
    assert cleared.returncode == 0, cleared.stderr
    assert "removed_entries: 2\n" in cleared.stdout and "entries: 0\n" in cleared.stdout
    assert list(filled_cache.glob("entries/*/*.bin")) == []


def test_cache_commands_report_a_disabled_cache_and_bad_arguments(tmp_path: Path) -> None:
    disabled = run("cache", "stats", cache_dir=tmp_path / "cache", TRITONPLUG_CACHE="0")
    assert disabled.returncode == 1 and "disabled" in disabled.stdout
    negative = run("cache", "prune", "--max-bytes", "-1", cache_dir=tmp_path / "cache", script=True)
    assert negative.returncode == 2 and "argument --max-bytes: must be 0 or more, got -1" in negative.stderr
    assert "usage: tritonplug cache prune" in negative.stderr


def test_info_reports_versions_backends_targets_cache_and_workers(tmp_path: Path) -> None:
    import jaxlib
    import triton

    cache_dir = tmp_path / "cache"
    report = run_json("info", cache_dir=cache_dir, TRITONPLUG_COMPILE_WORKERS="3", TRITONPLUG_CUDA_ARCH="90",
                      TRITONPLUG_CACHE_MAX_BYTE="5")
    assert report["versions"]["triton"] == triton.__version__
    assert report["versions"]["jax"] == jax.__version__ and report["versions"]["jaxlib"] == jaxlib.__version__
    # each version and whether CI tested it (tritonplug/version.py)
    assert report["tested"]["triton"].startswith(f"{triton.__version__}: ")
    assert set(report["tested"]) == {"python", "jax", "jaxlib", "triton"}
    assert set(report["backends"]) == installed_backends()
    if "cuda" in installed_backends():
        assert report["backends"]["cuda"]["platforms"] == "cuda"
        assert report["backends"]["cuda"]["target[cuda]"] == "cuda:90"
    if "interpret" in installed_backends():
        assert report["backends"]["interpret"]["platforms"] == "cpu"
    assert report["cache"] == {"directory": str(cache_dir), "entries": 0, "total_bytes": 0, "max_bytes": 1 << 30}
    assert report["compile workers"] == 3
    # every setting in effect, from tritonplug/settings.py: its value and whether it was set or is the default
    assert report["settings"]["TRITONPLUG_COMPILE_WORKERS"] == "3 (set)"
    assert report["settings"]["TRITONPLUG_CACHE_DIR"] == f"{cache_dir} (set)"
    assert report["settings"]["TRITONPLUG_CACHE"] == "on (default)"
    assert report["settings"]["TRITONPLUG_CACHE_MAX_BYTES"] == f"{1 << 30} (default)"
    # a typo is shown, not ignored; so is a backend's setting when that backend is not installed (its owner declares it)
    typos = ["TRITONPLUG_CACHE_MAX_BYTE"] + ([] if "cuda" in installed_backends() else ["TRITONPLUG_CUDA_ARCH"])
    assert report["undeclared variables"] == ", ".join(sorted(typos))

    text = run("info", cache_dir=cache_dir, script=True)
    assert text.returncode == 0, text.stderr
    workers = min(os.cpu_count() or 1, 8)
    for line in (f"  triton: {triton.__version__}", f"  directory: {cache_dir}", f"compile workers: {workers}"):
        assert line in text.stdout.splitlines(), (line, text.stdout)


def test_info_lists_invalid_settings_under_problems(tmp_path: Path) -> None:
    report = run_json("info", cache_dir=tmp_path / "cache", TRITONPLUG_COMPILE_WORKERS="two",
                      TRITONPLUG_COMPILE_TIMEOUT="-1")
    problems = report["problems"]
    assert isinstance(problems, list), problems
    assert any("TRITONPLUG_COMPILE_WORKERS" in p and "'two'" in p for p in problems), problems
    assert any("TRITONPLUG_COMPILE_TIMEOUT" in p for p in problems), problems


def test_info_says_whether_cache_entries_are_signed_and_by_which_key(tmp_path: Path) -> None:
    from tritonplug.cache.signing import fingerprint

    assert run_json("info", cache_dir=tmp_path / "cache")["cache entries"].startswith("unsigned")
    key = tmp_path / "fleet.key"
    key.write_bytes(b"a fleet key of the test's own, 42 bytes...")
    key.chmod(0o600)
    text = run("info", cache_dir=tmp_path / "cache", TRITONPLUG_FLEET_KEY=str(key)).stdout
    assert f"signed with the fleet key {fingerprint(key.read_bytes())}" in text and "fleet key of the" not in text


def test_tune_export_into_a_missing_folder_names_it(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "tuning.json"
    done = run("tune", "export", str(target), cache_dir=tmp_path / "cache")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"the folder {target.parent} does not exist" in done.stderr and not target.exists()
