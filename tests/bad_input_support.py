"""What the malformed-call tests share: the valid call they break, the case record, and the check that a
case is refused at the right stage with nothing cached, after which a valid call still works.

Each case runs against a fresh, empty kernel cache. Most are refused at the ``triton_call`` site
(``jax.jit(f).trace`` raises); those that need the target or the kernel's source are refused when
lowering starts (``trace`` succeeds, ``lower`` raises) on each platform they concern.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import installed_backends, requires_backend
from kernels import add_kernel

import tritonplug
from tritonplug.inspection import kernel_calls

N = 256  # a size no other test module lowers: JAX caches lowerings of identical programs
SPEC = jax.ShapeDtypeStruct((N,), jnp.float32)
OMIT = object()

HAVE_INTERPRET = "interpret" in installed_backends()
HAVE_CUDA = "cuda" in installed_backends()
PLATFORM_MARKS = {"cpu": requires_backend("interpret"), "cuda": requires_backend("cuda")}
BOTH = ("cpu", "cuda")
skip_without_backends = requires_backend("interpret", "cuda")


def _every_backend_declares_its_options() -> bool:
    from tritonplug.process.state import backends

    return all(b.option_names is not None for b in backends())


#: Where an unknown ``backend_options`` name is refused: at the call when every installed backend declares
#: its option names (``BackendInfo.option_names``), else by the CPU backend's own check when lowering.
UNKNOWN_OPTION_STAGE: tuple[str, ...] = () if _every_backend_declares_its_options() else ("cpu",)
UNKNOWN_OPTION = r"unknown (interpret backend )?option\(s\)"


def another_backends_option_refused(option: str) -> tuple[str, tuple[str, ...]]:
    """Where a CUDA call with ``option``, which only another backend (ROCm) takes, is refused, and the message:
    by the CUDA backend when lowering where an installed backend accepts it (the interpret backend takes every GPU
    option), else at the call, as an option no installed backend accepts (the CUDA plugin alone)."""
    from tritonplug.process.state import backends

    if any(b.option_names is None or option in b.option_names for b in backends()):
        return rf"unknown CUDA backend option\(s\) \['{option}'\]", ("cuda",)
    return rf"{UNKNOWN_OPTION} \['{option}'\]", ()


def call(x, y, *rest, **overrides):
    """``add_kernel(x, y, N)`` with keyword overrides (``OMIT`` drops one); ``rest`` replaces the default ``N``."""
    options = dict(kernel=add_kernel, out_shape=SPEC, grid=(2,), BLOCK=128)
    options.update(overrides)
    return tritonplug.triton_call(x, y, *(rest or (N,)), **{k: v for k, v in options.items() if v is not OMIT})


@dataclass(frozen=True)
class Case:
    fn: Callable
    error: type[BaseException]
    match: str
    platforms: tuple[str, ...] = ()  # empty: refused at the call site; else: at lowering for these platforms


def params(cases: dict[str, Case]) -> list:
    """One test per case and stage: the call site once, lowering once per platform the case names."""
    found = []
    for name, case in cases.items():
        if not case.platforms:
            platform = "cpu" if HAVE_INTERPRET else "cuda"  # the call site is the same for every platform
            found.append(pytest.param(name, "call site", platform, id=name))
        for platform in case.platforms:
            found.append(pytest.param(name, "lowering", platform, id=f"{name}-{platform}",
                                      marks=PLATFORM_MARKS[platform]))
    return found


def use_fresh_cache(directory: Path, monkeypatch: pytest.MonkeyPatch, state) -> Path:
    """An empty kernel cache the compile service uses; sm_90 for CUDA lowering without a GPU."""
    monkeypatch.setenv("TRITONPLUG_CACHE_DIR", str(directory))
    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")  # PTX in the payload on every jaxlib (valid_call_works)
    if HAVE_INTERPRET:
        monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu:interpret")  # should other cpu backends be installed
    state.reset()
    return directory


def cache_files(directory: Path) -> list[Path]:
    """Entry files and temp files of entries being written (see tritonplug/cache/disk.py for the layout)."""
    entries = directory / "entries"
    return sorted(p for p in entries.rglob("*") if p.is_file()) if entries.exists() else []


def valid_call_works(platform: str, cache: Path) -> None:
    if platform == "cpu":
        x = jax.device_put(np.arange(N, dtype=np.float32), jax.devices("cpu")[0])
        out = call(x, 2 * x)
        np.testing.assert_array_equal(np.asarray(out), 3 * np.arange(N, dtype=np.float32))
    else:
        lowered = jax.jit(lambda a, b: call(a, b)).trace(SPEC, SPEC).lower(lowering_platforms=("cuda",)).as_text()
        (kernel_call,) = kernel_calls(lowered)
        assert ".target sm_90" in kernel_call["kernel_call"]["kernel"]["ptx"]
    assert [p.suffix for p in cache_files(cache)] == [".bin"]  # the cache was live all along


def check_refused(case: Case, stage: str, platform: str, cache: Path) -> None:
    """The case raises its error at ``stage`` for ``platform``, caches nothing, and a valid call then works."""
    traced = None
    with pytest.raises(case.error, match=case.match):
        traced = jax.jit(case.fn).trace(SPEC, SPEC)
        traced.lower(lowering_platforms=(platform,))
    assert (traced is None) == (stage == "call site"), f"refused at the wrong stage (expected: {stage})"
    assert cache_files(cache) == []
    valid_call_works(platform, cache)
