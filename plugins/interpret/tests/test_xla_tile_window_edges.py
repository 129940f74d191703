"""The edges of the XLA path's fast stores: which layouts ``xla/tiles.py`` may take as a tiling and which it must
leave to the general scatter, and the tile shapes it transposes.

A tiling puts every program's block in place by a transposition, so taking a layout that is not exactly a grid of
whole tiles writes the wrong elements (or fails), and refusing one that is only costs speed: each test checks the
numbers against NumPy (the buffer comes in as a ref filled with a value the kernel never writes, so a lane written
where it should not be shows) and whether the store was planned as a tiling. The layouts refused: rows that are not
whole tiles, tiles narrower than a row that do not divide it, tiles shifted by a row, every other column, and a
pointer advanced in a loop (its offsets are not known when the plan is made). The layouts taken: tiles that are not
square, a block with a size-1 dimension between its rows and columns, and a block stored transposed.

The windows (``xla/windows.py``: top-level accesses read and written as slices of the buffer) are checked the same
way where their padding and shapes matter: blocks that start before the buffer or end past it, a store in a loop
over chunks (one window of every program and trip), a row narrower than its block, a single program, and a row
every program reads (a program axis of stride 0). Each asserts that the accesses were planned as windows, since a
window refused only falls back to the (right) gather or scatter.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from test_xla_masked_stores import OLD, plans  # noqa: F401 (plans: a fixture)

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]


@triton.jit
def _tile_kernel(x_ptr, out_ptr, M, N, stride, ROW0: tl.constexpr, STEP: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr):
    rows = ROW0 + tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN) * STEP
    offs = rows[:, None] * stride + cols[None, :]
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.abs(x) * 2 + 1, mask=mask)


@triton.jit
def _middle_one_kernel(x_ptr, out_ptr, stride, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    offs = rows[:, None, None] * stride + cols[None, None, :]      # a [BM, 1, BN] block
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.abs(x) * 2 + 1)


@triton.jit
def _transposed_kernel(x_ptr, out_ptr, stride, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    offs = rows[None, :] * stride + cols[:, None]                  # a [BN, BM] block: its columns first
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.abs(x) * 2 + 1)


@triton.jit
def _advanced_kernel(x_ptr, out_ptr, skip_ptr, stride, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    offs = rows[:, None] * stride + cols[None, :]
    x = tl.load(x_ptr + offs)
    ptrs = out_ptr + offs
    for _ in range(0, tl.load(skip_ptr)):   # a loaded trip count: offsets unknown to the plan
        ptrs += BM * stride
    tl.store(ptrs, tl.abs(x) * 2 + 1)


def _call(kernel, shape, grid, *args, **constexprs):
    """``kernel(x, out, *args)`` over ``grid`` on a random ``x`` and an ``out`` ref holding ``OLD``: (x, out)."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)

    def fn(a, b):
        out = jax.new_ref(b)
        tritonplug.triton_call(a, out, *args, kernel=kernel, out_type=(), grid=grid, **constexprs)
        return out[...]

    text = jax.jit(fn).lower(x, np.full(shape, OLD, np.float32)).as_text()
    assert "tritonplug_host_kernel" not in text, "the kernel was not translated to XLA"
    return x, np.asarray(jax.jit(fn)(x, np.full(shape, OLD, np.float32)))


def _written(x, rows, cols):
    """``OLD`` everywhere but at ``rows`` x ``cols``, which hold the kernels' ``2 |x| + 1``."""
    out = np.full(x.shape, OLD, np.float32)
    out[np.ix_(rows, cols)] = np.abs(x[np.ix_(rows, cols)]) * 2 + 1
    return out


def _tiled(made) -> bool:
    return any(p.tilings for p in made)


@pytest.mark.parametrize(("shape", "grid", "block", "row0", "step", "tiled"), [
    ((64, 64), (8, 4), (8, 16), 0, 1, True),        # tiles that are not square: taken
    ((40, 64), (2, 4), (16, 16), 0, 1, False),      # 32 of 40 rows: the rows are not whole tiles
    ((32, 48), (2, 1), (16, 32), 0, 1, False),      # 32 of 48 columns: a tile's width does not divide the row
    ((64, 64), (4, 4), (16, 16), 1, 1, False),      # every tile one row down (the last one masked past the end)
    ((64, 64), (4, 4), (16, 16), 0, 2, False),      # every other column: tiles that overlap, odd columns untouched
], ids=["8x16-tiles", "rows-not-whole-tiles", "width-not-dividing", "shifted-a-row", "every-other-column"])
def test_a_store_is_a_tiling_only_where_its_blocks_are_the_whole_buffer_in_whole_tiles(
        plans, shape, grid, block, row0, step, tiled):  # noqa: F811 (plans: the fixture)
    m, n = shape
    bm, bn = block
    x, got = _call(_tile_kernel, shape, grid, m, n, n, ROW0=row0, STEP=step, BM=bm, BN=bn)
    assert _tiled(plans) == tiled
    # a 2-D block over a 2-D grid is a box (four axes, two of them programs'); every other column is not (stride 2)
    assert _windowed(plans, "tt.load") == (step == 1)
    rows = np.arange(row0, row0 + grid[0] * bm)
    cols = (np.arange(grid[1])[:, None] * bn + np.arange(bn)[None, :] * step).ravel()
    np.testing.assert_array_equal(got, _written(x, rows[rows < m], np.unique(cols[cols < n])))


