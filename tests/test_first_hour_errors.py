"""What a new user meets in the first hour, each said plainly (issue 23): the command line's errors and
help, a dangling cache symlink, a damaged tuning record, hints that name real packages, and a worker pool
that never starts more workers than jobs."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tritonplug.cache.disk import DiskCache
from tritonplug.cache.files import CacheDirError


def cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONPLUG_")}
    env.update(JAX_PLATFORMS="cpu", TRITONPLUG_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "tritonplug", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_prune_with_a_negative_size_is_an_error_of_the_prune_command(tmp_path: Path) -> None:
    done = cli("cache", "prune", "--max-bytes", "-5", cache=tmp_path / "c")
    assert done.returncode == 2
    assert "usage: tritonplug cache prune" in done.stderr
    assert "argument --max-bytes: must be 0 or more, got -5" in done.stderr


def test_tune_help_describes_the_records(tmp_path: Path) -> None:
    done = cli("tune", "--help", cache=tmp_path / "c")
    assert done.returncode == 0 and "The tuning records of the cache directory" in done.stdout


def test_a_dangling_symlink_cache_directory_is_named_as_such(tmp_path: Path) -> None:
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(CacheDirError, match=r"is a symbolic link to .*gone, which does not exist"):
        DiskCache(link)
    done = cli("cache", "stats", cache=link)
    assert done.returncode == 1 and "which does not exist" in done.stderr and "Errno 17" not in done.stderr


def test_a_damaged_tuning_record_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonplug.records import Binary
    from tritonplug.tuning.store import TuningStore

    monkeypatch.setenv("TRITONPLUG_CACHE_DIR", str(tmp_path))
    store = TuningStore()
    key = "ab" * 32
    assert store.disk is not None and store.disk.put(key, Binary("k", "tuning", {"record.json": b"{}"}, {}))
    entry = next((tmp_path / "tuning" / "entries").rglob("*.bin"))
    entry.write_bytes(entry.read_bytes()[:40])  # truncated
    with pytest.warns(RuntimeWarning, match=r"removed a damaged tuning record"):
        assert store.lookup(key) is None


def test_the_remote_cache_hint_names_no_package_that_is_not_on_pypi() -> None:
    from tritonplug.cache.plugins import CachePlugins

    plugins = CachePlugins()
    with pytest.raises(ValueError) as redis:
        plugins.for_url("redis://localhost:6379/0")
    assert "pip install ./plugins/redis" in str(redis.value) and "pip install tritonplug-redis" not in str(redis.value)
    with pytest.raises(ValueError) as bogus:
        plugins.for_url("bogus://host/x")
    assert "tritonplug-bogus" not in str(bogus.value) and "tritonplug.caches" in str(bogus.value)


def test_the_pool_starts_no_more_workers_than_jobs_and_warns_above_the_cores(monkeypatch) -> None:
    from tritonplug.compile.workers import Task, pool_from_env

    monkeypatch.setenv("TRITONPLUG_COMPILE_WORKERS", str((os.cpu_count() or 1) + 6))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pool = pool_from_env()
    assert any("more than the" in str(w.message) for w in caught)
    pool.preload = ()
    try:
        assert pool.run([Task(os.getpid, ()), Task(os.getpid, ())]) and len(pool.worker_pids()) <= 2
    finally:
        pool.shutdown()


def test_a_scalar_one_place_early_on_a_pointer_parameter_says_where_the_output_went(tmp_path: Path) -> None:
    """``copy(x_ptr, out_ptr, n)`` called as ``triton_call(x, 16, ...)``: 16 lands on ``out_ptr`` and the output
    on ``n``; Triton fails at a line that uses ``n``. The error says which parameter got which output, and how
    to pass the scalar by keyword."""
    import jax
    import jax.numpy as jnp

    import tritonplug
    from tritonplug.errors import KernelSourceError

    source = tmp_path / "copy_kernels.py"
    source.write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                      "def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n"
                      "    m = offs < n\n    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)\n")
    kernel = tritonplug.kernels_from_file(source).copy_kernel
    x = jnp.ones(16)
    with pytest.raises(KernelSourceError, match=r"the scalar 16 was bound to parameter 'out_ptr'.*output 0 filled "
                                                r"parameter 'n'.*pass the scalars after it by keyword, e\.g\. n=16"):
        tritonplug.triton_call(x, 16, kernel=kernel, out_type=jax.typeof(x), grid=(1,), BLOCK=16)
