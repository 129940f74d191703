"""Kernels whose loads sit in loops, for the XLA path's window tests (module-level, so Triton finds their source)."""

import triton
import triton.language as tl
from matmul import matmul_kernel as _example_matmul

#: The tutorial matmul of examples/matmul.py without its autotuner: grouped program order, pointers advanced
#: in the k-loop, masks at every edge (examples/ is on sys.path: conftest.py).
grouped_matmul_kernel = _example_matmul.fn


@triton.jit
def row_sum_kernel(x_ptr, n_cols, stride, out_ptr, BLOCK: tl.constexpr):
    """One row per program, summed BLOCK columns at a time through a pointer the loop advances."""
    row = tl.program_id(0)
    ptrs = x_ptr + row * stride + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(ptrs, mask=cols < n_cols, other=0.0)
        ptrs += BLOCK
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def shifted_sum_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    """x[i - 1] + x[i] + x[i + 1] with zeros outside, pointers computed from the loop counter:
    windows start before the buffer and run past its end."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in range(0, 3):
        src = offs + j - 1
        acc += tl.load(x_ptr + src, mask=(src >= 0) & (src < n), other=0.0)
    tl.store(out_ptr + offs, acc, mask=offs < n)


@triton.jit
def loaded_step_kernel(x_ptr, step_ptr, n_steps, out_ptr, BLOCK: tl.constexpr):
    """A pointer advanced by a step read from memory (not known before the kernel runs)."""
    pid = tl.program_id(0)
    step = tl.load(step_ptr)
    ptrs = x_ptr + pid * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(0, n_steps):
        acc += tl.load(ptrs)
        ptrs += step
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


@triton.jit
def overrun_loop_kernel(x_ptr, n_steps, out_ptr, BLOCK: tl.constexpr):
    """Reads one block past the end of ``x`` on its last trip, without a mask."""
    ptrs = x_ptr + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(0, n_steps):
        acc += tl.load(ptrs)
        ptrs += BLOCK
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@triton.jit
def two_loops_kernel(x_ptr, n_steps, out_ptr, BLOCK: tl.constexpr):
    """Two loops in a row whose pointer iter_args (printed under the same names) move by different steps."""
    pid = tl.program_id(0)
    lanes = pid * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    p = x_ptr + lanes
    for _ in range(0, n_steps):
        acc += tl.load(p)
        p += 4 * BLOCK
    q = x_ptr + lanes
    for _ in range(0, 3):
        acc += 10.0 * tl.load(q)
        q += 1
    tl.store(out_ptr + lanes, acc)


@triton.jit
def halves_matmul_kernel(a_ptr, b_ptr, M, N, K, c_ptr, BLOCK: tl.constexpr):
    """Two programs per output tile: the second half of the grid reads the same A tiles with a mask that
    is all false (``half == 0``) and writes its product, zeros, to the second half of ``c``. A tile's
    pointers are shared across the halves; its values are not."""
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK)
    tiles = tl.cdiv(M, BLOCK) * tiles_n
    half = pid // tiles
    tile = pid % tiles
    rm = (tile // tiles_n) * BLOCK + tl.arange(0, BLOCK)
    rn = (tile % tiles_n) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK)):
        kk = k * BLOCK + tl.arange(0, BLOCK)
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K) & (half == 0),
                    other=0.0)
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + half * M * N + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def gathered_rows_matmul_kernel(a_ptr, rows_ptr, b_ptr, N, K, c_ptr, BLOCK: tl.constexpr, PER_PROGRAM: tl.constexpr):
    """c[i] = a[rows[i]] @ b, one BLOCK x BLOCK output tile per program: the A tile's rows come from
    memory, read at the tile's rows (equal in every program of a row of tiles) or, with PER_PROGRAM,
    at ``rows[BLOCK * program + j]`` (so rows holds a block of row indices for every program)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK + tl.arange(0, BLOCK)
    if PER_PROGRAM:
        src = tl.load(rows_ptr + (pid_m * tl.num_programs(1) + pid_n) * BLOCK + tl.arange(0, BLOCK))
    else:
        src = tl.load(rows_ptr + rm)
    rn = pid_n * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        kk = k + tl.arange(0, BLOCK)
        a = tl.load(a_ptr + src[:, None] * K + kk[None, :])
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def accumulate_forms_kernel(a_ptr, b_ptr, K, N, c_ptr, FORM: tl.constexpr, BLOCK: tl.constexpr):
    """c = a @ b (square tiles, edges multiples of BLOCK) accumulated in three ways: FORM 0
    ``acc = tl.dot(a, b, acc)``, 1 ``acc += tl.dot(a, b)``, 2 ``acc = acc * 0.5 + tl.dot(a, b)`` (the
    accumulator is read by more than the sum: each step's product must stay a step of its own), 3
    ``acc = tl.dot(a, b, acc)`` into an fp16 accumulator (rounded every step, so every step stays one too)."""
    rm = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    if FORM == 3:
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float16)
    else:
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        kk = k + tl.arange(0, BLOCK)
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :])
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :])
        if FORM == 0:
            acc = tl.dot(a, b, acc)
        elif FORM == 1:
            acc += tl.dot(a, b)
        elif FORM == 2:
            acc = acc * 0.5 + tl.dot(a, b)
        else:
            acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc, out_dtype=tl.float16)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float32))
