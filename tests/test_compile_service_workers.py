"""The compile service's workers end to end: real lowerings of real kernels for sm_90, on a machine
without a GPU. Parallel configurations, crashes, timeouts, no workers at all. Each test lowers kernels
generated into a temporary module with a random constant (``compile_service_support.py``), so their
cache keys are new. The disk cache: ``test_compile_service_cache.py``.
"""

from __future__ import annotations

import logging
import os
import re
import time

import pytest
from compile_service_support import Counters, compile_service_fixtures, kill_busy_workers, lower_in_thread, ptx_of
from helpers import requires_backend

from tritonplug.compile import workers
from tritonplug.compile.worker_pool import Task
from tritonplug.errors import TritonplugError, WorkerError
from tritonplug.process.state import state

pytestmark = [pytest.mark.cuda, requires_backend("cuda")]
_ptx_in_payloads, new_kernels = compile_service_fixtures()


# --- workers --------------------------------------------------------------------------------------

def test_configurations_compile_at_once_and_the_pool_stays_warm(new_kernels):
    # A pool that earlier runs of this process grew to one worker would start the second during this run
    # (a run starts no more workers than its tasks): start from a new pool with every slot filled.
    state.shutdown_pool()
    pool = state.pool()
    if pool.size < 2:
        pytest.skip("needs at least two compile workers")
    # two tasks longer than a worker's start: both workers start, import and run one each, so both are warm
    pool.run([Task("time:sleep", (3.0,)), Task("time:sleep", (3.0,))])
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
    assert pool.size == workers.pool_size()
    # a run starts as many workers as it has tasks (the pool may hold more, started by earlier runs)
    assert 2 <= len(warm) <= pool.size
    new_kernels().lower_scale()
    assert counters["compiled"] == 3
    assert pool.worker_pids() == warm, "the second lowering did not reuse the warm workers"


def test_a_worker_killed_mid_compile_is_replaced_and_the_job_retried(new_kernels, caplog):
    kernels, counters = new_kernels(), Counters()
    with caplog.at_level(logging.WARNING, logger="tritonplug.compile.workers"):
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
    assert _group_gone(pid, within_s=10.0), f"process group {pid} still has members 10 s after the kill"
    assert counters["compiled"] == 0
    kernels.lower_tuned_dot()
    assert counters["compiled"] == 2


def _group_gone(pgid: int, within_s: float) -> bool:
    """Whether no process of group ``pgid`` is left within ``within_s``: the worker itself is reaped by the kill,
    but a child it started (ptxas) is reaped by init, which a loaded machine can take a moment to do."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


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

