"""Row loops whose programs make different numbers of trips (:class:`tritonplug_interpret.xla.vectorise.Vectorised`'s
``uneven``): ``range(pid * R, min(pid * R + R, n))`` over a program count that does not divide ``n`` (a GPU's
``sm_count``: Liger's and FLA's backward kernels). The loop runs vectorised over the most trips any program makes,
each trip predicated on the program's own bound.

The buffers here are longer than the ``n`` rows the kernel is told of, and hold data past them, so a trip a
program does not make would read real rows: its stores must not land (the outputs are refs holding :data:`OLD`),
its sums must not count them, and a pointer the loop advances must stop where the program's own trips end.
Checked against NumPy, and the compiled program holds no gather, scatter or while loop.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from xla_box_kernels import row_loop_kernel
from xla_hlo_support import HOST_CALL, count_unfusible

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret"), pytest.mark.usefixtures("fresh_xla_path")]
OLD = -7.0
NONE = {"gather": 0, "scatter": 0, "while": 0}


def _call(kernel, grid, scalars, inputs, outputs, block):
    """``kernel(*inputs, *outputs, *scalars, BLOCK=block)``, each output a ref holding OLD; the outputs after the
    call."""
    def fn(*arrays):
        refs = [jax.new_ref(a) for a in arrays[len(inputs):]]
        constexprs = {} if block is None else {"BLOCK": block}
        tritonplug.triton_call(*arrays[:len(inputs)], *refs, *scalars, kernel=kernel, out_type=(), grid=grid,
                               **constexprs)
        return [r[...] for r in refs]
    arrays = (*inputs, *(np.full(shape, OLD, np.float32) for shape in outputs))
    assert HOST_CALL not in jax.jit(fn).lower(*arrays).as_text(), "not translated to XLA"
    return fn, arrays, [np.asarray(a) for a in jax.jit(fn)(*arrays)]


@pytest.mark.parametrize("rows, programs", [(10, 3), (64, 5), (7, 4), (3, 8), (20, 6)])
def test_a_row_loop_whose_last_programs_make_fewer_trips(rows, programs):
    """``(3, 8)``: programs past the rows make no trip (their sums stay zero); ``(7, 4)``: the last makes one."""
    n_cols, block, extra = 40, 64, 5
    per = -(-rows // programs)
    rng = np.random.default_rng(rows * 100 + programs)
    x, w = rng.standard_normal((rows + extra, n_cols)).astype(np.float32), rng.standard_normal(n_cols).astype(
        np.float32)
    y_rows = programs * per + extra      # every program's trips, made or not, land inside y
    fn, arrays, (y, sums) = _call(row_loop_kernel, (programs,), (rows, per, n_cols), (x, w),
                                  [(y_rows, n_cols), (programs, n_cols)], block)
    want_y = np.full((y_rows, n_cols), OLD, np.float32)
    want_y[:rows] = x[:rows] * w
    np.testing.assert_array_equal(y, want_y)
    want = np.stack([x[min(p * per, rows):min((p + 1) * per, rows)].sum(0) for p in range(programs)])
    np.testing.assert_allclose(sums, want, rtol=1e-5, atol=1e-5)
    assert count_unfusible(fn, *arrays) == NONE


@triton.jit
def _walk_kernel(x_ptr, out_ptr, end_ptr, n_rows, rows_per_program, n_cols, BLOCK: tl.constexpr):
    """Each program copies its rows through pointers the loop advances, then reads through the source pointer
    where it stopped (the row after its own last: its own trip count, not the most any program makes)."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    src = x_ptr + pid * rows_per_program * n_cols + cols
    dst = out_ptr + pid * rows_per_program * n_cols + cols
    for _ in range(pid * rows_per_program, tl.minimum((pid + 1) * rows_per_program, n_rows)):
        tl.store(dst, tl.load(src, mask=mask, other=0.0) * 2.0, mask=mask)
        src += n_cols
        dst += n_cols
    tl.store(end_ptr + pid * n_cols + cols, tl.load(src, mask=mask, other=0.0), mask=mask)


