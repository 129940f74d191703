"""Issue 38, item 1 (the CPU part): the Liger ports' translations at the widths models use hold no gather, scatter
or while loop in the compiled HLO, and their numbers match the ports' ``jnp`` references.

Widths: the table of the issue and the Llama example's 1b config (hidden 2048, ffn 5632, 16 query heads and 8 kv
heads of 128); a few rows only, since the widths decide the translation (and XLA:CPU compiles faster).

Before this change (compiled HLO on the CPU, 8 rows; RoPE with batch 1): RMSNorm forward at hidden 2048 held 1
scatter (RSTD, a 0-d store per row), at 3072 1 gather and 2 scatters (rows narrower than their block of 4096);
SwiGLU forward at 5632 2 gathers and 1 scatter, its backward 3 gathers and 2 scatters (block 8192); RoPE forward
and backward 4 gathers and 4 scatters each (the half rows of every head). SwiGLU at 2048 held none. Now all of
these hold none (batch 2 for RoPE: its cos/sin rows are ``pid % seq``).

RMSNorm's backward: on the CPU the port launches one program (``sm_count`` is 1 off the GPU), which walks every
row in an ``scf.for`` and stores ``dX`` inside it. Before the loop was vectorised (:mod:`.xla.vectorise`) the
program ran sequentially and its loads and stores were per-element gathers and scatters (at 8 rows, unrolled: 17
gathers, 9 scatters; at 64 rows a while loop with 3 gathers and 2 scatters); now its trips run at once and its
accesses are windows over the rows: none at 8 or 64 rows (:func:`test_rms_norm_backward`).
"""

from __future__ import annotations

import importlib.util

import jax
import numpy as np
import pytest
from helpers import requires_backend
from xla_hlo_support import count_unfusible

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
NONE = {"gather": 0, "scatter": 0, "while": 0}
EPS = 1e-6


@pytest.fixture(autouse=True)
def _xla_path(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")


def _port(name: str):
    if importlib.util.find_spec("liger_kernel") is None:
        pytest.skip("liger_kernel is not installed (tox's cpu and corpus envs install it)")
    return importlib.import_module(f"ports.{name}")


def _normal(*shape: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("hidden", [2048, 3072])
def test_rms_norm_forward(hidden):
    port = _port("liger_rms_norm")
    x, w = _normal(8, hidden, seed=1), 1 + 0.1 * _normal(hidden, seed=2)

    def forward(x, w):
        y, _, rstd, *_ = port.rms_norm_forward(x, w, EPS, 0.0, "llama", None)
        return y, rstd
    assert count_unfusible(forward, x, w) == NONE
    y, rstd = jax.jit(forward)(x, w)
    np.testing.assert_allclose(np.asarray(y), port.rms_norm_reference(x, w, EPS), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(rstd), 1 / np.sqrt((x.astype(np.float64) ** 2).mean(1) + EPS), rtol=1e-5)


@pytest.mark.parametrize("width", [2048, 5632])
def test_swiglu_forward_and_backward(width):
    port = _port("liger_swiglu")
    a, b, dc = (_normal(8, width, seed=s) for s in (3, 4, 5))
    forward = lambda a, b: port.swiglu_forward(a, b)[2]  # noqa: E731
    backward = lambda a, b, dc: port.swiglu_backward(a, b, dc)  # noqa: E731
    assert count_unfusible(forward, a, b) == NONE
    assert count_unfusible(backward, a, b, dc) == NONE
    np.testing.assert_allclose(np.asarray(jax.jit(forward)(a, b)), port.swiglu_reference(a, b), rtol=1e-5, atol=1e-5)
    _, vjp = jax.vjp(port.swiglu_reference, a, b)
    for got, want in zip(jax.jit(backward)(a, b, dc), vjp(dc), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def _rope_inputs(batch: int = 2, seq: int = 8, q_heads: int = 16, kv_heads: int = 8, head_dim: int = 128):
    q, k = _normal(batch, q_heads, seq, head_dim, seed=6), _normal(batch, kv_heads, seq, head_dim, seed=7)
    freqs = np.arange(seq, dtype=np.float32)[:, None] / 10000.0 ** (np.arange(head_dim // 2) / (head_dim // 2))
    emb = np.concatenate([freqs, freqs], axis=-1)[None].astype(np.float32)
    return q, k, np.cos(emb), np.sin(emb)


def test_rope_forward_and_backward():
    port = _port("liger_rope")
    q, k, cos, sin = _rope_inputs()
    forward = lambda q, k, c, s: port.rope_forward(q, k, c, s)[:2]  # noqa: E731
    backward = lambda dq, dk, c, s: port.rope_backward(dq, dk, c, s)  # noqa: E731
    assert count_unfusible(forward, q, k, cos, sin) == NONE
    assert count_unfusible(backward, q, k, cos, sin) == NONE
    for got, want in zip(jax.jit(forward)(q, k, cos, sin), port.rope_reference(q, k, cos, sin), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    dq, dk = _normal(*q.shape, seed=8), _normal(*k.shape, seed=9)
    _, vjp = jax.vjp(lambda q, k: port.rope_reference(q, k, cos, sin), q, k)
    for got, want in zip(jax.jit(backward)(dq, dk, cos, sin), vjp((dq, dk)), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [8, 64])
def test_rms_norm_backward(rows):
    port = _port("liger_rms_norm")
    hidden = 3072
    x, w, dy = _normal(rows, hidden, seed=10), 1 + 0.1 * _normal(hidden, seed=11), _normal(rows, hidden, seed=12)
    rstd = (1 / np.sqrt((x.astype(np.float64) ** 2).mean(1) + EPS)).astype(np.float32)
    block, warps = port.calculate_settings(hidden)

    def backward(dy, x, w, rstd):
        return port.rms_norm_backward(dy, x, w, rstd, 0.0, 0, block, warps, True, None)
    assert count_unfusible(backward, dy, x, w, rstd) == NONE
    _, vjp = jax.vjp(lambda x, w: port.rms_norm_reference(x, w, EPS), x, w)
    for got, want in zip(jax.jit(backward)(dy, x, w, rstd), vjp(dy), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