def test_a_block_with_a_size_one_dimension_between_its_rows_and_columns_is_a_tiling(plans):  # noqa: F811
    x, got = _call(_middle_one_kernel, (64, 64), (4, 2), 64, BM=16, BN=32)
    assert _tiled(plans)
    np.testing.assert_array_equal(got, np.abs(x) * 2 + 1)


def test_a_block_stored_with_its_columns_first_is_a_tiling(plans):  # noqa: F811
    x, got = _call(_transposed_kernel, (64, 64), (2, 4), 64, BM=32, BN=16)
    assert _tiled(plans)
    np.testing.assert_array_equal(got, np.abs(x) * 2 + 1)


def test_a_store_through_a_pointer_advanced_in_a_loop_is_not_a_tiling(plans):  # noqa: F811
    """The trip count is loaded (zero trips here), so the plan cannot know where the blocks land, though they do
    tile the buffer: the store must stay a scatter."""
    x, got = _call(_advanced_kernel, (64, 64), (4, 4), np.zeros(1, np.int32), 64, BM=16, BN=16)
    assert not _tiled(plans)
    np.testing.assert_array_equal(got, np.abs(x) * 2 + 1)


# ------------------------------------------------------------------ windows (xla/windows.py)


@triton.jit
def _shifted_block_kernel(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK - SHIFT + tl.arange(0, BLOCK)
    mask = (offs >= 0) & (offs < n)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.abs(x) * 2 + 1, mask=mask)


@triton.jit
def _chunked_kernel(x_ptr, out_ptr, n, CHUNKS: tl.constexpr, BLOCK: tl.constexpr):
    for j in range(0, CHUNKS):
        offs = (tl.program_id(0) * CHUNKS + j) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, tl.abs(x) * 2 + 1, mask=mask)


def _windowed(made, name: str) -> bool:
    """Whether an access ``name`` (``tt.load``, ``tt.store``) was planned as a window (not a gather or scatter)."""
    return any(op.name == name for p in made for op in p.windows)


@pytest.mark.parametrize(("size", "shift", "grid"), [(1000, 100, 9), (1052, 100, 9), (1000, 0, 8), (1024, 0, 8)],
                         ids=["before-and-past", "before", "past", "inside"])
def test_windows_that_start_before_the_buffer_or_end_past_it(plans, size, shift, grid):  # noqa: F811
    """Blocks of 128 from ``-shift``: the window is padded where it starts before the buffer (``lo``) or ends past
    it (``hi``), and only ``[0, n)`` may change."""
    n, block = size - 100, 128
    x, got = _call(_shifted_block_kernel, (size,), (grid,), n, SHIFT=shift, BLOCK=block)
    assert _windowed(plans, "tt.load") and _windowed(plans, "tt.store")
    np.testing.assert_array_equal(got, np.where(np.arange(size) < n, np.abs(x) * 2 + 1, np.float32(OLD)))


def test_a_store_in_a_loop_over_chunks_is_one_window_of_every_program_and_trip(plans):  # noqa: F811
    size, n, chunks, block = 4096, 3000, 4, 128
    x, got = _call(_chunked_kernel, (size,), (size // (chunks * block),), n, CHUNKS=chunks, BLOCK=block)
    assert _windowed(plans, "tt.load") and _windowed(plans, "tt.store")
    np.testing.assert_array_equal(got, np.where(np.arange(size) < n, np.abs(x) * 2 + 1, np.float32(OLD)))


@triton.jit
def _row_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    offs = tl.program_id(0) * stride + cols
    x = tl.load(x_ptr + offs, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + offs, tl.abs(x) * 2 + 1, mask=cols < n_cols)


def test_a_row_narrower_than_its_block_is_read_and_written_as_windows(plans):  # noqa: F811
    """100 live lanes of a 128-lane block per row: the windows' last axis has an extent below its size, so the
    read pads the masked lanes and the write merges only the live ones."""
    x, got = _call(_row_kernel, (6, 100), (6,), 100, 100, BLOCK=128)
    assert _windowed(plans, "tt.load") and _windowed(plans, "tt.store")
    np.testing.assert_array_equal(got, np.abs(x) * 2 + 1)


def test_a_single_program_reads_and_writes_windows(plans):  # noqa: F811
    size, n, block = 256, 200, 256
    x, got = _call(_shifted_block_kernel, (size,), (1,), n, SHIFT=0, BLOCK=block)
    assert _windowed(plans, "tt.load") and _windowed(plans, "tt.store")
    np.testing.assert_array_equal(got, np.where(np.arange(size) < n, np.abs(x) * 2 + 1, np.float32(OLD)))


@triton.jit
def _scaled_rows_kernel(x_ptr, w_ptr, out_ptr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + cols)                        # the same row for every program: a stride-0 program axis
    x = tl.load(x_ptr + tl.program_id(0) * BLOCK + cols)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + cols, x * w)


def test_a_row_every_program_reads_is_a_window_with_a_broadcast_program_axis(plans):  # noqa: F811
    rows, block = 8, 64
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((rows, block)).astype(np.float32), rng.standard_normal(block).astype(np.float32)

    def fn(a, b, c):
        out = jax.new_ref(c)
        tritonplug.triton_call(a, b, out, kernel=_scaled_rows_kernel, out_type=(), grid=(rows,), BLOCK=block)
        return out[...]

    old = np.full((rows, block), OLD, np.float32)
    assert "tritonplug_host_kernel" not in jax.jit(fn).lower(x, w, old).as_text(), "not translated to XLA"
    got = np.asarray(jax.jit(fn)(x, w, old))
    assert sum(op.name == "tt.load" for p in plans for op in p.windows) == 2, "both loads are windows"
    np.testing.assert_array_equal(got, x * w)
