"""A window that starts inside a row is a slice of the buffer reshaped to its rows, not of a padded copy (issue 38).

RoPE writes the second half of every head's row in place: a window starting 64 elements in, whose region (whole
rows) ran 64 elements past the buffer's end. :func:`windows._segment` padded the buffer for it and the store
wrote the padded copy back whole: on the H200 three nested whole-array ``dynamic-update-slice`` s in one fusion,
3.5× XLA's own RoPE. :func:`windows._aligned` places such a box in the buffer reshaped to the region's radices
(``start`` 64 is column 64 of every row): a slice to read, and to write a select over the grid of the box padded
to it, which XLA fuses with the values and with the other stores into that buffer (in-place
``dynamic-update-slice`` s measured worse: the loads were materialised before the first update). Checked: where it
applies and where it must not (a box that would wrap past its row or its grid: the padded region then, whose
numbers ``test_xla_box_windows.py`` checks), the compiled program, and the numbers against NumPy.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from helpers import requires_backend
from tritonplug_interpret.xla.windows import Axis, Window, _aligned
from xla_box_kernels import half_rows_kernel
from xla_hlo_support import compiled_hlo

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]


def _rows(start: int, rows: int = 4, width: int = 128, cols: int = 64) -> Window:
    """``rows`` programs, each a block of ``cols`` columns of a row ``width`` long, from ``start``."""
    return Window(0, start, (Axis(width, rows, rows), Axis(1, cols, cols)), 1)


def test_where_a_box_is_a_slice_of_the_buffer_reshaped():
    assert _aligned(512, _rows(64)) == ((4, 128), (0, 64), (4, 128))      # every row's second half
    assert _aligned(512, _rows(0)) == ((4, 128), (0, 0), (4, 64))
    assert _aligned(640, _rows(128 + 64)) == ((5, 128), (1, 64), (5, 128))  # from the second row
    assert _aligned(512, _rows(65)) is None          # the block would run into the next row
    assert _aligned(512, _rows(128 + 64)) is None    # the last row's block is past the buffer
    assert _aligned(500, _rows(64)) is None          # the buffer is not whole rows
    assert _aligned(512, _rows(-64)) is None         # before the buffer
    single = Window(0, 3, (Axis(0, 1, 1), Axis(0, 1, 1)), 1)
    assert _aligned(16, single) is None              # nothing moves: no grid to place it in


def test_three_axes_place_each_digit():
    # programs 256 apart; heads of 32 (3 of 8 live) and the half row from column 16
    w = Window(0, 16, (Axis(256, 2, 2), Axis(32, 3, 8), Axis(1, 16, 16)), 1)
    assert _aligned(512, w) == ((2, 8, 32), (0, 0, 16), (2, 3, 32))
    assert _aligned(512, Window(0, 16 + 32 * 5, w.axes, 1)) == ((2, 8, 32), (0, 5, 16), (2, 8, 32))
    assert _aligned(512, Window(0, 16 + 32 * 6, w.axes, 1)) is None   # heads 6..8 run past the row's 8


def _half_rows(q, heads: int, head_dim: int, half: int, pad_heads: int, pad_half: int):
    ref = jax.new_ref(q)
    tritonplug.triton_call(ref, heads * head_dim, heads, head_dim, half, kernel=half_rows_kernel, out_type=(),
                           grid=(q.shape[0],), PAD_HEADS=pad_heads, PAD_HALF=pad_half)
    return ref[...]


@pytest.mark.parametrize("heads, head_dim, half, pad_heads, pad_half", [
    (4, 16, 8, 4, 8),     # RoPE's shape: halves that fill the row, the second one from column 8
    (6, 20, 8, 8, 8),     # two heads of padding, four columns past both halves left alone
    (3, 12, 5, 4, 8),     # blocks of 8 columns from column 5 of rows 12 long: the mask's 5 keep them in the row
])
def test_half_rows_in_place_without_a_padded_copy(heads, head_dim, half, pad_heads, pad_half, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")
    q = np.random.default_rng(heads * head_dim).standard_normal((5, heads, head_dim)).astype(np.float32)
    fn = lambda q: _half_rows(q, heads, head_dim, half, pad_heads, pad_half)  # noqa: E731
    hlo = compiled_hlo(fn, q)
    assert not re.findall(r"\[\d+\]\{0\} pad\(", hlo), "the flat buffer was padded (not a block's lanes)"
    assert "dynamic-update-slice(" not in hlo, "a store wrote the buffer in place, not as a select"
    a, b = q[..., :half], q[..., half:2 * half]
    want = np.concatenate([a + b, a - b, q[..., 2 * half:]], axis=-1)
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(q)), want, rtol=1e-6, atol=1e-6)
