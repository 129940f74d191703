"""A masked access needs no bounds mask where every lane its mask leaves live is inside the buffer (issue 38).

A row narrower than its power-of-two block (SwiGLU's 5632 columns in a block of 8192) reads and writes under
``cols < n``; in the last row the block's tail runs past the buffer's end, so an access whose every lane had to be
inside got a bounds mask, ``0 <= offset < size`` on 64-bit offsets over the whole block: on the H200 that mask was
computed per element in the op's fusion, or, shared by the forward and backward, written to memory as a
``pred[rows, block]`` array. The plan's ``bounds`` pass (``lanes.within``) now counts only the lanes below the
mask's bound (:mod:`.mask_rules`), for loads and for stores. Checked here: ``within`` itself, the compiled program
(no 64-bit 2-D arithmetic left), and the numbers against NumPy where the tail runs past the end.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from tritonplug_interpret.xla.lane_rules import Lanes
from tritonplug_interpret.xla.lanes import within
from xla_box_kernels import narrow_rows_kernel
from xla_hlo_support import compiled_hlo

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
OLD, FILL = -7.0, 3.0
ROWS = np.array([0, 37, 74], np.int64)   # three rows of 37 in a buffer of 111: a block of 64 runs past its end


def test_lanes_past_the_mask_bound_need_not_be_inside():
    row = Lanes((1,), 0)
    assert not within(row, ROWS, (64,), 111)                     # unmasked, the last row's tail is outside
    assert within(row, ROWS, (64,), 111, (37,))                  # masked at 37: every live lane inside
    assert not within(row, ROWS, (64,), 110, (37,))              # one live lane past the end
    assert not within(row, ROWS, (64,), 111, (38,))              # the bound lets one lane too many live
    assert within(row, ROWS, (64,), 111, (None,)) is False       # a dimension without a bound: the whole block
    assert within(row, ROWS, (64,), 138, (None,))                # (that fits when the buffer holds it)
    assert not within(row, ROWS - 1, (64,), 111, (37,))          # a lane before the start
    assert within(row, ROWS, (64,), 111, (0,))                   # no lane live: nothing to check
    assert not within(row, None, (64,), 111, (37,))              # programs' starts unknown
    assert not within(row, ROWS, (8, 8), 111, (37,))             # rank differs from the lanes'


def test_two_dimensional_bounds_and_a_moving_program_axis():
    # a (4, 16) block of rows 16 apart, rows masked at 3 and columns at 10, programs 48 apart
    tile = Lanes((16, 1), 0)
    starts = np.array([0, 48, 96], np.int64)
    last = 96 + 2 * 16 + 9                                       # the last live lane
    assert within(tile, starts, (4, 16), last + 1, (3, 10))
    assert not within(tile, starts, (4, 16), last, (3, 10))
    assert not within(tile, starts, (4, 16), last + 1, (4, 10))
    assert not within(tile, starts, (4, 16), last + 1, (3, None))


def _narrow(x, w, y, n, block):
    out = jax.new_ref(y)
    total = jax.new_ref(jnp.full((x.shape[0],), OLD, jnp.float32))
    tritonplug.triton_call(x, w, out, total, x.shape[1], y.shape[1], n, FILL, kernel=narrow_rows_kernel,
                           out_type=(), grid=(x.shape[0],), BLOCK=block)
    return out[...], total[...]


@pytest.mark.parametrize("rows, n, block", [(3, 37, 64), (6, 37, 64), (5, 96, 128)])
def test_a_row_whose_block_runs_past_the_buffer(rows, n, block, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")    # as users run it: checked runs compute every offset
    rng = np.random.default_rng(rows * n)
    x = rng.standard_normal((rows, n)).astype(np.float32)      # rows exactly n apart: the last block's tail is past
    w = rng.standard_normal(n).astype(np.float32)
    y = np.full((rows, n), OLD, np.float32)
    fn = lambda x, w, y: _narrow(x, w, y, n, block)  # noqa: E731
    hlo = compiled_hlo(fn, x, w, y)
    wide = re.findall(r"s64\[\d+,\d+\]", hlo)
    assert not wide, f"64-bit offsets over the block are still computed (a bounds mask): {sorted(set(wide))}"
    got_y, got_total = jax.jit(fn)(x, w, y)
    np.testing.assert_allclose(np.asarray(got_y), x * w + 1.0, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got_total), x.sum(1) + (block - n) * FILL, rtol=1e-5, atol=1e-4)
