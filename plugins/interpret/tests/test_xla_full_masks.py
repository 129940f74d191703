"""Masks true in every lane of every program, dropped; stores that together write a buffer whole, one concatenation
(issue 38: "masks proved always true dropped", "stores whose blocks form a regular sub-grid as dense writes").

RoPE's kernel loads and stores each row's two halves under ``(heads < n_h) & (cols < rotary / 2)``, true everywhere
at a model's shapes; translated with the mask, each load is a select and each store a select of its padded half over
the buffer, and XLA:GPU ran that 2.7x slower than its own op, where the same arithmetic written as one concatenation
ran as fast (``bench/fusion_store_forms.py``, ``bench/results/fusion-h200/run19-store-forms``). Each case runs a real
Triton kernel on the XLA path against NumPy, with the output buffer holding ``OLD`` before the call, so a lane
written that should not be (a mask dropped that was not full, a buffer taken as written whole that was not) shows,
and counts the StableHLO's selects and concatenations, so a mask kept that was full, or selects kept where the
stores cover the buffer, show too.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from xla_hlo_support import compiled_hlo, run_translated

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret"), pytest.mark.usefixtures("fresh_xla_path")]
OLD = -7.0


#: a compiled instruction's line: its result type, then its opcode
_LINE = re.compile(r"^\s*(?:ROOT\s+)?%\S+\s+=\s+(\S+)\s+([a-z][\w-]*)\(", re.MULTILINE)


def _ops(kernel, inputs, out_shape, grid, *args, **constexprs) -> tuple[int, int]:
    """How many selects of float values (not a floor division's integer fix-up) and concatenations the
    translation compiles to (XLA's CPU HLO: the translation's private helpers inlined)."""
    def fn(*arrays):
        out = jax.new_ref(arrays[-1])
        tritonplug.triton_call(*arrays[:-1], out, *args, kernel=kernel, out_type=(), grid=grid, **constexprs)
        return out[...]

    found = _LINE.findall(compiled_hlo(fn, *inputs, np.full(out_shape, OLD, np.float32)))
    return (sum(op == "select" and ty.startswith(("f16", "bf16", "f32", "f64")) for ty, op in found),
            sum(op == "concatenate" for _, op in found))


#: how ``_halves_kernel`` stores its two halves (``STORES``)
BOTH, SECOND_FIRST, ONLY_FIRST, ONLY_SECOND, SAME_HALF = range(5)


@triton.jit
def _halves_kernel(x_ptr, out_ptr, H, BH: tl.constexpr, D: tl.constexpr, STORES: tl.constexpr):
    # RoPE's form: each program one position's H heads of D, under the heads-and-half-columns mask
    row = tl.program_id(0)
    heads = tl.arange(0, BH)[:, None]
    cols = tl.arange(0, D // 2)[None, :]
    mask = (heads < H) & (cols < D // 2)
    at = row * H * D + heads * D + cols
    a = tl.load(x_ptr + at, mask=mask, other=0.0)
    b = tl.load(x_ptr + at + D // 2, mask=mask, other=0.0)
    if STORES == 1:
        tl.store(out_ptr + at + D // 2, a + b, mask=mask)
    if STORES != 3:
        tl.store(out_ptr + at, a - b, mask=mask)
    if STORES == 0 or STORES == 3:
        tl.store(out_ptr + at + D // 2, a + b, mask=mask)
    if STORES == 4:
        tl.store(out_ptr + at, a + b, mask=mask)


def _halves(x, rows, h, d, stores=BOTH):
    x = x.reshape(rows, h, d)
    a, b = x[..., :d // 2], x[..., d // 2:]
    out = np.full_like(x, OLD)
    if stores != ONLY_SECOND:
        out[..., :d // 2] = a + b if stores == SAME_HALF else a - b
    if stores in (BOTH, SECOND_FIRST, ONLY_SECOND):
        out[..., d // 2:] = a + b
    return out.reshape(-1)


@pytest.mark.parametrize("stores", [BOTH, SECOND_FIRST], ids=["in-order", "second-half-first"])
def test_half_rows_under_a_full_mask_are_one_concatenation(stores):
    rows, h, d = 6, 4, 16
    x = np.random.default_rng(1).standard_normal(rows * h * d).astype(np.float32)
    got = run_translated(_halves_kernel, (x,), x.shape, (rows,), h, fill=OLD, BH=4, D=d, STORES=stores)
    np.testing.assert_allclose(got, _halves(x, rows, h, d, stores), rtol=1e-6)
    assert _ops(_halves_kernel, (x,), x.shape, (rows,), h, BH=4, D=d, STORES=stores) == (0, 1)


def test_a_mask_that_leaves_lanes_off_is_cut_away_and_the_stores_write_the_box():
    """3 heads in a block of 4: the fourth head's lanes are off in every program, so the mask is its box (exact,
    not full), and the heads are cut to 3 (:mod:`.live_block`), where it is full: no select on the loads, the
    stores write the box's lanes, which cover the buffer: one concatenation."""
    rows, h, d = 6, 3, 16
    x = np.random.default_rng(2).standard_normal(rows * h * d).astype(np.float32)
    got = run_translated(_halves_kernel, (x,), x.shape, (rows,), h, fill=OLD, BH=4, D=d, STORES=BOTH)
    np.testing.assert_allclose(got, _halves(x, rows, h, d), rtol=1e-6)
    assert _ops(_halves_kernel, (x,), x.shape, (rows,), h, BH=4, D=d, STORES=BOTH) == (0, 1)


