"""What the compile-service tests (``test_compile_service_*.py``) share: a kernel module generated with a
random constant (so its cache keys are new), a script lowering it in a fresh process, the counters,
and helpers that lower in a thread and kill the workers it keeps busy."""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import tritonplug
from tritonplug.inspection import kernel_calls
from tritonplug.process.state import state

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


def compile_service_fixtures() -> tuple[Any, Any]:
    """The fixtures of a compile-service test module, to assign there:
    ``_ptx_in_payloads, new_kernels = compile_service_fixtures()`` (``_ptx_in_payloads`` is autouse)."""

    @pytest.fixture(autouse=True)
    def _ptx_in_payloads(monkeypatch):
        """Send PTX (not Triton's cubin, with which jaxlib 0.11+ payloads carry a tag instead): ``ptx_of`` reads it."""
        monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")

    @pytest.fixture
    def new_kernels(tmp_path: Path):
        """A factory of freshly generated kernel modules."""
        counter = iter(range(1000))

        def make(**kwargs):
            directory = tmp_path / f"kernels{next(counter)}"
            return load(directory, write_kernels(directory, **kwargs))
        return make

    return _ptx_in_payloads, new_kernels


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


def entry_files(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "entries").glob("*/*.bin"))
