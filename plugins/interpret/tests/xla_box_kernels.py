"""Kernels whose top-level accesses are boxes of the reshaped buffer (``xla/windows.py``): rows narrower than
their block, per-row scalars, blocks running past the buffer's end, broadcast rows, program ids split in two,
half rows of every head. Module-level, so Triton finds their source."""

import triton
import triton.language as tl


@triton.jit
def narrow_rows_kernel(x_ptr, w_ptr, y_ptr, total_ptr, x_stride, y_stride, n_cols, fill,
                       BLOCK: tl.constexpr):
    """A row of ``n_cols < BLOCK`` per program, the masked lanes reading ``fill``: ``y = x * w + 1`` stored
    into rows ``y_stride`` apart (the columns past ``n_cols`` are not the kernel's), the row's total (the
    ``fill`` lanes included) stored as a per-row scalar."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=fill)
    w = tl.load(w_ptr + cols, mask=mask, other=fill)
    tl.store(total_ptr + row, tl.sum(x, axis=0))
    tl.store(y_ptr + row * y_stride + cols, x * w + 1.0, mask=mask)


@triton.jit
def tail_blocks_kernel(x_ptr, y_ptr, partial_ptr, n, fill, BLOCK: tl.constexpr):
    """Blocks of a vector whose last block runs past the buffer's end (``n`` not a multiple of ``BLOCK``):
    ``y = 2 x`` and each block's sum, ``fill`` counted for the lanes past ``n``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=fill)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(x, axis=0))
    tl.store(y_ptr + offs, 2.0 * x, mask=mask)


@triton.jit
def positions_kernel(x_ptr, table_ptr, y_ptr, seq, width, n, BLOCK: tl.constexpr):
    """Program ``pid`` is row ``pid`` of ``x`` (batch x seq rows) and reads row ``pid % seq`` of ``table`` (a
    row per position, the same for every batch row); the first ``n`` of ``width`` columns, masked."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    t = tl.load(table_ptr + (pid % seq) * width + cols, mask=mask, other=0.0)
    x = tl.load(x_ptr + pid * width + cols, mask=mask, other=0.0)
    tl.store(y_ptr + pid * width + cols, x * t, mask=mask)


@triton.jit
def half_rows_kernel(q_ptr, row_stride, n_heads, head_dim, half,
                     PAD_HEADS: tl.constexpr, PAD_HALF: tl.constexpr):
    """In place: every head's first ``half`` columns become ``a + b``, the next ``half`` ``a - b`` (``a``, ``b``
    the two halves), as RoPE rotates a row's halves; columns past ``2 * half`` are left alone."""
    q_ptr += tl.program_id(0) * row_stride
    heads = tl.arange(0, PAD_HEADS)[:, None]
    cols = tl.arange(0, PAD_HALF)[None, :]
    first = heads * head_dim + cols
    mask = (heads < n_heads) & (cols < half)
    a = tl.load(q_ptr + first, mask=mask, other=0.0)
    b = tl.load(q_ptr + first + half, mask=mask, other=0.0)
    tl.store(q_ptr + first, a + b, mask=mask)
    tl.store(q_ptr + first + half, a - b, mask=mask)


@triton.jit
def ragged_rows_kernel(x_ptr, y_ptr, stride, n_cols, fill, BLOCK: tl.constexpr):
    """Row ``r`` keeps its first ``n_cols - r`` columns (a mask that differs per program, so a window covers lanes
    that some programs mask off): ``y = x + fill`` there, the rest of ``y`` left as it was."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols - row
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=fill)
    tl.store(y_ptr + row * stride + cols, x + fill, mask=mask)


@triton.jit
def row_loop_kernel(x_ptr, w_ptr, y_ptr, colsum_ptr, n_rows, rows_per_program, n_cols, BLOCK: tl.constexpr):
    """Each program walks its ``rows_per_program`` rows in a loop (Liger's backward kernels off the GPU):
    ``y = x * w`` stored inside the loop, a pointer advanced by a static step, and the rows' sum carried to a
    per-program store after the loop."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    y_row = y_ptr + pid * rows_per_program * n_cols + cols
    for row in range(pid * rows_per_program, tl.minimum((pid + 1) * rows_per_program, n_rows)):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        tl.store(y_row, x * w, mask=mask)
        acc += x
        y_row += n_cols
    tl.store(colsum_ptr + pid * n_cols + cols, acc, mask=mask)
