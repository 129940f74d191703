"""Kernels shared by the numeric tests (module-level, so every backend can find their source)."""

import triton
import triton.language as tl
from interpret_helpers_nested import scale_then_shift


@triton.jit
def add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def double(x):
    return x * 2


@triton.jit
def uses_helpers_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, scale_then_shift(double(x), 3.0), mask=mask)


@triton.jit
def two_outputs_kernel(x_ptr, scale, n, sum_ptr, prod_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(sum_ptr + offs, x + scale, mask=mask)
    tl.store(prod_ptr + offs, x * scale, mask=mask)


@triton.jit
def accumulate_kernel(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(acc_ptr + offs, mask=mask)
    tl.store(acc_ptr + offs, acc + tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def atomic_sum_kernel(x_ptr, n, total_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(total_ptr, tl.sum(x, axis=0))


@triton.jit
def grid3_kernel(out_ptr, NX: tl.constexpr, NY: tl.constexpr):
    i, j, k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    tl.store(out_ptr + (k * NY + j) * NX + i, i + 10 * j + 100 * k)


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def heuristic_add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def where_rowsum_kernel(x_ptr, n_cols, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(tl.where(x > 0, x, 0.0), axis=0))


@triton.jit
def tuple_add_kernel(x_ptr, yz, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(yz[0] + offs, mask=mask) * tl.load(yz[1] + offs, mask=mask), mask=mask)


@triton.jit
def oob_store_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + BLOCK, tl.load(x_ptr + offs))


@triton.jit
def gapped_add_kernel(x_ptr, n, y_ptr, out_ptr, BLOCK: tl.constexpr):
    """``add_kernel`` with a scalar between its arrays (their positions are not contiguous)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def gapped_sub_kernel(x_ptr, n, y_ptr, out_ptr, BLOCK: tl.constexpr):
    """``x - y`` with a scalar between its arrays: an operand order mixed up shows in the result."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) - tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def scaled_add_kernel(x_ptr, y_ptr, n, alpha, out_ptr, BLOCK: tl.constexpr):
    """``x * alpha + y``, masked: elementwise, so its translation is windows only (the inline tests' kernel)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * alpha + y, mask=mask)
