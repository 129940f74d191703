"""A second process starts as if nothing had to be compiled: identical modules across processes (so JAX's
persistent compilation cache serves them), compiles that start when a call is traced, partial failures
that keep what compiled, and lean GPU payloads."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import triton
import triton.language as tl
from helpers import ROOT, for_backend, requires_backend

import tritonplug
from tritonplug.adapters import jaxlib_compat
from tritonplug.errors import KernelSourceError
from tritonplug.inspection import kernel_calls
from tritonplug.lowering import payload as launch_payload
from tritonplug.lowering import pipeline as lowering
from tritonplug.process.state import state
from tritonplug.records import GpuKernel, Launch

cuda = for_backend("cuda")
interpret = requires_backend("interpret")

LOWER = """
import hashlib, json, sys
sys.path.insert(0, {examples!r})
import jax, jax.numpy as jnp
from add import add
from matmul import matmul
x, a = jax.ShapeDtypeStruct((4096,), jnp.float32), jax.ShapeDtypeStruct((128, 128), jnp.float16)
def program(x, y, a, b):
    return add(x, y), add(y, x, block=512), matmul(a, b)
text = jax.jit(program).trace(x, x, a, a).lower(lowering_platforms=({platform!r},)).as_text()
print(json.dumps({{"sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}}))
"""


def lowered_in_a_new_process(platform: str, cache: Path) -> dict:
    environment = dict(os.environ, JAX_PLATFORMS="cpu", TRITONPLUG_CACHE_DIR=str(cache), TRITONPLUG_CUDA_ARCH="90",
                       TRITONPLUG_ROCM_ARCH="gfx942")
    done = subprocess.run([sys.executable, "-c", LOWER.format(examples=str(ROOT / "examples"), platform=platform)],
                          env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("platform", [
    pytest.param("cpu", marks=requires_backend("interpret")),
    pytest.param("cuda", marks=[pytest.mark.cuda, requires_backend("cuda")]),
    pytest.param("rocm", marks=[pytest.mark.rocm, requires_backend("rocm")]),
])
def test_two_processes_lower_the_same_program_to_identical_modules(platform, tmp_path):
    first = lowered_in_a_new_process(platform, tmp_path / "cache")
    second = lowered_in_a_new_process(platform, tmp_path / "cache")
    assert first["sha256"] == second["sha256"], "the lowered module differs between processes"
    if platform == "cpu":
        ids = re.findall(r"function_id = (\d+)", first["text"])
        if os.environ.get("TRITONPLUG_CPU_PATH") == "interpret":  # three host kernels, each id names what it runs
            assert len(ids) == 3 and len(set(ids)) == 3
        else:  # compiled by XLA: the kernels are part of the module, no host call at all
            assert ids == [] and "stablehlo" in first["text"]
    else:
        assert len(kernel_calls(first["text"])) == 3


PERSISTENT = """
import json, sys
sys.path.insert(0, {examples!r})
import jax, jax.numpy as jnp
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
jax.config.update("jax_compilation_cache_dir", {jax_cache!r})
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
import tritonplug
from add import add
x = jax.device_put(jnp.arange(4096, dtype=jnp.float32))
out = jax.jit(lambda x, y: add(x, y) * 2)(x, x)
assert (out == 4 * x).all()
print(json.dumps({{"hits": events.count("/jax/compilation_cache/cache_hits"),
                   "misses": events.count("/jax/compilation_cache/cache_misses"), **tritonplug.compile_stats()}}))
"""


@interpret
def test_a_second_process_hits_jax_persistent_cache(tmp_path):
    environment = dict(os.environ, JAX_PLATFORMS="cpu", TRITONPLUG_CACHE_DIR=str(tmp_path / "cache"))
    script = PERSISTENT.format(examples=str(ROOT / "examples"), jax_cache=str(tmp_path / "jax-cache"))

    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["misses"] >= 1 and first["hits"] == 0
    assert second["misses"] == 0 and second["hits"] == first["misses"], "XLA compiled again in the second process"


# ----------------------------------------------------------------------------- compiles that start early

@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((64, 1), (128, 2), (256, 4))],
                 key=["n"])
@triton.jit
def early_scale_kernel(x_ptr, n, out_ptr, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * FACTOR, mask=mask)


def early_scale(x, factor):
    return tritonplug.triton_call(x, x.size, kernel=early_scale_kernel,
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=lambda meta: (triton.cdiv(x.size, meta["BLOCK"]),), FACTOR=factor)


@pytest.fixture
def two_workers(monkeypatch, private_cache):
    monkeypatch.setenv("TRITONPLUG_COMPILE_WORKERS", "2")
    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    yield
    state.shutdown_pool()


def _early_compiles_running() -> bool:
    """Whether a background compile is still storing its binaries (the counter moves first)."""
    return any(t.name == "tritonplug-early-compile" and t.is_alive() for t in threading.enumerate())


@cuda
def test_a_traced_call_starts_compiling_before_it_is_lowered(two_workers, monkeypatch):
    """With cuda as the default platform, tracing alone compiles both calls' configurations; the lowering
    then compiles nothing."""
    monkeypatch.setattr(jax, "default_backend", lambda: "cuda")
    monkeypatch.setenv("TRITONPLUG_EARLY_COMPILE", "1")
    spec = jax.ShapeDtypeStruct((1000,), jnp.float32)
    before = tritonplug.compile_stats()
    traced = jax.jit(lambda x: early_scale(early_scale(x, 2.0), 3.0)).trace(spec)
    deadline = time.monotonic() + 300
    while (tritonplug.compile_stats()["compiled"] < before["compiled"] + 6 or _early_compiles_running()) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    middle = tritonplug.compile_stats()
    assert middle["compiled"] == before["compiled"] + 6, "the traced calls did not compile in the background"
    planned = []  # the lowering takes the early compiles' plans: it plans nothing again
    real_plan_call = lowering.plan_call
    monkeypatch.setattr(lowering, "plan_call", lambda *a, **k: planned.append(a) or real_plan_call(*a, **k))
    traced.lower(lowering_platforms=("cuda",))
    after = tritonplug.compile_stats()
    assert after["compiled"] == middle["compiled"] and after["memory_hits"] == middle["memory_hits"] + 6
    assert planned == [], "the lowering planned a call its early compile had planned"


@cuda
def test_early_compiles_can_be_turned_off(two_workers, monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "cuda")
    monkeypatch.setenv("TRITONPLUG_EARLY_COMPILE", "0")
    spec = jax.ShapeDtypeStruct((1000,), jnp.float32)
    before = tritonplug.compile_stats()
    traced = jax.jit(lambda x: early_scale(x, 5.0)).trace(spec)
    time.sleep(1.0)
    assert tritonplug.compile_stats()["compiled"] == before["compiled"]
    traced.lower(lowering_platforms=("cuda",))
    assert tritonplug.compile_stats()["compiled"] == before["compiled"] + 3


@cuda
def test_an_early_plan_serves_one_lowering_made_in_its_environment(two_workers, monkeypatch):
    """The lowering takes the plan its early compile made (it is gone after); a plan made before a ``TRITON_*``
    variable changed does not serve a lowering after it (the variable changes options and cache keys: Triton's
    FP-fusion default compiled as it was at trace time was the bug)."""
    monkeypatch.setattr(jax, "default_backend", lambda: "cuda")
    monkeypatch.setenv("TRITONPLUG_EARLY_COMPILE", "1")
    spec = jax.ShapeDtypeStruct((1000,), jnp.float32)
    planned = []
    real_plan_call = lowering.plan_call
    monkeypatch.setattr(lowering, "plan_call", lambda *a, **k: planned.append(a) or real_plan_call(*a, **k))

    def trace(factor):
        traced = jax.jit(lambda x: early_scale(x, factor)).trace(spec)
        while _early_compiles_running():
            time.sleep(0.05)
        return traced

    traced = trace(11.0)
    stored = len(state.plans.entries)
    early = len(planned)  # the early compile's own plan
    traced.lower(lowering_platforms=("cuda",))
    assert len(planned) == early and len(state.plans.entries) == stored - 1
    traced = trace(13.0)
    early = len(planned)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0" if os.environ.get("TRITON_DEFAULT_FP_FUSION") == "1" else "1")
    traced.lower(lowering_platforms=("cuda",))
    assert len(planned) == early + 1, "a plan made in another environment served the lowering"


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128, 256)], key=["n"])
@triton.jit
def partly_broken_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK != 128, "this configuration does not compile")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@cuda
def test_a_configuration_the_front_end_refuses_makes_the_whole_call_wrong(two_workers, private_cache):
    """Bad input caches nothing, even when other configurations' back ends already ran; configurations that
    finished beside one that timed out are kept (tests/test_pool_lifecycle.py)."""
    spec = jax.ShapeDtypeStruct((1000,), jnp.float32)

    def lower():
        jax.jit(lambda x: tritonplug.triton_call(
            x, x.size, kernel=partly_broken_kernel, out_shape=spec,
            grid=lambda meta: (triton.cdiv(1000, meta["BLOCK"]),))).trace(spec).lower(lowering_platforms=("cuda",))

    before = tritonplug.compile_stats()
    with pytest.raises(KernelSourceError, match="does not compile"):
        lower()
    assert tritonplug.compile_stats()["compiled"] == before["compiled"]
    entries = private_cache / "entries"
    assert not entries.exists() or not list(entries.rglob("*.bin")), "a refused call left binaries in the cache"


# ----------------------------------------------------------------------------- lean payloads

def _kernel(module_image: bytes | None) -> GpuKernel:
    launch = Launch("k", (1, 1, 1), (), (), (), ())
    return GpuKernel("k", 4, 1, 0, ".version 8.0\n.target sm_90\n" + "x" * 5000, "module { tt.func }", 90, launch,
                     module_image=module_image)


@pytest.mark.parametrize("reads_module_image", [False, True])
def test_payloads_carry_only_what_the_installed_jaxlib_reads(monkeypatch, reads_module_image):
    monkeypatch.setattr(jaxlib_compat, "accepts_module_image", lambda: reads_module_image)
    cubin = b"\x7fELF" + os.urandom(64)
    (lean,) = launch_payload.lean_gpu_kernels([_kernel(cubin)], debug=False)
    assert lean.ttir == ""
    if reads_module_image:
        assert lean.module_image == cubin and len(lean.image) < 120
        assert lean.image.startswith(launch_payload.MODULE_IMAGE_TAG)
        (other,) = launch_payload.lean_gpu_kernels([_kernel(cubin[:-1] + bytes([cubin[-1] ^ 1]))], debug=False)
        assert other.image != lean.image  # the tag is as unique as the binary (jaxlib caches modules by it)
    else:
        assert lean.module_image is None and lean.image == _kernel(None).image
    (debug,) = launch_payload.lean_gpu_kernels([_kernel(cubin)], debug=True)
    assert debug.ttir and debug.image == _kernel(None).image
    assert dataclasses.replace(debug, module_image=None) == dataclasses.replace(_kernel(None), launch=debug.launch)


@cuda
def test_the_ttir_is_sent_only_with_debug(monkeypatch):
    from kernels import add_kernel

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    spec = jax.ShapeDtypeStruct((1000,), jnp.float32)

    def add(x, **options):
        return tritonplug.triton_call(x, x, x.size, kernel=add_kernel, out_shape=spec, grid=(4,), BLOCK=256, **options)

    def kernel_of(**options) -> dict:
        text = jax.jit(lambda x: add(x, **options)).trace(spec).lower(lowering_platforms=("cuda",)).as_text()
        return kernel_calls(text)[0]["kernel_call"]["kernel"]

    assert "ttir" not in kernel_of()
    assert "tt.func public @add_kernel" in kernel_of(debug=True)["ttir"]
