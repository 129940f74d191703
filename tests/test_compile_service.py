"""The compile service end to end: real lowerings of real kernels for sm_90, on a machine without a GPU.

Workers (parallel configurations, crashes, timeouts), the disk cache (several processes, damage,
bounds, keys, pytest-xdist) and the counters and logs that show what happened. Each test lowers
kernels generated into a temporary module with a random constant, so their cache keys are new.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest
from helpers import requires_backend

import tritonplug
from tritonplug import workers
from tritonplug.cache import DiskCache
from tritonplug.errors import TritonplugError, WorkerError
from tritonplug.inspection import kernel_calls
from tritonplug.state import state

pytestmark = [pytest.mark.cuda, requires_backend("cuda")]

KERNELS = '''\
import jax
import jax.numpy as jnp
import triton
import triton.language as tl

import tritonplug

@triton.jit
def helper(x):
    return x * {factor}


@triton.jit
def scale_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, helper(tl.load(x_ptr + offs, mask=mask)) + {salt!r}, mask=mask)


@triton.autotune(configs=[triton.Config({{"BLOCK": 32}}, num_warps=4), triton.Config({{"BLOCK": 64}}, num_warps=4)],
                 key=[])
@triton.jit
def tuned_dot_kernel(a_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, N, BLOCK):
        a = tl.load(a_ptr + rows[:, None] * N + (k + cols)[None, :])
        b = tl.load(a_ptr + (k + cols)[:, None] * N + cols[None, :])
        acc += tl.dot(a, b)
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], (acc + {salt!r}).to(tl.float16))


def lower_scale(block=128, compute_capability=90, **options):
    x = jax.ShapeDtypeStruct((1024,), jnp.float32)

    def f(x):
        return tritonplug.triton_call(x, 1024, kernel=scale_kernel, out_shape=x, grid=lambda m: (1024 // m["BLOCK"],),
                                      BLOCK=block, compute_capability=compute_capability, **options)
    return jax.jit(f).trace(x).lower(lowering_platforms=("cuda",)).as_text()


def lower_tuned_dot():
    a = jax.ShapeDtypeStruct((128, 128), jnp.float16)

    def f(a):
        return tritonplug.triton_call(a, kernel=tuned_dot_kernel, out_shape=a, grid=lambda m: (128 // m["BLOCK"],),
                                      N=128, compute_capability=90)
    return jax.jit(f).trace(a).lower(lowering_platforms=("cuda",)).as_text()
'''

# Runs in a fresh process: lower scale_kernel of the module named on the command line, optionally
# after a start barrier (so several processes lower at once), and print the counters as JSON.
LOWER_SCRIPT = '''\
import json, os, sys, time
from pathlib import Path

module_dir, module_name, barrier = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, module_dir)
kernels = __import__(module_name)
import tritonplug
if barrier:
    Path(barrier[0], f"ready-{os.getpid()}").touch()
    while not Path(barrier[0], "go").exists():
        time.sleep(0.005)
start = time.perf_counter()
kernels.lower_scale()
print(json.dumps({"stats": tritonplug.compile_stats(), "seconds": time.perf_counter() - start}))
'''


@pytest.fixture(autouse=True)
def _ptx_in_payloads(monkeypatch):
    """Send PTX (not Triton's cubin, with which jaxlib 0.11+ payloads carry a tag instead): ``ptx_of`` reads it."""
    monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")


def ptx_of(text: str) -> list[str]:
    """The PTX of every kernel (every configuration of an autotuned one) in a lowered program."""
    found = []
    for call in kernel_calls(text):
        configs = call["autotuned_kernel_call"]["configs"] if "autotuned_kernel_call" in call else [call]
        found.extend(config["kernel_call"]["kernel"]["ptx"] for config in configs)
    return found


def write_kernels(directory: Path, name: str = "", factor: float = 2.0, salt: float | None = None) -> str:
    """Write a kernel module (new cache keys, thanks to a random constant); returns its module name."""
    directory.mkdir(parents=True, exist_ok=True)
    name = name or f"kernels_{uuid.uuid4().hex[:12]}"
    salt = salt if salt is not None else int.from_bytes(os.urandom(3), "big") / 1024
    (directory / f"{name}.py").write_text(KERNELS.format(salt=salt, factor=factor))
    return name


def load(directory: Path, name: str):
    """Import ``directory/name.py`` as a module named ``name`` (two versions may share the name)."""
    spec = importlib.util.spec_from_file_location(name, directory / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def new_kernels(tmp_path: Path):
    """A factory of freshly generated kernel modules."""
    counter = iter(range(1000))

    def make(**kwargs):
        directory = tmp_path / f"kernels{next(counter)}"
        return load(directory, write_kernels(directory, **kwargs))
    return make


class Counters:
    """``compile_stats()`` since the counter was made."""

    def __init__(self) -> None:
        self.start = tritonplug.compile_stats()

    def __getitem__(self, name: str) -> float:
        return tritonplug.compile_stats()[name] - self.start[name]

    def __call__(self) -> dict[str, float]:
        return {k: self[k] for k in ("compiled", "disk_hits", "memory_hits")}


def subprocess_env(cache_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITONPLUG_", "PYTEST_"))}
    env.update(JAX_PLATFORMS="cpu", TRITONPLUG_CACHE_DIR=str(cache_dir), TRITONPLUG_LOG="info", **extra)
    return env


def lower_in_thread(lower) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["text"] = lower()
        except BaseException as exc:
            outcome["error"] = exc
    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def kill_busy_workers(thread: threading.Thread, limit: int | None = None) -> list[int]:
    """SIGKILL each worker seen compiling while ``thread`` lowers (``limit`` of them at most); returns the pids."""
    pool, killed = state.pool(), []
    while thread.is_alive() and (limit is None or len(killed) < limit):
        for pid in pool.busy_worker_pids()[:None if limit is None else limit - len(killed)]:
            if pid not in killed:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.002)
    thread.join(120)
    return killed


# --- workers --------------------------------------------------------------------------------------

def test_configurations_compile_at_once_and_the_pool_stays_warm(new_kernels):
    pool = state.pool()
    if pool.size < 2:
        pytest.skip("needs at least two compile workers")
    kernels, counters = new_kernels(), Counters()
    thread, outcome = lower_in_thread(kernels.lower_tuned_dot)
    most_busy = 0
    while thread.is_alive():
        most_busy = max(most_busy, len(pool.busy_worker_pids()))
        time.sleep(0.002)
    thread.join()
    assert "text" in outcome, outcome.get("error")
    assert counters["compiled"] == 2
    assert most_busy == 2, "the two configurations of one autotuned kernel did not compile at the same time"
    warm = pool.worker_pids()
    assert len(warm) == pool.size == workers.pool_size()
    new_kernels().lower_scale()
    assert counters["compiled"] == 3
    assert pool.worker_pids() == warm, "the second lowering did not reuse the warm workers"


def test_a_worker_killed_mid_compile_is_replaced_and_the_job_retried(new_kernels, caplog):
    kernels, counters = new_kernels(), Counters()
    with caplog.at_level(logging.WARNING, logger="tritonplug.workers"):
        thread, outcome = lower_in_thread(kernels.lower_tuned_dot)
        killed = kill_busy_workers(thread, limit=1)
    assert "text" in outcome, outcome.get("error")
    assert len(ptx_of(outcome["text"])) == 2
    assert killed and not set(killed) & set(state.pool().worker_pids())
    retried = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retried) == 1 and "kernel 'tuned_dot_kernel' [BLOCK=" in retried[0]
    assert counters["compiled"] == 2


def test_a_worker_killed_on_every_attempt_is_a_worker_error_and_the_process_carries_on(new_kernels):
    kernels, counters = new_kernels(), Counters()
    thread, outcome = lower_in_thread(kernels.lower_tuned_dot)
    kill_busy_workers(thread)
    error = outcome.get("error")
    assert isinstance(error, WorkerError) and isinstance(error, RuntimeError) and isinstance(error, TritonplugError)
    message = str(error)
    assert "kernel 'tuned_dot_kernel' [BLOCK=" in message and "num_warps=4" in message
    assert re.search(r"pid \d+ was killed by signal SIGKILL, then the fresh worker pid \d+ was killed by signal "
                     r"SIGKILL", message), message
    assert counters["compiled"] == 0
    ptx = ptx_of(kernels.lower_tuned_dot())
    assert len(ptx) == 2 and all(".target sm_90" in p for p in ptx), "no compile once the workers are left alone"
    assert counters["compiled"] == 2


def test_a_job_over_the_timeout_is_killed_with_its_process_group(new_kernels, monkeypatch):
    kernels, counters = new_kernels(), Counters()
    monkeypatch.setenv("TRITONPLUG_COMPILE_TIMEOUT", "0.05")
    state.shutdown_pool()
    try:
        state.pool().warm()  # start-up is not a compile: it has a timeout of its own
        with pytest.raises(WorkerError) as info:
            kernels.lower_tuned_dot()
    finally:
        state.shutdown_pool()
        monkeypatch.delenv("TRITONPLUG_COMPILE_TIMEOUT")
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert re.search(r"kernel 'tuned_dot_kernel' \[BLOCK=\d+, num_warps=4.*\] exceeded the compile timeout of 0.05 s",
                     message), message
    assert "TRITONPLUG_COMPILE_TIMEOUT" in message
    pid = int(re.search(r"worker pid (\d+) and its process group were killed", message).group(1))
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert counters["compiled"] == 0
    kernels.lower_tuned_dot()
    assert counters["compiled"] == 2


def test_zero_workers_compiles_in_this_process(new_kernels, monkeypatch):
    kernels, counters = new_kernels(), Counters()
    monkeypatch.setenv("TRITONPLUG_COMPILE_WORKERS", "0")
    state.shutdown_pool()
    try:
        assert ".target sm_90" in ptx_of(kernels.lower_scale())[0]
        assert state.pool().size == 0 and state.pool().worker_pids() == []
    finally:
        state.shutdown_pool()
    assert counters["compiled"] == 1


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

def entry_files(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "entries").glob("*/*.bin"))


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
