"""The worker pool's life: a pool dropped unclosed ends its workers quietly, and a compile in which one
configuration times out keeps the configurations that finished.

The last test injects the timeout through Triton's own hook for its tools: ``TRITON_PTXAS_PATH``
names a script that runs the real ptxas, except for the ``num_warps=8`` configuration's PTX
(``.reqntid 256``) while a marker file exists, where it hangs.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import worker_tasks
from helpers import requires_backend

from tritonplug.compile import worker_process
from tritonplug.compile.workers import WORKER_PRELOAD, Task, WorkerPool
from tritonplug.errors import WorkerError
from tritonplug.inspection import kernel_calls
from tritonplug.process.state import state

DROP_SCRIPT = textwrap.dedent("""
    import gc, os, time
    from tritonplug.process.state import state
    from tritonplug.compile.workers import WorkerPool

    def gone(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    pool = WorkerPool(2, preload=())
    pool.warm()
    pids = pool.worker_pids()
    del pool
    gc.collect()
    state.pool().warm()
    replaced = state.pool().worker_pids()
    state.set_pool(None)  # the previous pool is dropped by the caller, unclosed
    gc.collect()
    time.sleep(0.5)
    print("dropped pools ended their workers:", all(gone(pid) for pid in pids + replaced), flush=True)
    state.pool().warm()  # and one still running at exit
""")


def test_pools_dropped_or_left_at_exit_end_their_workers_without_resource_warnings(tmp_path: Path) -> None:
    env = {**worker_process.child_env(), "TMPDIR": str(tmp_path), "TRITONPLUG_COMPILE_WORKERS": "2"}
    done = subprocess.run([sys.executable, "-X", "dev", "-c", DROP_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "dropped pools ended their workers: True" in done.stdout
    assert "ResourceWarning" not in done.stderr, done.stderr
    assert list(tmp_path.glob("tritonplug-workers-*")) == []  # every pool's directory removed


def test_a_timed_out_task_leaves_the_others_results(monkeypatch: pytest.MonkeyPatch) -> None:
    tests = str(Path(__file__).resolve().parent)  # workers import worker_tasks by name
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))
    pool = WorkerPool(2, timeout=3, preload=())
    try:
        results = pool.run([Task(worker_tasks.square, (7,)), Task(worker_tasks.sleep_then_pid, (60,), "slow one")],
                           return_exceptions=True)
        assert results[0] == 49
        assert isinstance(results[1], WorkerError) and "slow one exceeded the compile timeout of 3 s" in str(results[1])
        with pytest.raises(WorkerError, match="slow one exceeded"):
            pool.run([Task(worker_tasks.square, (7,)), Task(worker_tasks.sleep_then_pid, (60,), "slow one")])
    finally:
        pool.shutdown()


FAKE_PTXAS = """#!/bin/sh
# Hang on the num_warps=8 configuration's PTX while the marker exists; run the real ptxas otherwise.
for arg in "$@"; do
    case "$arg" in
        *.ptx) if [ -e "{marker}" ] && grep -q "reqntid 256" "$arg"; then sleep 300; fi ;;
    esac
done
exec "{bin}/$(basename "$0")" "$@"
"""

TUNED = '''
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 128}, num_warps=8)],
                 key=[])
@triton.jit
def partly_slow_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 3)
'''


@pytest.mark.cuda
@requires_backend("cuda")
def test_configurations_that_finished_are_kept_when_another_times_out(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      private_cache: Path) -> None:
    import importlib.util

    import jax
    import jax.numpy as jnp
    import triton

    import tritonplug

    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    marker = tmp_path / "hang"
    marker.touch()
    for name in ("ptxas", "ptxas-blackwell"):  # each runs the real tool of its name
        script = tmp_path / name
        script.write_text(FAKE_PTXAS.format(marker=marker, bin=tools))
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    module_path = tmp_path / "partly_slow.py"
    module_path.write_text(TUNED)
    spec = importlib.util.spec_from_file_location("partly_slow", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(tmp_path / "ptxas"))  # Triton picks one by architecture
    monkeypatch.setenv("TRITON_PTXAS_BLACKWELL_PATH", str(tmp_path / "ptxas-blackwell"))
    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    # 12 s: room for the finishing configuration (a worker's start and one small compile: 2-4 s on a loaded 2-core
    # machine), not so long that the hanging one holds CI for half a minute
    previous = state.set_pool(WorkerPool(2, timeout=12, preload=WORKER_PRELOAD))  # workers see the new variable

    x = jax.ShapeDtypeStruct((1024,), jnp.float32)

    def lower():
        f = jax.jit(lambda a: tritonplug.triton_call(a, kernel=module.partly_slow_kernel, out_shape=a, grid=(8,)))
        return f.trace(x).lower(lowering_platforms=("cuda",)).as_text()

    try:
        compiled = state.compiler.stats["compiled"]
        with pytest.raises(WorkerError, match=r"num_warps=8.*exceeded the compile timeout of 12 s"):
            lower()
        assert state.compiler.stats["compiled"] == compiled + 1
        entries = [p for p in (private_cache / "entries").rglob("*.bin")]
        assert len(entries) == 1, "the configuration that finished was not cached"
        os.remove(marker)
        state.reset()  # a new process: only the disk cache remembers
        before = dict(state.compiler.stats)
        (autotuned,) = kernel_calls(lower())
        assert len(autotuned["autotuned_kernel_call"]["configs"]) == 2
        after = state.compiler.stats
        assert (after["disk_hits"] - before["disk_hits"], after["compiled"] - before["compiled"]) == (1, 1)
    finally:
        dropped = state.set_pool(previous)
        if dropped is not None:
            dropped.shutdown()
