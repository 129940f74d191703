"""Per-program scalars whose programs step ``S > 1`` elements apart (``ptr + pid * S + j``: column ``j`` of a
``(programs, S)`` array), the window's unit axis (:meth:`tritonplug_interpret.xla.windows.Window.unit`).

Each kernel runs translated by the XLA path (asserted: no host call), against NumPy, with the output buffer
holding :data:`OLD` where the kernel does not write; the compiled program holds no gather or scatter. Buffers
whose length is a multiple of ``S`` take the aligned path (a slice of the buffer reshaped to rows of ``S``), the
others the padded segment; a 2-D grid splits the program index in two axes; a mask leaves some programs out.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from xla_hlo_support import count_unfusible, run_translated

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret"), pytest.mark.usefixtures("fresh_xla_path")]
OLD = -7.0
NONE = {"gather": 0, "scatter": 0, "while": 0}


@triton.jit
def _column_kernel(x_ptr, out_ptr, S: tl.constexpr, J: tl.constexpr, K: tl.constexpr):
    """Program ``p`` reads element ``p * S + J`` and writes ``x * 2 + p`` to ``p * S + K``."""
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid * S + J)
    tl.store(out_ptr + pid * S + K, x * 2.0 + pid)


def _column(x: np.ndarray, length: int, programs: int, s: int, j: int, k: int) -> np.ndarray:
    want = np.full(length, OLD, np.float32)
    for p in range(programs):
        want[p * s + k] = x[p * s + j] * 2 + p
    return want


@pytest.mark.parametrize("s, j, k, extra", [(2, 1, 0, 0), (2, 0, 1, 1), (3, 0, 0, 0), (3, 2, 1, 0), (4, 3, 3, 0),
                                           (3, 1, 2, 2), (5, 4, 0, 3)])
def test_a_column_read_and_written_per_program(s, j, k, extra):
    """``extra`` elements past ``programs * S``: 0 takes the aligned path, others the padded segment."""
    programs = 16
    length = programs * s + extra
    x = np.random.default_rng(s * 10 + j).standard_normal(length).astype(np.float32)
    got = run_translated(_column_kernel, (x,), (length,), (programs,), fill=OLD, S=s, J=j, K=k)
    np.testing.assert_array_equal(got, _column(x, length, programs, s, j, k))


def test_a_column_compiles_to_no_gather_or_scatter():
    x, out = np.ones(48, np.float32), np.full(48, OLD, np.float32)

    def fn(x, out):
        ref = jax.new_ref(out)
        tritonplug.triton_call(x, ref, kernel=_column_kernel, out_type=(), grid=(16,), S=3, J=2, K=1)
        return ref[...]
    assert count_unfusible(fn, x, out) == NONE


@triton.jit
def _grid_kernel(x_ptr, out_ptr, S: tl.constexpr, ROWS: tl.constexpr):
    """A 2-D grid: program ``(r, c)`` handles column ``c`` of row ``r`` of an ``(R, S)`` array (``c < S``)."""
    r, c = tl.program_id(0), tl.program_id(1)
    tl.store(out_ptr + r * S + c, tl.load(x_ptr + r * S + c) + r * 100.0 + c)
    tl.store(out_ptr + ROWS * S + r, tl.load(x_ptr + r * S + 1))   # a second window: programs (r, c) all write r


@triton.jit
def _masked_kernel(x_ptr, out_ptr, n, S: tl.constexpr, K: tl.constexpr):
    """Programs past ``n`` neither read nor write (their element may lie past the buffer)."""
    pid = tl.program_id(0)
    live = pid < n
    x = tl.load(x_ptr + pid * S + K, mask=live, other=1.0)
    tl.store(out_ptr + pid * S + K, x - 1.0, mask=live)


@pytest.mark.parametrize("n", [10, 12])
def test_a_masked_column_leaves_the_programs_past_n_alone(n):
    s, k, programs = 3, 2, 12
    length = n * s   # the last live program's element is the buffer's last; later programs' lie past it
    x = np.random.default_rng(n).standard_normal(length).astype(np.float32)
    got = run_translated(_masked_kernel, (x,), (length,), (programs,), n, fill=OLD, S=s, K=k)
    want = np.full(length, OLD, np.float32)
    want[k::s] = x[k::s] - 1
    np.testing.assert_array_equal(got, want)


def test_a_column_across_a_two_dimensional_grid():
    """The per-element store is a window over both program axes (steps ``S`` and 1); the row store repeats one
    element over ``c``: several programs write one element, so it stays the general scatter, which orders them."""
    rows, s = 6, 3
    x = np.random.default_rng(3).standard_normal(rows * s).astype(np.float32)
    got = run_translated(_grid_kernel, (x,), (rows * s + rows,), (rows, s), fill=OLD, S=s, ROWS=rows)
    offsets = (100 * np.arange(rows)[:, None] + np.arange(s)[None, :]).astype(np.float32)
    want = (x.reshape(rows, s) + offsets).reshape(-1)
    np.testing.assert_array_equal(got[:rows * s], want)
    np.testing.assert_array_equal(got[rows * s:], x.reshape(rows, s)[:, 1])
