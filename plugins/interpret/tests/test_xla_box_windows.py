"""Top-level accesses as boxes of the reshaped buffer (``xla/windows.py``, issue 38): numbers against NumPy, and
no gather or scatter in the compiled program.

The forms: a row narrower than its power-of-two block (the mask ``cols < n`` bounds the window, ``other`` fills
the rest, and a store leaves the columns past ``n`` as they were), a per-row scalar store, blocks whose last one
runs past the buffer's end, a row every program reads (a weight), a table row picked by ``pid % seq`` (the
program index split in two), and the half rows of every head that RoPE rotates (2-D blocks, part of each row).
Outputs that the kernel writes only in part come in as refs filled with ``OLD``, a value the kernel never
writes; ``other`` is never zero, so that a window ignoring it shows in the sums. Each case runs on the XLA path
and on Triton's interpreter (``TRITONPLUG_CPU_PATH=interpret``), both against NumPy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from xla_box_kernels import (
    half_rows_kernel,
    narrow_rows_kernel,
    positions_kernel,
    ragged_rows_kernel,
    tail_blocks_kernel,
)
from xla_hlo_support import count_unfusible

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
RNG = np.random.default_rng(38)
OLD = -7.0
FILL = 3.0
NONE = {"gather": 0, "scatter": 0, "while": 0}
PATHS = ["xla", "interpret"]


@pytest.fixture(autouse=True)
def _xla_path(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")


def _call_narrow(x_stride: int, y_stride: int, n: int, block: int, rows: int = 6):
    """``narrow_rows_kernel`` with ``total`` as its only result (``out_type``) and ``y`` a ref."""
    def fn(x, w, y):
        out = jax.new_ref(y)
        total = jax.new_ref(jnp.full((rows,), OLD, jnp.float32))
        tritonplug.triton_call(x, w, out, total, x_stride, y_stride, n, FILL, kernel=narrow_rows_kernel,
                               out_type=(), grid=(rows,), BLOCK=block)
        return out[...], total[...]
    x = RNG.standard_normal((rows, x_stride)).astype(np.float32)
    w = RNG.standard_normal(n).astype(np.float32)
    y = np.full((rows, y_stride), OLD, np.float32)
    return fn, (x, w, y)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("x_stride, y_stride, n, block", [(37, 48, 37, 64), (40, 37, 37, 64), (96, 100, 96, 128)])
def test_a_row_narrower_than_its_block(path, x_stride, y_stride, n, block, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", path)
    fn, (x, w, y) = _call_narrow(x_stride, y_stride, n, block)
    if path == "xla":
        assert count_unfusible(fn, x, w, y) == NONE
    got_y, got_total = jax.jit(fn)(x, w, y)
    want = y.copy()
    want[:, :n] = x[:, :n] * w + 1.0
    np.testing.assert_allclose(np.asarray(got_y), want, rtol=1e-6, atol=1e-6)
    assert np.all(np.asarray(got_y)[:, n:] == OLD), "a masked store wrote past the row"
    np.testing.assert_allclose(np.asarray(got_total), x[:, :n].sum(1) + (block - n) * FILL, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n, block", [(1000, 128), (100, 64), (256, 256)])
def test_blocks_that_end_past_the_buffer(path, n, block, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", path)
    grid = -(-n // block)

    def fn(x):
        return tritonplug.triton_call(x, n=n, fill=FILL, kernel=tail_blocks_kernel, grid=(grid,), BLOCK=block,
                                      out_type=(jax.ShapeDtypeStruct((n,), jnp.float32),
                                                jax.ShapeDtypeStruct((grid,), jnp.float32)))
    x = RNG.standard_normal(n).astype(np.float32)
    if path == "xla":
        assert count_unfusible(fn, x) == NONE
    y, partial = jax.jit(fn)(x)
    np.testing.assert_allclose(np.asarray(y), 2 * x, rtol=1e-6)
    padded = np.concatenate([x, np.full(grid * block - n, FILL, np.float32)])
    np.testing.assert_allclose(np.asarray(partial), padded.reshape(grid, block).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("path", PATHS)
def test_a_table_row_per_position_and_a_masked_tail(path, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", path)
    batch, seq, width, n = 3, 5, 24, 20
    x = RNG.standard_normal((batch * seq, width)).astype(np.float32)
    table = RNG.standard_normal((seq, width)).astype(np.float32)
    y0 = np.full((batch * seq, width), OLD, np.float32)

    def fn(x, table, y0):
        y = jax.new_ref(y0)
        tritonplug.triton_call(x, table, y, seq, width, n, kernel=positions_kernel, out_type=(),
                               grid=(batch * seq,), BLOCK=32)
        return y[...]
    if path == "xla":
        assert count_unfusible(fn, x, table, y0) == NONE
    want = y0.copy()
    want[:, :n] = x[:, :n] * np.tile(table, (batch, 1))[:, :n]
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(x, table, y0)), want, rtol=1e-6)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("heads, head_dim, half, pad_heads, pad_half", [(6, 20, 8, 8, 8), (4, 16, 8, 4, 8),
                                                                         (3, 12, 5, 4, 8)])
def test_half_rows_of_every_head_in_place(path, heads, head_dim, half, pad_heads, pad_half, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", path)
    rows = 5
    q = RNG.standard_normal((rows, heads, head_dim)).astype(np.float32)

    def fn(q0):
        q = jax.new_ref(q0)
        tritonplug.triton_call(q, heads * head_dim, heads, head_dim, half, kernel=half_rows_kernel, out_type=(),
                               grid=(rows,), PAD_HEADS=pad_heads, PAD_HALF=pad_half)
        return q[...]
    if path == "xla":
        assert count_unfusible(fn, q) == NONE
    a, b = q[..., :half], q[..., half:2 * half]
    want = np.concatenate([a + b, a - b, q[..., 2 * half:]], axis=-1)
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(q)), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("path", PATHS)
def test_a_mask_that_differs_per_row_leaves_the_rest_untouched(path, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", path)
    rows, stride, n = 7, 40, 30
    x = RNG.standard_normal((rows, stride)).astype(np.float32)
    y0 = np.full((rows, stride), OLD, np.float32)

    def fn(x, y0):
        y = jax.new_ref(y0)
        tritonplug.triton_call(x, y, stride, n, FILL, kernel=ragged_rows_kernel, out_type=(), grid=(rows,), BLOCK=64)
        return y[...]
    if path == "xla":
        assert count_unfusible(fn, x, y0) == NONE
    live = np.arange(stride)[None, :] < n - np.arange(rows)[:, None]
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x, y0)), np.where(live, x + np.float32(FILL), y0))
