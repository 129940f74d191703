"""The compile-worker pool, with real subprocesses: results, concurrency, crashes, hangs, parent death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import worker_tasks

from tritonplug.compile import worker_process
from tritonplug.compile.workers import WORKER_PRELOAD, Task, WorkerPool
from tritonplug.errors import CompileError, WorkerError
from tritonplug.process.state import state

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module", autouse=True)
def _children_import_worker_tasks():
    """Workers import task functions by module name: put this directory on their PYTHONPATH."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
        yield


@pytest.fixture(scope="module")
def pool():
    pool = WorkerPool(2, timeout=60, preload=())
    pool.warm()
    yield pool
    pool.shutdown()


def gone(pid: int) -> bool:
    """True once the process has exited (a zombie nobody reaps counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def wait_gone(pids: list[int], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not all(gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def assert_usable(pool: WorkerPool) -> None:
    assert pool.run([Task(worker_tasks.square, (i,)) for i in range(3)]) == [0, 1, 4]


def test_results_come_back_in_task_order(pool):
    tasks = [Task(worker_tasks.square, (i,), f"square {i}") for i in range(7)]
    assert pool.run(tasks) == [i * i for i in range(7)]
    assert pool.run([]) == []
    assert len(pool.worker_pids()) == 2


def test_tasks_run_concurrently_on_separate_workers(pool):
    start = time.monotonic()
    pids = pool.run([Task(worker_tasks.sleep_then_pid, (1.0,)) for _ in range(2)])
    elapsed = time.monotonic() - start
    assert len(set(pids)) == 2 and set(pids) <= set(pool.worker_pids())
    assert elapsed < 1.8, f"two 1 s tasks on two warm workers took {elapsed:.2f} s: they did not overlap"


def test_concurrent_run_calls_share_the_workers(pool):
    results: dict[int, list[int]] = {}

    def call(n: int) -> None:
        results[n] = pool.run([Task(worker_tasks.square, (n + i,)) for i in range(3)])

    threads = [threading.Thread(target=call, args=(n,)) for n in range(0, 40, 10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: [(n + i) ** 2 for i in range(3)] for n in range(0, 40, 10)}


def test_busy_worker_pids_are_the_workers_running_a_task(pool):
    thread = threading.Thread(target=pool.run, args=([Task(worker_tasks.sleep_then_pid, (0.5,))],))
    thread.start()
    busy: set[int] = set()
    while thread.is_alive():
        busy.update(pool.busy_worker_pids())
        time.sleep(0.005)
    thread.join()
    assert len(busy) == 1 and busy <= set(pool.worker_pids())
    assert pool.busy_worker_pids() == []


def test_a_run_starts_no_more_workers_than_its_tasks_and_later_runs_reuse_them():
    """A worker costs about a gigabyte: ``TRITONPLUG_COMPILE_WORKERS=64`` must not start 64 for 8 jobs."""
    pool = WorkerPool(3, timeout=60, preload=())
    try:
        assert pool.worker_pids() == []
        assert pool.run([Task(worker_tasks.square, (4,))]) == [16]
        first = pool.worker_pids()
        assert len(first) == 1, "a run of one task started more than one worker"
        assert pool.run([Task(worker_tasks.getpid) for _ in range(6)])
        started = pool.worker_pids()
        assert len(started) == 3 and set(first) <= set(started)
        assert pool.run([Task(worker_tasks.getpid) for _ in range(6)]) and pool.worker_pids() == started
    finally:
        pool.shutdown()


def test_preload_entries_may_name_a_function_to_call(monkeypatch):
    import faulthandler

    monkeypatch.delenv("PYTHONFAULTHANDLER", raising=False)
    plain, preloaded = WorkerPool(1, preload=("faulthandler",)), WorkerPool(1, preload=("faulthandler:enable",))
    try:
        assert plain.run([Task(faulthandler.is_enabled)]) == [False]
        assert preloaded.run([Task(faulthandler.is_enabled)]) == [True]
    finally:
        plain.shutdown()
        preloaded.shutdown()


def test_exception_in_the_child_is_a_compile_error_with_traceback_and_stderr(pool):
    description = "kernel 'matmul' config BLOCK_M=64 num_warps=4"
    tasks = [Task(worker_tasks.square, (3,)),
             Task(worker_tasks.fail_loudly, ("no valid layout",), description)]
    with pytest.raises(CompileError) as info:
        pool.run(tasks)
    message = str(info.value)
    assert not isinstance(info.value, WorkerError)
    assert description in message and "ValueError: no valid layout" in message
    assert "fail_loudly" in message and "Traceback" in message
    assert "ptxas says: register spill overflow" in message and "a print() on stdout" in message
    assert_usable(pool)


def test_a_task_that_cannot_be_pickled_is_a_compile_error(pool):
    with pytest.raises(CompileError, match="cannot send"):
        pool.run([Task(worker_tasks.square, (threading.Lock(),), "unpicklable")])


def test_a_worker_killed_twice_is_a_worker_error(pool, tmp_path):
    attempts = tmp_path / "attempts"
    with pytest.raises(WorkerError) as info:
        pool.run([Task(worker_tasks.kill_self, (str(attempts),), "kernel 'crashy'")])
    message = str(info.value)
    assert "kernel 'crashy'" in message and "killed by signal SIGKILL" in message
    assert "about to be killed" in message
    pids = attempts.read_text().split()
    assert len(pids) == 2 and pids[0] != pids[1], "retried exactly once, on a fresh worker"
    assert_usable(pool)


def test_a_worker_that_dies_once_is_replaced_and_the_task_retried(pool, tmp_path):
    marker = tmp_path / "died-once"
    assert pool.run([Task(worker_tasks.die_once, (str(marker),))]) == ["survived"]
    assert marker.exists()
    assert len(pool.worker_pids()) == 2


def test_abort_in_the_child_is_a_worker_error(pool):
    with pytest.raises(WorkerError, match="SIGABRT") as info:
        pool.run([Task(worker_tasks.abort, (), "kernel 'aborts'")])
    assert "kernel 'aborts'" in str(info.value)
    assert_usable(pool)


def test_workers_killed_from_outside_between_runs_are_replaced(pool):
    old = pool.worker_pids()
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    assert wait_gone(old)
    pids = pool.run([Task(worker_tasks.sleep_then_pid, (0.3,)) for _ in range(2)])
    assert not set(pids) & set(old)
    assert_usable(pool)


def test_a_worker_that_cannot_start_is_a_worker_error_with_its_log(monkeypatch):
    monkeypatch.setenv("WORKER_TASKS_EXIT_ON_IMPORT", "1")
    pool = WorkerPool(1, timeout=60, preload=("worker_tasks",))
    try:
        with pytest.raises(WorkerError, match="exited with code 3 before it was ready") as info:
            pool.warm()
        assert "cannot import the compiler" in str(info.value)
        with pytest.raises(WorkerError, match="exited with code 3, then the fresh worker") as info:
            pool.run([Task(worker_tasks.square, (2,), "kernel 'early'")])
        assert "kernel 'early'" in str(info.value) and "cannot import the compiler" in str(info.value)
        monkeypatch.delenv("WORKER_TASKS_EXIT_ON_IMPORT")
        assert pool.run([Task(worker_tasks.square, (2,))]) == [4]
    finally:
        pool.shutdown()


def test_a_hung_task_is_killed_with_its_process_group(tmp_path):
    pool = WorkerPool(1, timeout=1.0, preload=())
    try:
        pool.warm()
        pid_file = tmp_path / "grandchild"
        start = time.monotonic()
        with pytest.raises(WorkerError) as info:
            pool.run([Task(worker_tasks.hang_with_child, (str(pid_file),), "kernel 'hangs'")])
        assert time.monotonic() - start < 10
        message = str(info.value)
        assert "kernel 'hangs'" in message and "timeout of 1 s" in message
        assert "TRITONPLUG_COMPILE_TIMEOUT" in message
        assert wait_gone([int(pid_file.read_text())], 5), "the worker's child process survived the timeout"
        assert_usable(pool)
    finally:
        pool.shutdown()


def test_workers_started_from_a_short_lived_thread_outlive_it():
    """PR_SET_PDEATHSIG fires when the *thread* that started a child exits: the pool must not care."""
    pool = WorkerPool(1, timeout=60, preload=())
    try:
        first: list[int] = []
        thread = threading.Thread(target=lambda: first.extend(pool.run([Task(worker_tasks.getpid)])))
        thread.start()
        thread.join()
        time.sleep(0.3)
        assert pool.run([Task(worker_tasks.getpid)]) == first
    finally:
        pool.shutdown()
    assert wait_gone(first)
    with pytest.raises(WorkerError, match="shut down"):
        pool.run([Task(worker_tasks.getpid)])


def test_workers_exit_when_the_parent_dies(tmp_path):
    script = textwrap.dedent("""
        import time
        from tritonplug.compile.workers import WorkerPool
        pool = WorkerPool(2, preload=())
        pool.warm()
        print(*pool.worker_pids(), flush=True)
        time.sleep(600)
    """)
    env = {**worker_process.child_env(), "TMPDIR": str(tmp_path)}  # the pool's directory, left behind
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(gone(pid) for pid in pids)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    assert wait_gone(pids, 5), "compile workers outlived their parent"


def test_zero_workers_runs_tasks_in_process(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_COMPILE_WORKERS", "0")
    state.shutdown_pool()
    try:
        tasks = [Task(worker_tasks.getpid), Task(worker_tasks.square, (5,))]
        assert state.run_tasks(tasks) == [os.getpid(), 25]
        assert state.pool().worker_pids() == []
        with pytest.raises(CompileError, match="kernel 'x' failed: ValueError: boom"):
            state.run_tasks([Task(worker_tasks.fail_loudly, ("boom",), "kernel 'x'")])
    finally:
        state.shutdown_pool()


def test_set_pool_installs_a_process_wide_pool():
    mine = WorkerPool(1, timeout=60, preload=())
    previous = state.set_pool(mine)
    try:
        assert state.pool() is mine
        assert state.run_tasks([Task(worker_tasks.getpid)]) == mine.worker_pids()
    finally:
        assert state.set_pool(previous) is mine
        mine.shutdown()
    assert state.pool() is not mine


def test_pool_settings_come_from_the_environment(monkeypatch):
    monkeypatch.delenv("TRITONPLUG_COMPILE_WORKERS", raising=False)
    monkeypatch.setenv("TRITONPLUG_COMPILE_TIMEOUT", "12.5")
    state.shutdown_pool()
    try:
        pool = state.pool()
        assert (pool.size, pool.timeout) == (min(os.cpu_count() or 1, 8), 12.5)
        assert state.pool() is pool and pool.worker_pids() == []
    finally:
        state.shutdown_pool()


@pytest.mark.parametrize(("name", "value"), [
    ("TRITONPLUG_COMPILE_WORKERS", "many"), ("TRITONPLUG_COMPILE_WORKERS", "-1"),
    ("TRITONPLUG_COMPILE_WORKERS", "2.5"), ("TRITONPLUG_COMPILE_TIMEOUT", "soon"),
    ("TRITONPLUG_COMPILE_TIMEOUT", "0"), ("TRITONPLUG_COMPILE_TIMEOUT", "nan"),
])
def test_bad_environment_values_name_the_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    state.shutdown_pool()
    with pytest.raises(ValueError, match=name):
        state.pool()


def test_a_process_pool_worker_is_ready_without_jax():
    """The process-wide pool's workers import Triton, the plugins and Triton's compiler state, never JAX
    (about 0.4 s of every worker's start)."""
    pool = WorkerPool(1, 120, WORKER_PRELOAD)
    try:
        pool.warm()
        loaded = pool.run([Task("worker_tasks:loaded_modules", ("jax", "triton", "tritonplug.compile.backends"))])[0]
    finally:
        pool.shutdown()
    assert loaded == ["triton", "tritonplug.compile.backends"]


def test_a_worker_stuck_while_starting_is_replaced_and_the_task_retried(tmp_path, monkeypatch):
    """A worker that hangs while it imports (stopped, or stuck on a busy machine) is killed at the start-up timeout
    and the task runs on a fresh worker; the start-up timeout is the compile timeout, at least 60 s (lowered here
    to 3 s)."""
    from tritonplug.compile import worker_pool

    monkeypatch.setattr(worker_pool, "_MIN_STARTUP_TIMEOUT", 3.0)
    monkeypatch.setenv("HANG_ONCE_MARKER", str(tmp_path / "hung-once"))
    stuck = WorkerPool(1, timeout=3, preload=("worker_tasks:hang_once_at_start",))
    try:
        assert stuck.run([Task(worker_tasks.square, (7,))]) == [49]
        assert (tmp_path / "hung-once").exists(), "the first worker did not hang: the test tested nothing"
    finally:
        stuck.shutdown()
