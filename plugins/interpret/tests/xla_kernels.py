"""Kernels for the XLA path's tests (module-level, so Triton finds their source)."""

import triton
import triton.language as tl


@triton.jit
def math_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.exp(x) + tl.log(tl.abs(x) + 1) * tl.sqrt(tl.abs(x)) - tl.sigmoid(x) + tl.maximum(x, 0.5)
    y = y + tl.extra.cuda.libdevice.tanh(x) + tl.floor(x) + tl.where(x > 0, x % 2.0, -x)
    tl.store(out_ptr + offs, y, mask=mask)


@triton.jit
def int_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1)
    y = (x // 3) * 7 + (x % 5) - (x >> 1) + (x << 2) ^ (x & 12) | 1
    u = x.to(tl.uint32, bitcast=True) // 3
    tl.store(out_ptr + offs, y + u.to(tl.int32, bitcast=True), mask=mask)


@triton.jit
def scan_argmax_kernel(x_ptr, cum_ptr, idx_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * BLOCK + cols)
    tl.store(cum_ptr + row * BLOCK + cols, tl.cumsum(x, axis=0))
    tl.store(idx_ptr + row, tl.argmax(x, axis=0))


@triton.jit
def while_if_kernel(n_ptr, out_ptr):
    pid = tl.program_id(0)
    n = tl.load(n_ptr + pid)
    total = 0
    i = 0
    while i < n:  # trip counts differ between programs
        if i % 2 == 0:
            total += i
        else:
            total -= 1
        i += 1
    tl.store(out_ptr + pid, total)


@triton.jit
def loop_store_kernel(x_ptr, n_cols, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, n_cols, BLOCK):  # stores inside a loop, then loads of what was stored
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        tl.store(out_ptr + row * n_cols + cols, tl.load(x_ptr + row * n_cols + cols, mask=mask) * 2, mask=mask)
    first = tl.load(out_ptr + row * n_cols)
    tl.store(out_ptr + row * n_cols, first + 1)


@triton.jit
def block_pointer_kernel(x_ptr, M, N, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
    dst = tl.make_block_ptr(out_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
    x = tl.load(src, boundary_check=(0, 1), padding_option="zero")
    tl.store(dst, x + 1, boundary_check=(0, 1))
    src = tl.advance(src, (0, 0))


@triton.jit
def descriptor_kernel(x_ptr, M, N, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, [M, N], [N, 1], [BM, BN])
    dst.store([pid * BM, 0], src.load([pid * BM, 0]) * 2)


@triton.jit
def atomics_kernel(x_ptr, n, total_ptr, bins_ptr, hi_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.atomic_add(total_ptr, tl.sum(x, axis=0))
    tl.atomic_add(bins_ptr + offs % 4, 1, mask=mask)
    tl.atomic_max(hi_ptr, tl.max(tl.where(mask, x, -1e9), axis=0))


@triton.jit
def ticket_kernel(counter_ptr, order_ptr):
    ticket = tl.atomic_add(counter_ptr, 1)  # the old value is used: programs run in order
    tl.store(order_ptr + tl.program_id(0), ticket)


@triton.jit
def cas_kernel(lock_ptr, old_ptr):
    pid = tl.program_id(0)
    tl.store(old_ptr + pid, tl.atomic_cas(lock_ptr, 0, pid + 1))


@triton.jit
def cas_vector_kernel(lock_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(old_ptr + offs, tl.atomic_cas(lock_ptr + offs, offs * 0, offs + 1))


@triton.jit
def _bit_or(a, b):
    return a | b


@triton.jit
def bits_kernel(x_ptr, flags_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))
    tl.atomic_or(flags_ptr, tl.reduce(x, 0, _bit_or))
    tl.atomic_xor(flags_ptr + 1, tl.xor_sum(x, axis=0))


@triton.jit
def rand_sort_kernel(seed, out_ptr, sorted_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    r = tl.rand(seed, offs)
    tl.debug_barrier()
    tl.store(out_ptr + offs, r)
    tl.store(sorted_ptr + offs, tl.sort(tl.randint(seed, offs)))


@triton.jit
def bf16_kernel(x_ptr, y_ptr, n, out_ptr, down_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)
    tl.store(out_ptr + offs, x * y - x / y, mask=mask)
    tl.store(down_ptr + offs, (x.to(tl.float32) * 3.3).to(tl.bfloat16), mask=mask)


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    a = tl.load(a_ptr + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + r[:, None] * B + r[None, :])
    tl.store(c_ptr + r[:, None] * B + r[None, :], tl.dot(a, b))


@triton.jit
def dot_trans_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    """``(a @ b).T`` per program: XLA folds the transpose into the dot (the form FLA's attention gives)."""
    r = tl.arange(0, B)
    base = tl.program_id(0) * B * B
    a = tl.load(a_ptr + base + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + base + r[:, None] * B + r[None, :])
    tl.store(c_ptr + base + r[:, None] * B + r[None, :], tl.trans(tl.dot(a, b)))


@triton.jit
def shape_kernel(x_ptr, out_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    x = tl.load(x_ptr + r[:, None] * B + r[None, :])
    t = tl.trans(x)
    a, b = tl.split(tl.reshape(t, (B, B // 2, 2)))
    j = tl.join(b, a)
    tl.store(out_ptr + r[:, None] * B + r[None, :], tl.reshape(j, (B, B))
             + tl.broadcast_to(tl.expand_dims(tl.sum(x, axis=0), 0), (B, B)))


@triton.jit
def oob_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + BLOCK, tl.load(x_ptr + offs))