@pytest.mark.parametrize("rows, programs", [(12, 3), (10, 3), (13, 4), (2, 5), (3, 4)])
def test_pointers_the_loop_advances_stop_at_the_programs_own_last_trip(rows, programs):
    """``(3, 4)``: one trip at most, some programs none. A read through a pointer after its loop keeps the loop a
    loop (not vectorised: the compiled program holds while loops), so this checks the values of the uneven trips
    on that path; the vectorised path's pointers after the loop (``vectorise._trips_made``) no kernel here reads."""
    n_cols, per = 24, -(-rows // programs)
    x = np.random.default_rng(rows).standard_normal((programs * per + 2, n_cols)).astype(np.float32)
    _, _, (out, end) = _call(_walk_kernel, (programs,), (rows, per, n_cols), (x,),
                                   [x.shape, (programs, n_cols)], 32)
    want = np.full(x.shape, OLD, np.float32)
    want[:rows] = x[:rows] * 2
    np.testing.assert_array_equal(out, want)
    starts = np.arange(programs) * per
    np.testing.assert_array_equal(end, x[np.maximum(starts, np.minimum(starts + per, rows))])


@triton.jit
def _count_kernel(count_ptr, rows_ptr, n_rows, rows_per_program):
    """Each program counts its trips and sums its rows' indices: terms that are no load (a masked-off load reads
    ``other``; these would count a trip the program does not make)."""
    pid = tl.program_id(0)
    count = 0.0
    total = 0.0
    for row in range(pid * rows_per_program, tl.minimum((pid + 1) * rows_per_program, n_rows)):
        count += 1.0
        total += row.to(tl.float32)
    tl.store(count_ptr + pid, count)
    tl.store(rows_ptr + pid, total)


@pytest.mark.parametrize("rows, programs", [(10, 3), (3, 4), (64, 5)])
def test_sums_of_terms_that_are_no_load_count_only_the_trips_made(rows, programs):
    """``(3, 4)``: one trip at most (a loop of one trip runs unrolled, its results kept only where it is made)."""
    per = -(-rows // programs)
    fn, arrays, (count, total) = _call(_count_kernel, (programs,), (rows, per), (), [(programs,), (programs,)],
                                       None)
    made = [range(p * per, min((p + 1) * per, rows)) for p in range(programs)]
    np.testing.assert_array_equal(count, [len(r) for r in made])
    np.testing.assert_array_equal(total, [sum(r) for r in made])
    assert count_unfusible(fn, *arrays) == NONE


@triton.jit
def _grid_stride_kernel(x_ptr, y_ptr, sums_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    """A grid-stride row loop (DyT's backward, persistent kernels): program ``p`` of a 2-D grid ``(tiles,
    programs)`` takes the rows ``p, p + P, …`` (``P = tl.num_programs(1)``), one tile of columns each."""
    tile, pid = tl.program_id(0), tl.program_id(1)
    cols = tile * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(pid, n_rows, tl.num_programs(1)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * n_cols + cols, x * 3.0 - 1.0, mask=mask)
        acc += x
    tl.store(sums_ptr + pid * n_cols + cols, acc, mask=mask)


@pytest.mark.parametrize("rows, programs, n_cols, block", [(12, 3, 64, 32), (10, 3, 64, 64), (7, 4, 48, 16),
                                                           (2, 5, 32, 32), (9, 9, 32, 32)])
def test_a_grid_stride_loop_is_vectorised(rows, programs, n_cols, block):
    """The step ``tl.num_programs(1)`` is the grid's size (a lane rule): the trips are counted, ``(10, 3)``: the
    first program makes one more; ``(2, 5)``: three make none. Rows past ``n_rows`` hold data the trips a program
    does not make would read, and ``y``'s are OLD: neither may change."""
    extra = 4
    rng = np.random.default_rng(rows * 31 + programs)
    x = rng.standard_normal((rows + extra, n_cols)).astype(np.float32)
    fn, arrays, (y, sums) = _call(_grid_stride_kernel, (n_cols // block, programs), (rows, n_cols), (x,),
                                  [(rows + extra, n_cols), (programs, n_cols)], block)
    want_y = np.full((rows + extra, n_cols), OLD, np.float32)
    want_y[:rows] = x[:rows] * 3.0 - 1.0
    np.testing.assert_allclose(y, want_y, rtol=1e-6, atol=1e-6)    # (x * 3 - 1 may fuse: one rounding)
    want_sums = np.stack([x[p:rows:programs].sum(0) for p in range(programs)])
    np.testing.assert_allclose(sums, want_sums, rtol=1e-5, atol=1e-5)
    assert count_unfusible(fn, *arrays) == NONE
