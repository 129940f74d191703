"""The compile service's disk cache end to end: real lowerings of real kernels for sm_90, on a machine
without a GPU. Several processes, pytest-xdist, damage, bounds, keys, and the counters and logs that
show what happened. Each test lowers kernels generated into a temporary module with a random constant
(``compile_service_support.py``), so their cache keys are new. The workers: ``test_compile_service_workers.py``.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest
from compile_service_support import (
    LOWER_SCRIPT,
    Counters,
    compile_service_fixtures,
    entry_files,
    load,
    ptx_of,
    subprocess_env,
    write_kernels,
)
from helpers import requires_backend

import tritonplug
from tritonplug.cache.disk import DiskCache
from tritonplug.process.state import state

pytestmark = [pytest.mark.cuda, requires_backend("cuda")]
_ptx_in_payloads, new_kernels = compile_service_fixtures()


@pytest.fixture(autouse=True)
def compiles_at_lowering(monkeypatch):
    """These tests count each tier's hits per lowering; where JAX's default platform is cuda (a GPU machine) an
    early compile at trace time would turn the lowering's compile into a memory hit. Early compiles have their
    own tests (test_startup.py)."""
    monkeypatch.setenv("TRITONPLUG_EARLY_COMPILE", "0")


# --- the disk cache, several processes ------------------------------------------------------------

def test_processes_started_together_compile_once_and_a_new_process_reads_the_cache(tmp_path):
    module = write_kernels(tmp_path)
    script = tmp_path / "lower.py"
    script.write_text(LOWER_SCRIPT)
    cache_dir, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    env = subprocess_env(cache_dir)
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), module, str(barrier)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        deadline = time.monotonic() + 120
        while len(list(barrier.glob("ready-*"))) < 3 and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        (barrier / "go").touch()
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    stats = [json.loads(out.splitlines()[-1])["stats"] for out, _ in outputs]
    logs = "".join(err for _, err in outputs)
    assert sum(s["compiled"] for s in stats) == 1, stats
    assert sum(s["disk_hits"] for s in stats) == 2, stats
    assert [s["compile_seconds"] > 0 for s in stats].count(True) == 1
    assert logs.count("compiled kernel 'scale_kernel' [default] for cuda:90") == 1, logs
    assert logs.count("disk cache hit for kernel 'scale_kernel' [default]") == 2, logs
    assert DiskCache(cache_dir).stats().entries == 1

    done = subprocess.run([sys.executable, str(script), str(tmp_path), module], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.splitlines()[-1])["stats"]
    assert stats["compiled"] == 0 and stats["disk_hits"] == 1 and stats["compile_seconds"] == 0
    assert "disk cache hit for kernel 'scale_kernel'" in done.stderr
    assert "started compile worker" not in done.stderr, "a warm cache must not start compile workers"


def test_pytest_xdist_workers_share_one_cache(tmp_path):
    module = write_kernels(tmp_path)
    (tmp_path / "test_shared_cache.py").write_text(f'''\
import json, os
from pathlib import Path

import {module} as kernels
import tritonplug


def record(name):
    kernels.lower_scale()
    report = {{"worker": os.environ["PYTEST_XDIST_WORKER"], "cache": os.environ["TRITONPLUG_CACHE_DIR"],
              "stats": tritonplug.compile_stats()}}
    Path(os.environ["REPORTS"], name + ".json").write_text(json.dumps(report))


class TestOne:
    def test_one(self):
        record("one")


class TestTwo:
    def test_two(self):
        record("two")
''')
    reports, basetemp = tmp_path / "reports", tmp_path / "basetemp"
    reports.mkdir()
    env = subprocess_env(tmp_path / "unused", REPORTS=str(reports))
    del env["TRITONPLUG_CACHE_DIR"]  # tests/conftest.py picks the directory, as in a CI run
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), str(tmp_path), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadscope", "-p", "conftest",
                           "-p", "no:cacheprovider", f"--basetemp={basetemp}", str(tmp_path / "test_shared_cache.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    one, two = (json.loads((reports / f"{n}.json").read_text()) for n in ("one", "two"))
    assert {one["worker"], two["worker"]} == {"gw0", "gw1"}
    assert one["cache"] == two["cache"] == str(basetemp / "tritonplug-cache")
    assert one["stats"]["compiled"] + two["stats"]["compiled"] == 1
    assert one["stats"]["disk_hits"] + two["stats"]["disk_hits"] == 1
    assert DiskCache(basetemp / "tritonplug-cache").stats().entries == 1


# --- the disk cache through the lowering path -----------------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "flipped byte"])
def test_a_damaged_entry_is_recompiled_and_rewritten(private_cache, new_kernels, damage):
    kernels, counters = new_kernels(), Counters()
    kernels.lower_scale()
    (entry,) = entry_files(private_cache)
    good = entry.read_bytes()
    if damage == "truncated":
        entry.write_bytes(good[: len(good) // 2])
    else:
        entry.write_bytes(good[:100] + bytes([good[100] ^ 0x01]) + good[101:])
    state.reset()
    assert ".target sm_90" in ptx_of(kernels.lower_scale())[0]
    assert counters() == {"compiled": 2, "disk_hits": 0, "memory_hits": 0}
    assert entry.read_bytes() == good, "the recompiled entry was not rewritten (builds are deterministic)"
    state.reset()
    kernels.lower_scale()
    assert counters() == {"compiled": 2, "disk_hits": 1, "memory_hits": 0}


def test_an_orphaned_temp_file_is_ignored_then_removed(private_cache, new_kernels):
    first, second, counters = new_kernels(), new_kernels(), Counters()
    first.lower_scale()
    (entry,) = entry_files(private_cache)
    orphan = entry.with_name(f".{entry.stem}.99999.deadbeef.tmp")
    orphan.write_bytes(entry.read_bytes()[:50])
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    state.reset()
    first.lower_scale()
    assert counters() == {"compiled": 1, "disk_hits": 1, "memory_hits": 0}
    assert orphan.exists(), "a get does not scan"
    second.lower_scale()  # the first put of a cache handle scans the cache and sweeps stale temp files
    assert not orphan.exists()
    assert counters["compiled"] == 2 and len(entry_files(private_cache)) == 2


def without_file_permission_override(fn):
    """Run ``fn`` in a thread whose effective capabilities lack CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH.

    Root writes into a ``chmod 0500`` directory regardless; capabilities are per thread on Linux, so a
    thread can give these up for good and leave the rest of the process as it was.
    """
    outcome: dict = {}

    def target() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
            data = (ctypes.c_uint32 * 6)()  # {effective, permitted, inheritable} x 2 words
            if libc.capget(header, data) != 0:
                raise OSError(ctypes.get_errno(), "capget failed")
            data[0] &= ~((1 << 1) | (1 << 2))
            if libc.capset(header, data) != 0:
                raise OSError(ctypes.get_errno(), "capset failed")
            outcome["value"] = fn()
        except BaseException as exc:
            outcome["error"] = exc
    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_a_read_only_cache_still_serves_hits_and_lowers_with_one_warning(private_cache, new_kernels):
    cached, fresh, counters = new_kernels(), new_kernels(), Counters()
    cached.lower_scale()
    for path in [private_cache, *private_cache.rglob("*")]:
        if path.is_dir():
            path.chmod(0o500)

    def lower_both() -> list:
        state.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cached.lower_scale()
            fresh.lower_scale()
            fresh.lower_scale(block=64)
        return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]

    try:
        if os.access(private_cache, os.W_OK):  # root
            if not sys.platform.startswith("linux"):
                pytest.skip("this user writes into read-only directories")
            messages = without_file_permission_override(lower_both)
        else:
            messages = lower_both()
    finally:
        for path in [private_cache, *private_cache.rglob("*")]:
            if path.is_dir():
                path.chmod(0o700)
    assert len(messages) == 1 and str(private_cache) in messages[0], messages
    assert counters() == {"compiled": 3, "disk_hits": 1, "memory_hits": 0}
    assert len(entry_files(private_cache)) == 1


def test_the_size_bound_evicts_the_least_recently_used_entry(private_cache, new_kernels, monkeypatch):
    first, second, counters = new_kernels(), new_kernels(), Counters()
    first.lower_scale()
    (entry,) = entry_files(private_cache)
    bound = entry.stat().st_size * 3 // 2
    monkeypatch.setenv("TRITONPLUG_CACHE_MAX_BYTES", str(bound))
    state.reset()
    second.lower_scale()
    stats = DiskCache(private_cache, bound).stats()
    assert stats.entries == 1 and stats.total_bytes <= bound
    assert not entry.exists(), "the older entry should have been evicted"
    state.reset()
    second.lower_scale()
    first.lower_scale()
    assert counters() == {"compiled": 3, "disk_hits": 1, "memory_hits": 0}
    monkeypatch.setenv("TRITONPLUG_CACHE_MAX_BYTES", "100")  # smaller than any entry: nothing is stored
    state.reset()
    new_kernels().lower_scale()
    assert counters["compiled"] == 4 and DiskCache(private_cache).stats().entries == 1


# --- cache keys -----------------------------------------------------------------------------------

def test_the_key_follows_the_source_of_called_jit_helpers(tmp_path):
    salt = int.from_bytes(os.urandom(3), "big") / 1024
    name = f"helpers_{uuid.uuid4().hex[:12]}"
    versions = [load(tmp_path / d, write_kernels(tmp_path / d, name, factor=f, salt=salt))
                for d, f in (("v1", 2.0), ("v2", 3.0), ("v1-again", 2.0))]
    assert (tmp_path / "v1" / f"{name}.py").read_text() != (tmp_path / "v2" / f"{name}.py").read_text()
    counters = Counters()
    versions[0].lower_scale()
    versions[1].lower_scale()
    assert counters() == {"compiled": 2, "disk_hits": 0, "memory_hits": 0}, "changing the helper kept the key"
    versions[2].lower_scale()
    assert counters() == {"compiled": 2, "disk_hits": 0, "memory_hits": 1}, "an identical module got a new key"


def test_the_key_follows_options_constexprs_and_target(new_kernels):
    kernels, counters = new_kernels(), Counters()
    base = kernels.lower_scale()
    assert counters["compiled"] == 1
    changed = [kernels.lower_scale(num_warps=8), kernels.lower_scale(block=64),
               kernels.lower_scale(compute_capability=80)]
    assert counters() == {"compiled": 4, "disk_hits": 0, "memory_hits": 0}
    assert ".target sm_80" in ptx_of(changed[2])[0] and ".target sm_90" in ptx_of(base)[0]
    kernels.lower_scale()
    assert counters() == {"compiled": 4, "disk_hits": 0, "memory_hits": 1}


# --- observability --------------------------------------------------------------------------------

def test_compile_and_cache_events_are_logged(private_cache, new_kernels, caplog):
    kernels = new_kernels()
    with caplog.at_level(logging.INFO, logger="tritonplug"):
        kernels.lower_scale()
        kernels.lower_scale()
        state.reset()
        kernels.lower_scale()
    messages = [r.getMessage() for r in caplog.records]
    for expected in ("compiled kernel 'scale_kernel' [default] for cuda:90", "cached kernel 'scale_kernel'",
                     "memory cache hit for kernel 'scale_kernel'", "disk cache hit for kernel 'scale_kernel'"):
        assert sum(expected in m for m in messages) == 1, (expected, messages)
    stats = tritonplug.compile_stats()
    assert {"compiled", "disk_hits", "memory_hits", "compile_seconds"} <= set(stats)
    assert stats["compile_seconds"] > 0
