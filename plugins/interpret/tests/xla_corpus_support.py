"""What the XLA-path corpus tests (``test_xla_corpus_rows.py``, ``test_xla_corpus_tiles.py``) share: a
fixture that puts the CPU backend on the XLA path, a call that checks the kernel was translated (no
fallback log line, no host call in the lowered program), and the same call in Triton's interpreter."""

from __future__ import annotations

import logging
from typing import Any

import jax
import numpy as np
import pytest

import tritonplug

HOST_CALL = "tritonplug_host_kernel"  # the interpreter path's FFI target
FALLBACK = "runs in Triton's interpreter"


def xla_path_fixture() -> Any:
    """An autouse fixture to assign in a corpus test module: ``_xla_path = xla_path_fixture()``."""

    @pytest.fixture(autouse=True)
    def _xla_path(monkeypatch):
        """These tests are about the XLA path, whatever TRITONPLUG_CPU_PATH the run forces elsewhere."""
        monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")
    return _xla_path


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def sds(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


def call(kernel, *args, out, grid, **kw):
    return tritonplug.triton_call(*args, kernel=kernel, out_type=out, grid=grid, **kw)


def run_xla(fn, *args, caplog):
    """``jax.jit(fn)(*args)`` after checking that the kernel took the XLA path."""
    with caplog.at_level(logging.WARNING, logger="tritonplug.interpret"):
        text = jax.jit(fn).lower(*args).as_text()
    fallbacks = [r.getMessage() for r in caplog.records if FALLBACK in r.getMessage()]
    assert not fallbacks, fallbacks
    assert HOST_CALL not in text, "the kernel was not translated to XLA"
    return jax.tree_util.tree_map(np.asarray, jax.jit(fn)(*args))


def run_interpreter(fn, *args, monkeypatch):
    """The same call in Triton's interpreter (the reference where Triton's rounding is the point)."""
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "interpret")
    try:
        text = jax.jit(lambda *a: fn(*a)).lower(*args).as_text()
        assert HOST_CALL in text
        return jax.tree_util.tree_map(np.asarray, jax.jit(lambda *a: fn(*a))(*args))
    finally:
        monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")


def softmax_ref(x):
    """Softmax along the last axis, the reference of the softmax and attention kernels."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
