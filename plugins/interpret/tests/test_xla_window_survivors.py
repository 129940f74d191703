"""The edges of ``xla/windows.py`` that the mutation run found untested (issue 37): which accesses may be read or
written as a box of the reshaped buffer, and how a box's program axes and region are laid out.

Each test runs a real Triton kernel translated by the XLA path and compares its result with NumPy (stored-to
buffers come in as refs holding a value the kernel never writes, so a lane written where it should not be
shows), asserts the kernel was translated (a translation that fails falls back to the interpreter, which would
hide the failure) and, where a window is what it checks, that the access was planned as one. The accesses:

* stores where several lanes, or several programs, address one element and only one of them is live: the
  general scatter writes the live one; a window would write lane 0 (a stride-0 axis is not a box);
* loads whose programs' blocks overlap (sliding windows), between programs or between a block's rows, which are
  not one box, and the same block with the mask leaving one row, which is;
* many programs of small blocks (the region's outermost axis is the programs'), a column of one live lane
  stored per program, a sliding read whose mask leaves no lane, one or three, a 3-D grid reading a sub-box
  (three program axes);
* loops run vectorised whose chunks are the same in every program (a program axis of stride 0 over the
  trips) or start where the plan cannot know (an op the lane evaluator has no rule for: no window);
* a gather and a scatter through loaded indices, whose lanes are unknown;
* (the third run, after ``_aligned``) boxes that must take the padded region, not a slice of the buffer reshaped:
  a buffer that is not whole rows (many programs of small blocks; rows whose live columns are fewer than the
  row's stride, merged back into the region), a window from one lane before the buffer.
"""

from __future__ import annotations

import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from test_xla_masked_stores import OLD, plans  # noqa: F401 (plans: a fixture)
from test_xla_tile_window_edges import _call, _shifted_block_kernel, _windowed
from xla_hlo_support import run_translated

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]


def _f(x):
    return np.abs(x) * 2 + 1


def _run(kernel, inputs, out_shape, grid, *args, **constexprs):
    return run_translated(kernel, inputs, out_shape, grid, *args, fill=OLD, **constexprs)


# ------------------------------------------------------------------ stores of several lanes to one element


@triton.jit
def _two_lanes_per_element_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    pair = tl.arange(0, 2)
    y = tl.abs(tl.load(x_ptr + offs)) * 2 + 1
    values = y[:, None] * (pair[None, :] + 1).to(tl.float32)          # lane 1 holds 2 y
    tl.store(out_ptr + offs[:, None] + 0 * pair[None, :], values, mask=pair[None, :] == 1)


@triton.jit
def _one_block_for_all_programs_kernel(x_ptr, out_ptr, LIVE: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    y = tl.abs(tl.load(x_ptr + tl.program_id(0) * BLOCK + cols)) * 2 + 1
    tl.store(out_ptr + cols, y, mask=(cols >= 0) & (tl.program_id(0) == LIVE))   # every program: one block


def test_two_lanes_storing_to_one_element_of_which_one_is_live_store_the_live_one(plans):  # noqa: F811
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    got = _run(_two_lanes_per_element_kernel, (x,), x.shape, (4,), BLOCK=64)
    np.testing.assert_array_equal(got, 2 * _f(x))
    assert not _windowed(plans, "tt.store"), "a stride-0 axis of two lanes is not a box"


@pytest.mark.parametrize("live", [1, 2])
def test_programs_storing_to_one_block_of_which_one_is_live_store_the_live_one(plans, live):  # noqa: F811
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    got = _run(_one_block_for_all_programs_kernel, (x,), (64,), (3,), LIVE=live, BLOCK=64)
    np.testing.assert_array_equal(got, _f(x[live]))
    assert not _windowed(plans, "tt.store"), "a program axis of stride 0 is not a box for a store"


# ------------------------------------------------------------------ blocks that overlap


@triton.jit
def _sliding_kernel(x_ptr, out_ptr, n_rows, STEP: tl.constexpr, RS: tl.constexpr, BR: tl.constexpr,
                    BC: tl.constexpr):
    rows = tl.arange(0, BR)[:, None]
    cols = tl.arange(0, BC)[None, :]
    live = rows < n_rows
    x = tl.load(x_ptr + tl.program_id(0) * STEP + rows * RS + cols, mask=live, other=0.0)
    tl.store(out_ptr + tl.program_id(0) * (BR * BC) + rows * BC + cols, tl.abs(x) * 2 + 1, mask=live)


def _sliding(x, programs, n_rows, step, rs, br, bc):
    out = np.full((programs, br, bc), OLD, np.float32)
    p, r, c = np.ix_(np.arange(programs), np.arange(n_rows), np.arange(bc))
    out[:, :n_rows] = _f(x[p * step + r * rs + c])
    return out.reshape(-1)


@pytest.mark.parametrize(("n_rows", "step", "rs", "br", "bc", "window"), [
    (1, 64, 0, 1, 128, False),      # each program's 128 lanes overlap the next program's: not a box
    (8, 64, 16, 8, 16, False),      # 8 rows of 16 every 16 lanes: a program's rows run into the next program's
    (1, 64, 32, 4, 64, True),       # rows that would overlap, but the mask leaves one: a box
], ids=["programs-overlap", "rows-overlap-programs", "one-live-row"])
def test_blocks_that_overlap_are_read_whole(plans, n_rows, step, rs, br, bc, window):  # noqa: F811
    programs = 8
    size = step * (programs - 1) + rs * (br - 1) + bc
    x = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    got = _run(_sliding_kernel, (x,), (programs * br * bc,), (programs,), n_rows, STEP=step, RS=rs, BR=br, BC=bc)
    assert _windowed(plans, "tt.load") == window
    np.testing.assert_array_equal(got, _sliding(x, programs, n_rows, step, rs, br, bc))


# ------------------------------------------------------------------ program axes and regions


@triton.jit
def _block_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, tl.abs(x) * 2 + 1, mask=offs < n)


