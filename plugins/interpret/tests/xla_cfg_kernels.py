"""Kernels whose TTIR has several blocks, noinline helpers, bool buffers: for ``test_xla_control_flow.py``."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def early_exit_kernel(x_ptr, n_rows, n_cols, y_ptr, BLOCK: tl.constexpr):
    """Rows past ``n_rows`` return at once; negative-first rows are zeroed and return; others are doubled."""
    row = tl.program_id(0)
    if row >= n_rows:
        return
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    first = tl.load(x_ptr + row * n_cols)
    if first < 0:
        tl.store(y_ptr + row * n_cols + cols, tl.zeros([BLOCK], tl.float32), mask=mask)
        return
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    tl.store(y_ptr + row * n_cols + cols, x * 2, mask=mask)


@triton.jit
def nested_return_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    """Returns from inside a nested ``if``; the blocks merge again before the last store."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    s = tl.sum(x)
    if s > 0:
        if s > 4:
            tl.store(y_ptr + offs, x * 0 + 4)
            return
        x = x + 1
    tl.store(y_ptr + offs, x)


@triton.jit(noinline=True)
def _scaled(x, scale):
    if x < 0:
        return -x * scale
    return x * scale


@triton.jit(noinline=True)
def _put(p, v):
    tl.store(p, v)


@triton.jit
def noinline_kernel(x_ptr, scale, y_ptr):
    pid = tl.program_id(0)
    _put(y_ptr + pid, _scaled(tl.load(x_ptr + pid), scale) + _scaled(1.0, 2.0))


@triton.jit
def bool_kernel(x_ptr, m_ptr, n, y_ptr, b_ptr, BLOCK: tl.constexpr):
    """Reads and writes bool buffers (Triton goes through i8 pointers)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    keep = tl.load(m_ptr + offs, mask=mask, other=0)
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.store(y_ptr + offs, tl.where(keep, x, -x), mask=mask)
    tl.store(b_ptr + offs, x > 0, mask=mask)


@triton.jit
def descriptor_add_kernel(a_desc, b_desc, c_desc, BM: tl.constexpr, BN: tl.constexpr):
    """c = a + b tile by tile through host-side descriptors (edge tiles clipped)."""
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    c_desc.store([m, n], a_desc.load([m, n]) + b_desc.load([m, n]))
