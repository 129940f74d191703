"""Rows read and written in column tiles, one tile per program (:func:`tritonplug_interpret.xla.windows._folded`):
a 2-D grid ``(tiles, rows)``, each program ``tile * BLOCK + arange(BLOCK)`` of one row under the mask ``col < n``
(Liger's DyT). Where ``BLOCK`` does not divide the width the last tile of a row runs past its end; the tiles
(``BLOCK`` apart) then do not divide the rows (``n`` apart), and the lanes over the grid are a box only with the
tile axis folded into the block's: each row padded to whole tiles. That needs the mask to compare exactly the
merged column (:class:`tritonplug_interpret.xla.mask_rules.Column`). A row walked in column blocks by a loop (one
program per row, the trips its tiles) is the same once the loop is vectorised.

The buffers are longer than the rows and hold data past them (a tile's masked lanes, read, would see the next
row's values), outputs are refs holding :data:`OLD`: a masked lane must read its ``other`` (the per-tile sums count
it) and write nothing. Checked against NumPy; the compiled program holds no gather, scatter or while loop where the
fold applies.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from hypothesis import given, settings
from hypothesis import strategies as st
from xla_hlo_support import HOST_CALL, count_unfusible

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret"), pytest.mark.usefixtures("fresh_xla_path")]
OLD = -7.0
OTHER = tl.constexpr(-5.0)
NONE = {"gather": 0, "scatter": 0, "while": 0}


@triton.jit
def _tiles_kernel(x_ptr, y_ptr, sums_ptr, n, BLOCK: tl.constexpr, INCLUSIVE: tl.constexpr = False):
    tile, row = tl.program_id(0), tl.program_id(1)
    col = tile * BLOCK + tl.arange(0, BLOCK)
    mask = col <= n - 1 if INCLUSIVE else col < n
    x = tl.load(x_ptr + row * n + col, mask=mask, other=OTHER)
    tl.store(y_ptr + row * n + col, x * 2.0 + 1.0, mask=mask)
    tl.store(sums_ptr + row * tl.num_programs(0) + tile, tl.sum(x, axis=0))


@triton.jit
def _tiles_rows_first_kernel(x_ptr, y_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    """The grid the other way round, ``(rows, tiles)``: the tiles are the outer program axis (not folded)."""
    row, tile = tl.program_id(0), tl.program_id(1)
    col = tile * BLOCK + tl.arange(0, BLOCK)
    mask = col < n
    x = tl.load(x_ptr + row * n + col, mask=mask, other=OTHER)
    tl.store(y_ptr + row * n + col, x * 2.0 + 1.0, mask=mask)
    tl.store(sums_ptr + row * tl.num_programs(1) + tile, tl.sum(x, axis=0))


@triton.jit
def _tiles_counted_kernel(x_ptr, y_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    """The same lanes live, the mask written on the tile's own lanes (``i < n - tile * BLOCK``): not the merged
    column (its limit differs per program), so not folded."""
    tile, row = tl.program_id(0), tl.program_id(1)
    lanes = tl.arange(0, BLOCK)
    mask = lanes < n - tile * BLOCK
    col = tile * BLOCK + lanes
    x = tl.load(x_ptr + row * n + col, mask=mask, other=OTHER)
    tl.store(y_ptr + row * n + col, x * 2.0 + 1.0, mask=mask)
    tl.store(sums_ptr + row * tl.num_programs(0) + tile, tl.sum(x, axis=0))


@triton.jit
def _tiles_lane_mask_kernel(x_ptr, y_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    """A mask on the tile's lanes alone (``i < n``: every lane of a whole tile live where ``n >= BLOCK``): the last
    tile of a row reads on into the next row, unmasked; its sum counts those values. Not the merged column."""
    tile, row = tl.program_id(0), tl.program_id(1)
    lanes = tl.arange(0, BLOCK)
    col = tile * BLOCK + lanes
    x = tl.load(x_ptr + row * n + col, mask=lanes < n, other=OTHER)
    tl.store(sums_ptr + row * tl.num_programs(0) + tile, tl.sum(x, axis=0))


@triton.jit
def _tiles_ragged_kernel(x_ptr, y_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    """Rows of different live widths (``n - 3 + min(row, 3)``): a bound that differs per program, no one column."""
    tile, row = tl.program_id(0), tl.program_id(1)
    col = tile * BLOCK + tl.arange(0, BLOCK)
    mask = col < n - 3 + tl.minimum(row, 3)
    x = tl.load(x_ptr + row * n + col, mask=mask, other=OTHER)
    tl.store(y_ptr + row * n + col, x * 2.0 + 1.0, mask=mask)
    tl.store(sums_ptr + row * tl.num_programs(0) + tile, tl.sum(x, axis=0))


@triton.jit
def _row_blocks_kernel(x_ptr, y_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    """One program per row walking its columns in blocks (Liger's KL divergence over a vocabulary wider than its
    block): the loop's trips are the tiles, vectorised (program-major over the trips), folded the same way."""
    row = tl.program_id(0)
    acc = 0.0
    for start in range(0, n, BLOCK):
        col = start + tl.arange(0, BLOCK)
        mask = col < n
        x = tl.load(x_ptr + row * n + col, mask=mask, other=OTHER)
        tl.store(y_ptr + row * n + col, x * 2.0 + 1.0, mask=mask)
        acc += tl.sum(x, axis=0)
    tl.store(sums_ptr + row, acc)