@pytest.mark.parametrize("stores", [ONLY_FIRST, ONLY_SECOND, SAME_HALF], ids=["only-first", "only-second", "same-half"])
def test_stores_that_leave_part_of_the_buffer_keep_its_contents(stores):
    rows, h, d = 5, 4, 8
    x = np.random.default_rng(3).standard_normal(rows * h * d).astype(np.float32)
    got = run_translated(_halves_kernel, (x,), x.shape, (rows,), h, fill=OLD, BH=4, D=d, STORES=stores)
    np.testing.assert_allclose(got, _halves(x, rows, h, d, stores), rtol=1e-6)
    assert _ops(_halves_kernel, (x,), x.shape, (rows,), h, BH=4, D=d, STORES=stores)[1] == 0


@triton.jit
def _rows_kernel(x_ptr, out_ptr, n, far, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MODE == 0:
        mask = offs < n
    elif MODE == 1:
        mask = (offs < n) | (offs < far)    # full where either is
    elif MODE == 2:
        mask = (offs < far) & (offs < n)    # full only where both are
    elif MODE == 3:
        mask = (tl.arange(0, BLOCK) < 5) | (offs < n)   # its box in every program, or not: not a box
    else:
        mask = n > offs                     # the comparison turned round
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=1.0) * 2, mask=mask)


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4], ids=["lt", "or", "and", "or-box", "gt"])
@pytest.mark.parametrize("short", [0, 1, 5, 31], ids=lambda s: f"short{s}")
def test_a_row_mask_is_dropped_only_where_every_program_fills_its_block(mode, short):
    """``offs < n`` over 4 programs of 32: full at n = 128, not when the last program's block is cut short by any
    number of lanes (its lanes past ``n`` must keep ``OLD``); ``|`` with a full mask is full, ``&`` is not, nor
    ``|`` of a box (the first 5 lanes of every block) with a mask that is none."""
    programs, block = 4, 32
    n, far = programs * block - short, programs * block
    x = np.random.default_rng(4).standard_normal(programs * block).astype(np.float32)
    live = np.arange(x.size) < (far if mode == 1 else n)
    live |= (np.arange(x.size) % block < 5) & (mode == 3)
    got = run_translated(_rows_kernel, (x,), x.shape, (programs,), n, far, fill=OLD, BLOCK=block, MODE=mode)
    np.testing.assert_array_equal(got, np.where(live, x * 2, np.float32(OLD)))
    selects = _ops(_rows_kernel, (x,), x.shape, (programs,), n, far, BLOCK=block, MODE=mode)[0]
    assert (selects == 0) == (short == 0 or mode == 1)    # (one store of the whole buffer: its values, no select)


@triton.jit
def _columns_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, SKIP_MIDDLE: tl.constexpr):
    # three per-row scalars at pid * 3 + j (PolyNorm's RSTDs): a unit axis of radix 3
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid * 3 + 2, tl.min(x, axis=0))
    if not SKIP_MIDDLE:
        tl.store(out_ptr + pid * 3 + 1, tl.max(x, axis=0))
    tl.store(out_ptr + pid * 3, tl.sum(x, axis=0))


@pytest.mark.parametrize("skip_middle", [False, True], ids=["every-column", "middle-left"])
def test_per_row_scalars_in_columns_are_one_concatenation_when_every_column_is_written(skip_middle):
    programs, block = 5, 16
    x = np.random.default_rng(5).standard_normal(programs * block).astype(np.float32)
    rows = x.reshape(programs, block)
    want = np.stack([rows.sum(1), np.full(programs, OLD, np.float32) if skip_middle else rows.max(1), rows.min(1)], 1)
    got = run_translated(_columns_kernel, (x,), (programs * 3,), (programs,), fill=OLD, BLOCK=block,
                         SKIP_MIDDLE=skip_middle)
    np.testing.assert_allclose(got, want.reshape(-1), rtol=1e-5)
    concatenations = _ops(_columns_kernel, (x,), (programs * 3,), (programs,), BLOCK=block, SKIP_MIDDLE=skip_middle)[1]
    assert concatenations == (0 if skip_middle else 1)


@triton.jit
def _narrow_rows_kernel(x_ptr, out_ptr, n, width, BLOCK: tl.constexpr, SHRINK: tl.constexpr):
    # SwiGLU's form: a row of n columns in a power-of-two block, rows `width` apart; SHRINK: program p's row has
    # n - p columns, so the programs' live lanes differ
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n - row * SHRINK
    x = tl.load(x_ptr + row * width + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * width + cols, x * 3 + 1, mask=mask)


@pytest.mark.parametrize("width,shrink", [(30, 0), (40, 0), (40, 1)], ids=["rows-n-wide", "rows-apart", "shrinking"])
def test_a_store_whose_mask_is_its_windows_box_is_written_without_it(width, shrink):
    """``cols < n`` with n = 30 in a block of 32: the same box in every program, and the block is cut to its 30 live
    lanes (:mod:`.live_block`), where the mask is full: rows n wide are written whole, no select at all. Rows 40
    apart keep ``OLD`` past column 30: the store's select over them. A mask whose box differs per program (cut to
    the widest, 30) keeps the load's select and the store's."""
    rows, n, block = 5, 30, 32
    x = np.random.default_rng(6).standard_normal(rows * width).astype(np.float32)
    got = run_translated(_narrow_rows_kernel, (x,), x.shape, (rows,), n, width, fill=OLD, BLOCK=block, SHRINK=shrink)
    live = np.arange(width)[None, :] < (n - shrink * np.arange(rows))[:, None]
    np.testing.assert_allclose(got, np.where(live, x.reshape(rows, width) * 3 + 1, np.float32(OLD)).reshape(-1),
                               rtol=1e-6)
    selects = _ops(_narrow_rows_kernel, (x,), x.shape, (rows,), n, width, BLOCK=block, SHRINK=shrink)[0]
    assert selects == {(30, 0): 0, (40, 0): 1, (40, 1): 2}[width, shrink]