@pytest.mark.parametrize("size", [256, 250], ids=["whole-rows", "padded"])
def test_more_programs_than_lanes_in_a_block(plans, size):  # noqa: F811
    """32 programs of 8 lanes: the region's outermost axis (the programs') is longer than the block. A buffer of
    250 is not whole rows of 8, so the box is not a slice of it reshaped (``_aligned``) but of a padded region,
    which is 32 rows long."""
    n = 250
    x, got = _call(_block_kernel, (size,), (32,), n, BLOCK=8)
    assert _windowed(plans, "tt.load") and _windowed(plans, "tt.store")
    np.testing.assert_array_equal(got, np.where(np.arange(size) < n, _f(x), np.float32(OLD)))


def test_a_window_from_one_lane_before_the_buffer(plans):  # noqa: F811
    """One program's 256 lanes from element -1, lane 0 masked off: the window starts before the buffer, so it is a
    slice of the region padded in front (``_segment``), not a slice of the buffer itself (``_aligned``: a slice
    from -1 fails to trace, and the kernel would fall back to the interpreter)."""
    size, n = 256, 200
    x, got = _call(_shifted_block_kernel, (size,), (1,), n, SHIFT=1, BLOCK=256)
    assert _windowed(plans, "tt.load") and _windowed(plans, "tt.store")
    np.testing.assert_array_equal(got, np.where(np.arange(size) < n, _f(x), np.float32(OLD)))


@triton.jit
def _row_prefix_kernel(x_ptr, out_ptr, n_cols, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    offs = tl.program_id(0) * STRIDE + cols
    x = tl.load(x_ptr + offs, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + offs, tl.abs(x) * 2 + 1, mask=cols < n_cols)


def test_a_box_narrower_than_its_region_in_a_buffer_not_whole_rows(plans):  # noqa: F811
    """8 rows of 16, the first 10 columns of each live, in a buffer of 122 (the last row's live part ends at its
    end): not whole rows, so the store merges its (8, 10) box into the region padded to (8, 16) and writes that
    region back whole, the 6 columns past each box as they were."""
    size, n_cols = 122, 10
    x, got = _call(_row_prefix_kernel, (size,), (8,), n_cols, STRIDE=16, BLOCK=16)
    assert _windowed(plans, "tt.load") and _windowed(plans, "tt.store")
    np.testing.assert_array_equal(got, np.where(np.arange(size) % 16 < n_cols, _f(x), np.float32(OLD)))


@triton.jit
def _first_lane_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + tl.program_id(0) + cols, tl.abs(x) * 2 + 1, mask=cols < n_cols)


def test_a_block_of_one_live_lane_per_program_is_written_as_a_window(plans):  # noqa: F811
    """Program p writes element p through a 128-lane block of which the mask leaves lane 0: the block's axis has
    extent 1 and is not a moving axis; the store writes that one lane of each program."""
    x, got = _call(_first_lane_kernel, (64,), (64,), 1, BLOCK=128)
    assert _windowed(plans, "tt.load") and _windowed(plans, "tt.store")
    np.testing.assert_array_equal(got, _f(x))


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) + cols, mask=cols < n_cols, other=1.5)
    tl.store(out_ptr + tl.program_id(0), tl.sum(x, 0))


@pytest.mark.parametrize(("n_cols", "window"), [(0, False), (1, True), (3, False)])
def test_the_lanes_a_mask_leaves_decide_whether_a_sliding_read_is_a_window(plans, n_cols, window):  # noqa: F811
    """Program p sums x[p : p + n_cols] (the other 128 - n_cols lanes read 1.5): one live lane is a box, three
    overlap the next program's, and none is no box at all (the load takes the general path, all lanes ``other``)."""
    x = np.random.default_rng(n_cols).standard_normal(66).astype(np.float32)
    got = _run(_row_sum_kernel, (x,), (64,), (64,), n_cols, BLOCK=128)
    ref = sum(x[k:k + 64] for k in range(n_cols)) + np.float32(1.5 * (128 - n_cols))
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert _windowed(plans, "tt.load") == window