def _run(kernel, rows: int, n: int, block: int, rows_first: bool = False, **constexprs):
    tiles, extra = -(-n // block), 3
    x = np.random.default_rng(rows * 1000 + n * 7 + block).standard_normal((rows + extra) * n).astype(np.float32)

    def fn(x, y, sums):
        y, sums = jax.new_ref(y), jax.new_ref(sums)
        grid = (rows, tiles) if rows_first else (tiles, rows)
        tritonplug.triton_call(x, y, sums, n, kernel=kernel, out_type=(), grid=grid, BLOCK=block, **constexprs)
        return y[...], sums[...]
    arrays = (x, np.full((rows + extra) * n, OLD, np.float32), np.full(rows * tiles + extra, OLD, np.float32))
    assert HOST_CALL not in jax.jit(fn).lower(*arrays).as_text(), "not translated to XLA"
    y, sums = (np.asarray(a) for a in jax.jit(fn)(*arrays))
    width = [n - 3 + min(r, 3) for r in range(rows)] if kernel is _tiles_ragged_kernel else [n] * rows
    want_y = np.full_like(arrays[1], OLD)
    padded = np.full((rows, tiles * block), OTHER.value, np.float32)
    for r, w in enumerate(width):
        want_y[r * n:r * n + w] = x[r * n:r * n + w] * 2.0 + 1.0
        padded[r, :w] = x[r * n:r * n + w]
    if kernel is _tiles_lane_mask_kernel:   # stores no y; its lanes read on past each row's end
        want_y[:] = OLD
        padded = np.stack([x[r * n + t * block:r * n + t * block + block] if n >= block else padded[r, :block]
                           for r in range(rows) for t in range(tiles)]).reshape(rows, tiles * block)
    np.testing.assert_allclose(y, want_y, rtol=1e-6, atol=1e-6)
    want_sums = np.full_like(arrays[2], OLD)
    want_sums[:rows * tiles] = padded.reshape(rows * tiles, block).sum(1)
    np.testing.assert_allclose(sums, want_sums, rtol=1e-5, atol=1e-4)
    return count_unfusible(fn, *arrays)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 5), n=st.integers(1, 300), block=st.sampled_from([8, 16, 32, 64]))
def test_a_row_in_column_tiles_is_read_and_written_as_windows(rows, n, block):
    assert _run(_tiles_kernel, rows, n, block) == NONE


@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("rows, n, block", [(4, 5632, 1024), (3, 100, 32), (2, 33, 16)])
def test_a_row_in_column_tiles_at_model_widths_and_off_by_one(rows, n, block, inclusive):
    """5632 columns in tiles of 1024 (DyT at Llama's ffn width): five whole tiles and a half; 33 in 16: one lane.
    ``inclusive``: the mask written ``col <= n - 1``."""
    assert _run(_tiles_kernel, rows, n, block, INCLUSIVE=inclusive) == NONE


@pytest.mark.parametrize("rows, n, block", [(4, 5632, 1024), (3, 100, 32), (2, 33, 16), (2, 64, 16), (3, 7, 8)])
def test_a_row_walked_in_column_blocks_by_a_loop(rows, n, block):
    """The same rows walked by a loop per program: its loads and stores are windows too; the per-row sum counts
    every trip's masked lanes as ``other`` (the trips' sums added after the loop)."""
    tiles, extra = -(-n // block), 3
    x = np.random.default_rng(n * 11 + block).standard_normal((rows + extra) * n).astype(np.float32)

    def fn(x, y, sums):
        y, sums = jax.new_ref(y), jax.new_ref(sums)
        tritonplug.triton_call(x, y, sums, n, kernel=_row_blocks_kernel, out_type=(), grid=(rows,), BLOCK=block)
        return y[...], sums[...]
    arrays = (x, np.full((rows + extra) * n, OLD, np.float32), np.full(rows + extra, OLD, np.float32))
    y, sums = (np.asarray(a) for a in jax.jit(fn)(*arrays))
    want_y = np.full_like(arrays[1], OLD)
    want_y[:rows * n] = x[:rows * n] * 2.0 + 1.0
    np.testing.assert_allclose(y, want_y, rtol=1e-6, atol=1e-6)
    want_sums = np.full_like(arrays[2], OLD)
    want_sums[:rows] = x[:rows * n].reshape(rows, n).sum(1) + (tiles * block - n) * OTHER.value
    np.testing.assert_allclose(sums, want_sums, rtol=1e-5, atol=1e-4)
    assert count_unfusible(fn, *arrays) == NONE


@pytest.mark.parametrize("kernel, rows_first", [(_tiles_rows_first_kernel, True), (_tiles_counted_kernel, False),
                                                (_tiles_lane_mask_kernel, False), (_tiles_ragged_kernel, False)])
@pytest.mark.parametrize("rows, n, block", [(3, 100, 32), (5, 33, 16)])
def test_tiles_the_fold_does_not_take_keep_the_general_path(kernel, rows_first, rows, n, block):
    """Tiles as the outer program axis, a mask on the tile's own lanes (its bound written per program, or not the
    column at all), rows of different widths: right numbers by the general path."""
    counts = _run(kernel, rows, n, block, rows_first)
    assert counts["gather"] + counts["scatter"] > 0     # (what the fold would remove: this test's premise)
