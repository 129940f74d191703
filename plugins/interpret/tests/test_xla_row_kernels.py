"""Issue 38, the other row kernels: what their translations compile to on the CPU at model widths, and their numbers.

Survey (compiled HLO on the CPU, gather / scatter / while; ``xla_hlo_support.count_unfusible``), before the row
loops were vectorised (:mod:`tritonplug_interpret.xla.vectorise`) and after:

======================================================  ============  ============
kernel (rows x width)                                   before        now
======================================================  ============  ============
Liger RMSNorm backward, 8 x 2048 / 3072                 17 / 9 / 0    0 / 0 / 0
Liger RMSNorm backward, 64 x 4096                       3 / 2 / 1     0 / 0 / 0
Liger LayerNorm backward, 8 x 2048 / 3072               17 / 10 / 0   0 / 0 / 0
Liger LayerNorm backward, 64 x 4096                     3 / 3 / 1     0 / 0 / 0
Liger cross entropy, forward + backward, 8 x 32000      2 / 3 / 2     1 / 1 / 0
Liger cross entropy, forward + backward, 8 x 32768      2 / 3 / 2     1 / 1 / 0
Liger fused linear cross entropy, 16 x 2048, V 32000    3 / 4 / 3     0 / 0 / 1
Liger PolyNorm forward, 64 x 2048 (RSTD ``(rows, 3)``)   0 / 3 / 0     0 / 0 / 0
Liger PolyNorm backward, 64 x 2048, 4 programs          3 / 3 / 0     0 / 0 / 0
Liger LayerNorm backward, 64 x 2048, 5 programs         5 / 2 / 1     0 / 0 / 0
======================================================  ============  ============

A backward on a program count that does not divide the rows (a GPU's ``sm_count``: 132 programs over 16,384 rows
leave the last one 9 rows where the others walk 125; LayerNorm's and PolyNorm's here, at 5 and 132 programs)
runs its loop vectorised over the most trips a program makes, each trip predicated on the program's own bound
(``test_xla_uneven_loops.py``); it was a while loop with gathers and scatters.

PolyNorm's per-row scalars lie three elements apart (``RSTD_ptr + row * 3 + j``, and the backward's per-program
``dW`` partial sums the same way): windows of one element per program whose programs step 3, read and written as
column ``j`` of the buffer reshaped to rows of 3 (the window's unit axis), where they were a gather and a scatter
per scalar.

Already none before, at 8 x 2048, 8 x 3072 and 64 x 4096: Liger's LayerNorm, GeGLU and SwiGLU forward and
backward kernels, RMSNorm forward, Softmax forward (8 x 1024, 8 x 32000, 8 x 32768), ``examples/softmax.py``
and ``examples/layer_norm.py`` (forward and backward); RoPE in ``test_xla_fusible_ports.py``.

What is left, and why: cross entropy reads the logit at each row's label (``X_ptr + y``, ``y`` loaded from
memory) and writes its gradient there: one gather and one scatter of one element per row, whose positions
only the data decides. The fused linear cross entropy's while loop is the port's own ``lax.scan`` over
chunks of rows (its kernels translate to none). Liger's multi-block softmax kernel (online softmax, a
row in several blocks) is never launched by Liger (``calculate_settings`` refuses rows past 65536), and loops
whose trips carry values other than sums (online softmax, cross entropy past 32768 columns) still loop.
"""

from __future__ import annotations

import importlib
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from xla_box_kernels import row_loop_kernel
from xla_hlo_support import count_unfusible

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
NONE = {"gather": 0, "scatter": 0, "while": 0}
EPS = 1e-6
PATHS = ["xla", "interpret"]