@triton.jit
def _sub_box_kernel(x_ptr, out_ptr, s1, s2, G0: tl.constexpr, G1: tl.constexpr, BLOCK: tl.constexpr):
    p0, p1, p2 = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    lanes = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + p2 * s2 + p1 * s1 + p0 * BLOCK + lanes)
    tl.store(out_ptr + ((p2 * G1 + p1) * G0 + p0) * BLOCK + lanes, tl.abs(x) * 2 + 1)


def test_a_3d_grid_reading_a_sub_box_has_three_program_axes(plans):  # noqa: F811
    """Programs (p0, p1, p2) read x[p2, p1, 4 p0 : 4 p0 + 4] of a (2, 3, 16) array: 2 of 3 rows, 8 of 16 columns,
    so no two program axes merge into one."""
    x = np.random.default_rng(3).standard_normal((2, 3, 16)).astype(np.float32)
    got = _run(_sub_box_kernel, (x.reshape(-1),), (32,), (2, 2, 2), 16, 48, G0=2, G1=2, BLOCK=4)
    load = [w for p in plans for op, w in p.windows.items() if op.name == "tt.load"]
    assert [w.program_axes for w in load] == [3]
    np.testing.assert_array_equal(got, _f(x[:, :2, :8]).reshape(-1))


# ------------------------------------------------------------------ vectorised loops


@triton.jit
def _shared_chunks_kernel(x_ptr, w_ptr, out_ptr, CHUNKS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0) * (CHUNKS * BLOCK)
    for j in range(0, CHUNKS):
        cols = j * BLOCK + tl.arange(0, BLOCK)
        w = tl.load(w_ptr + cols)               # the same chunk in every program
        x = tl.load(x_ptr + row + cols)
        tl.store(out_ptr + row + cols, x * w)


def test_chunks_every_program_reads_in_a_loop_are_a_window(plans):  # noqa: F811
    rows, chunks, block = 4, 3, 32
    rng = np.random.default_rng(4)
    x = rng.standard_normal((rows, chunks * block)).astype(np.float32)
    w = rng.standard_normal(chunks * block).astype(np.float32)
    got = _run(_shared_chunks_kernel, (x, w), x.shape, (rows,), CHUNKS=chunks, BLOCK=block)
    assert sum(op.name == "tt.load" for p in plans for op in p.windows) == 2, "both loads are windows"
    np.testing.assert_array_equal(got, x * w)


@triton.jit
def _swapped_chunks_kernel(x_ptr, out_ptr, CHUNKS: tl.constexpr, BLOCK: tl.constexpr):
    span = CHUNKS * BLOCK
    src = x_ptr + (tl.program_id(0) ^ 1) * span + tl.arange(0, BLOCK)    # (xor: no rule of the lane evaluator)
    dst = out_ptr + tl.program_id(0) * span + tl.arange(0, BLOCK)
    for _ in range(0, CHUNKS):
        tl.store(dst, tl.abs(tl.load(src)) * 2 + 1)
        src += BLOCK
        dst += BLOCK


def test_chunks_from_an_offset_the_plan_does_not_know_are_gathered(plans):  # noqa: F811
    """The loop runs vectorised (its pointers advance by a static step), but where the source chunks start
    (``pid ^ 1``: each program reads its neighbour's row) is not known before tracing: no window for that load."""
    rows, chunks, block = 4, 3, 16
    x = np.random.default_rng(5).standard_normal((rows, chunks * block)).astype(np.float32)
    got = _run(_swapped_chunks_kernel, (x,), x.shape, (rows,), CHUNKS=chunks, BLOCK=block)
    assert any(p.vectorised for p in plans), "the loop runs vectorised"
    assert not _windowed(plans, "tt.load") and _windowed(plans, "tt.store")
    np.testing.assert_array_equal(got, _f(x[[1, 0, 3, 2]]))


# ------------------------------------------------------------------ unknown lanes


@triton.jit
def _permute_kernel(x_ptr, index_ptr, out_ptr, BLOCK: tl.constexpr):
    index = tl.load(index_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))
    x = tl.load(x_ptr + index)
    tl.store(out_ptr + index, tl.abs(x) * 2 + 1)


def test_a_gather_and_a_scatter_through_loaded_indices(plans):  # noqa: F811
    rng = np.random.default_rng(6)
    x = rng.standard_normal(256).astype(np.float32)
    index = rng.permutation(256).astype(np.int32)
    got = _run(_permute_kernel, (x, index), x.shape, (4,), BLOCK=64)
    assert [op.name for p in plans for op in p.windows] == ["tt.load"], "only the indices' load is a window"
    np.testing.assert_array_equal(got, _f(x))
