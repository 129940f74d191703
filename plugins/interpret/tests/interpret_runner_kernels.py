"""The kernels the interpret runner's tests (``test_interpret_runner_*.py``) launch. Module-level, so
Triton finds their source; ``helper_kernel`` calls helpers of another module (``interpret_helpers.py``)."""

import interpret_helpers
import triton
import triton.language as tl
from interpret_helpers import negate


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def helper_kernel(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = interpret_helpers.scale_shift(x, shift)  # module attribute, helper calls a helper
    tl.store(out_ptr + offs, negate(y), mask=mask)  # imported name


@triton.jit
def apply_kernel(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, FN(tl.load(x_ptr + offs, mask=mask)), mask=mask)


@triton.jit
def two_outputs_kernel(x_ptr, prod_ptr, sum_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(prod_ptr + offs, x * alpha, mask=mask)
    tl.store(sum_ptr + offs, x + alpha, mask=mask)


@triton.jit
def scalars_kernel(out_ptr, flag, i64, u32, f64):
    tl.store(out_ptr + 0, tl.where(flag, 1.0, -1.0).to(tl.float64))
    tl.store(out_ptr + 1, i64.to(tl.float64))
    tl.store(out_ptr + 2, u32.to(tl.float64))
    tl.store(out_ptr + 3, f64 * 2)


@triton.jit
def accumulate_kernel(acc_ptr, x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(acc_ptr + offs, mask=mask)
    tl.store(acc_ptr + offs, acc + tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def atomic_kernel(x_ptr, total_ptr, bins_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.atomic_add(total_ptr, tl.sum(x, axis=0))
    tl.atomic_add(bins_ptr + offs % 4, 1, mask=mask)  # lanes collide on purpose


@triton.jit
def cas_kernel(lock_ptr, old_ptr, swapped_ptr):
    pid = tl.program_id(0)
    tl.store(old_ptr + pid, tl.atomic_cas(lock_ptr, 0, pid + 1))  # only the first program finds 0
    tl.store(swapped_ptr + pid, tl.atomic_xchg(lock_ptr + 1, pid))


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def positive_row_sum_kernel(x_ptr, out_ptr, cols, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    mask = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=mask, other=0.0)
    tl.store(out_ptr + row, tl.sum(tl.where(x > 0, x, 0.0), axis=0))


@triton.jit
def grid_kernel(out_ptr):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    ny = tl.num_programs(1)
    nz = tl.num_programs(2)
    tl.store(out_ptr + (x * ny + y) * nz + z, x * 100 + y * 10 + z)


@triton.jit
def tuple_kernel(args, out_ptr, n, BLOCK: tl.constexpr):
    x_ptr = args[0]
    y_ptr = args[1][0]
    scale = args[1][1]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * scale + y + args[2], mask=mask)


@triton.jit
def descriptor_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, [M, N], [N, 1], [BM, BN])
    dst.store([pid * BM, 0], src.load([pid * BM, 0]) * 2)  # BN > N: the padding lanes are masked


@triton.jit
def failing_kernel(out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr, 1.0)
    tl.static_assert(BLOCK < 0, "BLOCK must be negative")


@triton.jit
def bf16_ops_kernel(x_ptr, y_ptr, mul_ptr, exp_ptr, max_ptr, cmp_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)
    tl.store(mul_ptr + offs, x * y - x / y, mask=mask)
    tl.store(exp_ptr + offs, tl.exp(x.to(tl.float32)).to(tl.bfloat16), mask=mask)
    tl.store(max_ptr, tl.max(tl.where(mask, x, -1000.0), axis=0))
    tl.store(cmp_ptr + offs, (x < y).to(tl.int32), mask=mask)


@triton.jit
def bf16_sum_kernel(x_ptr, out_ptr, cols, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    x = tl.load(x_ptr + row * cols + c, mask=c < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def bf16_convert_kernel(x_ptr, bf_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(bf_ptr + offs, tl.load(x_ptr + offs, mask=mask).to(tl.bfloat16), mask=mask)


@triton.jit
def bf16_dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    a = tl.load(a_ptr + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + r[:, None] * B + r[None, :])
    tl.store(c_ptr + r[:, None] * B + r[None, :], tl.dot(a, b))


@triton.jit
def bf16_atomic_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offs % 2, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def unmasked_store_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < 1000))


@triton.jit
def shifted_load_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs - 1, mask=mask), mask=mask)


@triton.jit
def atomic_oob_kernel(out_ptr, index):
    tl.atomic_add(out_ptr + index, 1.0)


@triton.jit
def scribble_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, x * 0 - 1, mask=mask)  # writes to an operand that is not aliased
    tl.store(out_ptr + offs, x, mask=mask)