@pytest.fixture(autouse=True)
def _xla_path(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")


def _liger(name: str):
    if importlib.util.find_spec("liger_kernel") is None:
        pytest.skip("liger_kernel is not installed (tox's cpu and corpus envs install it)")
    return importlib.import_module(name)


def _normal(*shape: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _layer_norm_reference(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + EPS) * w + b


@pytest.mark.parametrize("rows, hidden, programs", [(8, 3072, 1), (64, 4096, 1), (64, 2048, 5), (30, 1024, 4)])
def test_layer_norm_forward_and_backward(rows, hidden, programs):
    """``programs`` that do not divide the rows (a GPU's ``sm_count``): the last program walks fewer rows."""
    launchers = _liger("xla_row_launchers")
    x, w, b, dy = _normal(rows, hidden, seed=1), 1 + 0.1 * _normal(hidden, seed=2), _normal(hidden, seed=3), \
        _normal(rows, hidden, seed=4)
    forward = lambda x, w, b: launchers.layer_norm_forward(x, w, b, EPS)  # noqa: E731
    assert count_unfusible(forward, x, w, b) == NONE
    y, mean, rstd = jax.jit(forward)(x, w, b)
    np.testing.assert_allclose(np.asarray(y), _layer_norm_reference(x, w, b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mean), x.mean(1), rtol=1e-5, atol=1e-6)
    backward = lambda *args: launchers.layer_norm_backward(*args, programs)  # noqa: E731
    assert count_unfusible(backward, dy, x, w, mean, rstd) == NONE
    _, vjp = jax.vjp(_layer_norm_reference, x, w, b)
    for got, want in zip(jax.jit(backward)(dy, x, w, mean, rstd), vjp(dy), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", [3072, 4096])
def test_geglu_forward_and_backward(width):
    launchers = _liger("xla_row_launchers")
    a, b, dc = (_normal(8, width, seed=s) for s in (5, 6, 7))

    def reference(a, b):
        return jax.nn.gelu(a, approximate=True) * b
    assert count_unfusible(launchers.geglu_forward, a, b) == NONE
    assert count_unfusible(launchers.geglu_backward, a, b, dc) == NONE
    np.testing.assert_allclose(np.asarray(jax.jit(launchers.geglu_forward)(a, b)), reference(a, b), rtol=1e-5,
                               atol=1e-5)
    _, vjp = jax.vjp(reference, a, b)
    for got, want in zip(jax.jit(launchers.geglu_backward)(a, b, dc), vjp(dc), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


def _poly_norm_reference(x, w, b):
    norm = [u * jax.lax.rsqrt(jnp.mean(u * u, axis=-1, keepdims=True) + EPS) for u in (x ** 3, x ** 2, x)]
    return w[0] * norm[0] + w[1] * norm[1] + w[2] * norm[2] + b[0]


@pytest.mark.parametrize("programs", [1, 4, 5, 132])
def test_poly_norm_forward_and_backward(programs):
    """Per-row scalars three elements apart: the RSTDs the forward stores and the backward loads, the backward's
    per-program partial sums of the weights' gradient (``programs`` of them) — windows, no gather or scatter."""
    launchers = _liger("xla_row_launchers")
    rows, hidden = 64, 2048
    x, dy = 0.5 * _normal(rows, hidden, seed=11), _normal(rows, hidden, seed=12)
    w, b = np.array([0.3, -0.7, 1.2], np.float32), np.array([0.25], np.float32)
    forward = lambda x, w, b: launchers.poly_norm_forward(x, w, b, EPS)  # noqa: E731
    assert count_unfusible(forward, x, w, b) == NONE
    y, rstd = jax.jit(forward)(x, w, b)
    np.testing.assert_allclose(np.asarray(y), _poly_norm_reference(x, w, b), rtol=1e-4, atol=1e-4)
    want_rstd = [1 / np.sqrt(np.mean(u * u, axis=-1) + EPS) for u in (x ** 3, x ** 2, x)]
    np.testing.assert_allclose(np.asarray(rstd), np.stack(want_rstd, axis=1), rtol=1e-5)
    backward = lambda dy, x, w, rstd: launchers.poly_norm_backward(dy, x, w, rstd, programs)  # noqa: E731
    assert count_unfusible(backward, dy, x, w, rstd) == NONE
    _, vjp = jax.vjp(_poly_norm_reference, x, w, b)
    for got, want in zip(jax.jit(backward)(dy, x, w, rstd), vjp(dy), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-4, atol=2e-3)


def _gated_reference(x, w, z, groups):
    gated = x * jax.nn.silu(z)
    rows = gated.reshape(gated.shape[0], groups, -1)
    normed = rows * jax.lax.rsqrt(jnp.mean(rows * rows, axis=-1, keepdims=True) + EPS)
    return normed.reshape(gated.shape) * w


@pytest.mark.parametrize("groups, sm_count", [(1, 4), (1, 3), (4, 3), (2, 5)])
def test_fla_gated_rms_norm_forward_and_backward(groups, sm_count):
    """flash-linear-attention's gated RMSNorm (Mamba-2's): the backward's programs walk their rows through scalar
    pointers the loop advances (``x += stride``), on program counts that divide the rows or not."""
    pytest.importorskip("fla", reason="fla-core is not installed (tox's cpu and corpus envs install it)")
    launchers = _liger("xla_row_launchers")
    rows, hidden = 64, 1024
    x, z, dy = (_normal(rows, hidden, seed=s) for s in (21, 22, 23))
    w = 1 + 0.1 * _normal(hidden, seed=24)
    forward = lambda x, w, z: launchers.gated_rms_norm_forward(x, w, z, groups, EPS)  # noqa: E731
    assert count_unfusible(forward, x, w, z) == NONE
    y, rstd = jax.jit(forward)(x, w, z)
    np.testing.assert_allclose(np.asarray(y), _gated_reference(x, w, z, groups), rtol=1e-4, atol=1e-4)
    backward = lambda *a: launchers.gated_rms_norm_backward(*a, groups, EPS, sm_count)  # noqa: E731
    assert count_unfusible(backward, dy, x, w, z, rstd)["while"] == 0
    _, vjp = jax.vjp(lambda x, w, z: _gated_reference(x, w, z, groups), x, w, z)
    want_dx, want_dw, want_dz = vjp(dy)
    for got, want in zip(jax.jit(backward)(dy, x, w, z, rstd), (want_dx, want_dw, want_dz), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-4, atol=2e-3)


@pytest.mark.parametrize("vocab", [1024, 32000])
def test_softmax_forward(vocab):
    launchers = _liger("xla_row_launchers")
    x = _normal(8, vocab, seed=8)
    assert count_unfusible(launchers.softmax_forward, x) == NONE
    np.testing.assert_allclose(np.asarray(jax.jit(launchers.softmax_forward)(x)), jax.nn.softmax(x, axis=-1),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("vocab", [32000, 32768])
def test_cross_entropy_keeps_only_the_labels_gather_and_scatter(vocab):
    """The row loops over the vocabulary (one block of 32768: one trip) are vectorised, the rows are windows; the
    label's logit and its gradient stay a gather and a scatter of one element per row (positions from data)."""
    port = _liger("ports.liger_cross_entropy")
    x = _normal(8, vocab, seed=9)
    target = np.random.default_rng(10).integers(0, vocab, 8).astype(np.int32)
    target[3] = -100    # an ignored row: the kernel's other branch zeroes its gradient

    def loss_and_grad(x, target):
        return jax.value_and_grad(lambda x: port.liger_cross_entropy(x, target))(x)
    assert count_unfusible(loss_and_grad, x, target) == {"gather": 1, "scatter": 1, "while": 0}
    loss, grad = jax.jit(loss_and_grad)(x, target)
    want_loss, want_grad = jax.value_and_grad(lambda x: port.cross_entropy_reference(x, target))(x)
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want_grad), rtol=1e-5, atol=1e-8)
    assert np.all(np.asarray(grad)[3] == 0)


def _row_loop(rows: int, programs: int, n_cols: int, block: int, y_rows: int | None = None):
    per = -(-rows // programs)

    def fn(x, w):
        return tritonplug.triton_call(
            x, w, n_rows=rows, rows_per_program=per, n_cols=n_cols, kernel=row_loop_kernel, grid=(programs,),
            BLOCK=block,
            out_type=(jax.ShapeDtypeStruct((y_rows or rows, n_cols), jnp.float32),
                      jax.ShapeDtypeStruct((programs, n_cols), jnp.float32)))
    return fn, per


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rows, programs, n_cols, block", [(12, 3, 100, 128), (10, 3, 64, 64), (7, 1, 96, 128)])
def test_a_row_loop_runs_as_one_step(path, rows, programs, n_cols, block, monkeypatch):
    """A program walking its rows (a store inside the loop, a pointer advanced by a static step, a sum carried
    out): the trips at once, every access a window over (programs, trips); the last program's loop may be
    shorter (10 rows over 3 programs): then the trips run as many as the longest, each predicated on the
    program's own bound (``test_xla_uneven_loops.py``)."""
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", path)
    fn, per = _row_loop(rows, programs, n_cols, block)
    x, w = _normal(rows, n_cols, seed=11), _normal(n_cols, seed=12)
    if path == "xla":
        assert count_unfusible(fn, x, w) == NONE
    y, sums = jax.jit(fn)(x, w)
    np.testing.assert_allclose(np.asarray(y), x * w, rtol=1e-6, atol=1e-6)
    want = np.stack([x[p * per:(p + 1) * per].sum(0) for p in range(programs)])
    np.testing.assert_allclose(np.asarray(sums), want, rtol=1e-5, atol=1e-5)


def test_checked_mode_names_a_vectorised_loops_first_bad_trip(monkeypatch):
    """Checked mode: a store past the buffer in trips 6 and 7 of 8 is reported at the first (byte offset 6 rows in)."""
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "1")
    fn, _ = _row_loop(8, 1, 16, 16, y_rows=6)
    x, w = _normal(8, 16, seed=13), _normal(16, seed=14)
    with pytest.raises(Exception, match=rf"row_loop_kernel.*y_ptr.*byte offset {6 * 16 * 4}\b"):
        np.asarray(jax.jit(fn)(x, w)[0])
