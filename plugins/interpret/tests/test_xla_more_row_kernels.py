"""Issue 38, more row kernels (Liger-Kernel 0.8.5's ReLU², fused residual add + RMSNorm, DyT, Softmax's backward, KL
divergence):
what their translations compile to on the CPU at model widths (gather / scatter / while in the compiled HLO,
``xla_hlo_support.count_unfusible``), and their numbers against ``jnp``. ``test_xla_row_kernels.py`` counted the
first ones.

None holds a gather, scatter or while loop, at any width, but DyT's backward at a width its column tile does not
divide. DyT launches a 2-D grid, ``(column tiles, rows)``, each program a tile of ``BLOCK_N`` columns of one row,
masked by ``col < N``; its backward walks the rows in a grid-stride loop (``range(pid, M, tl.num_programs(1))``),
vectorised since the lane evaluator knows ``tl.num_programs``. At 5632 columns in tiles of 1024 the last tile of
each row runs past the row's end under its mask: the forward's accesses and the backward's per-program sums are
read and written as rows padded to whole tiles (:func:`tritonplug_interpret.xla.windows._folded`), but the loop's
accesses, whose lanes run over the programs and the trips, are not folded: two gathers and a scatter, counted here
so that a change is seen.
"""

from __future__ import annotations

import importlib
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from xla_hlo_support import count_unfusible

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
NONE = {"gather": 0, "scatter": 0, "while": 0}
EPS = 1e-6
WIDTHS = [2048, 3072, 4096, 5632]


@pytest.fixture(autouse=True)
def _xla_path(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")


@pytest.fixture(scope="module")
def launchers():
    if importlib.util.find_spec("liger_kernel") is None:
        pytest.skip("liger_kernel is not installed (tox's cpu and corpus envs install it)")
    return importlib.import_module("xla_more_row_launchers")


def _normal(*shape: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _close(got, want, tol=1e-5):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


@pytest.mark.parametrize("width", WIDTHS)
def test_relu_squared(launchers, width):
    x, dy = _normal(8, width, seed=1), _normal(8, width, seed=2)

    def reference(x):
        return jnp.maximum(x, 0) ** 2
    assert count_unfusible(launchers.relu_squared_forward, x) == NONE
    assert count_unfusible(launchers.relu_squared_backward, x, dy) == NONE
    _close([jax.jit(launchers.relu_squared_forward)(x)], [reference(x)])
    _close([jax.jit(launchers.relu_squared_backward)(x, dy)], jax.vjp(reference, x)[1](dy))


def _rms_norm(s, w):
    return s * jax.lax.rsqrt(jnp.mean(s * s, axis=-1, keepdims=True) + EPS) * w


@pytest.mark.parametrize("width, rows, programs", [(2048, 8, 1), (3072, 8, 4), (4096, 64, 5), (5632, 16, 132)])
def test_fused_add_rms_norm(launchers, width, rows, programs):
    """The backward on ``programs`` that divide the rows or not (a GPU's ``sm_count``: 132), its residual's
    gradient ``dS_out`` added."""
    x, r, dy, ds = (_normal(rows, width, seed=s) for s in (3, 4, 5, 6))
    w = 1 + 0.1 * _normal(width, seed=7)
    forward = lambda x, r, w: launchers.fused_add_rms_norm_forward(x, r, w, EPS)  # noqa: E731
    assert count_unfusible(forward, x, r, w) == NONE
    y, s, rstd = jax.jit(forward)(x, r, w)
    _close([y, s, rstd], [_rms_norm(x + r, w), x + r, jax.lax.rsqrt(jnp.mean((x + r) ** 2, axis=-1) + EPS)])
    backward = lambda *a: launchers.fused_add_rms_norm_backward(*a, programs)  # noqa: E731
    assert count_unfusible(backward, dy, ds, s, w, rstd) == NONE
    want_ds, want_dw = jax.vjp(_rms_norm, x + r, w)[1](dy)
    _close(jax.jit(backward)(dy, ds, s, w, rstd), [want_ds + ds, want_dw], tol=2e-4)


def _dyt(x, alpha, gamma, beta):
    return jnp.tanh(alpha[0] * x) * gamma + beta


@pytest.mark.parametrize("width, programs", [(2048, 3), (3072, 4), (4096, 8), (5632, 3)])
def test_dyt(launchers, width, programs):
    """The backward's grid-stride row loop (``range(pid, M, tl.num_programs(1))``) over ``programs`` (Liger's
    ``NUM_SMS``) that divide the 8 rows or not: vectorised, no while loop."""
    rows = 8
    x, dy = _normal(rows, width, seed=8), _normal(rows, width, seed=9)
    alpha, gamma, beta = np.array([0.7], np.float32), 1 + 0.1 * _normal(width, seed=10), _normal(width, seed=11)
    assert count_unfusible(launchers.dyt_forward, x, alpha, gamma, beta) == NONE
    _close([jax.jit(launchers.dyt_forward)(x, alpha, gamma, beta)], [_dyt(x, alpha, gamma, beta)])
    backward = lambda dy, x, alpha, gamma: launchers.dyt_backward(dy, x, alpha, gamma, programs)  # noqa: E731
    tiled = width % 1024 != 0   # the module's docstring: the loop's accesses past the row's end
    want = {"gather": 2, "scatter": 1, "while": 0} if tiled else NONE
    assert count_unfusible(backward, dy, x, alpha, gamma) == want
    dx, dalpha, dgamma, dbeta = jax.vjp(_dyt, x, alpha, gamma, beta)[1](dy)
    _close(jax.jit(backward)(dy, x, alpha, gamma), [dx, dalpha[0], dgamma, dbeta], tol=2e-4)


@pytest.mark.parametrize("width", [1024, 2048, 5632, 8192])
def test_softmax_backward(launchers, width):
    x, dy = _normal(8, width, seed=12), _normal(8, width, seed=13)
    y = jax.nn.softmax(x, axis=-1)
    assert count_unfusible(launchers.softmax_backward, dy, y) == NONE
    want = jax.vjp(lambda x: jax.nn.softmax(x, axis=-1), x)[1](dy)
    _close([jax.jit(launchers.softmax_backward)(dy, y)], want, tol=1e-6)


@pytest.mark.parametrize("vocab", [32000, 50000, 128256])
def test_kl_divergence(launchers, vocab):
    """Each row walked in blocks of 16384 (Liger's ``MAX_FUSED_SIZE``), the last past the row's end: the loop's
    trips are column tiles, folded into rows padded to whole blocks."""
    y = np.asarray(jax.nn.log_softmax(_normal(4, vocab, seed=14), axis=-1))
    t = np.asarray(jax.nn.softmax(_normal(4, vocab, seed=15), axis=-1))
    want = t * (np.log(np.maximum(t, 1e-10)) - y)
    for reduction, expected in ((0, want), (1, want.sum(-1))):
        forward = lambda y, t, reduction=reduction: launchers.kldiv_forward(y, t, reduction)  # noqa: E731
        assert count_unfusible(forward, y, t) == NONE
        _close([jax.jit(forward)(y, t)], [expected], tol=1e-6)
    assert count_unfusible(launchers.kldiv_backward, t) == NONE
    _close([jax.jit(launchers.kldiv_backward)(t)], [-t], tol=0)
