"""The XLA-path corpus, part two: kernels on tiles (layout, attention and matmul), memory (block
pointers, descriptors, atomics), loops and grids. Rows and elements: ``xla_corpus_row_kernels.py``;
both are listed in ``xla_corpus_kernels.py``. Module-level, so Triton finds their source."""

import triton
import triton.language as tl

# ----------------------------------------------------------------------------- layout


@triton.jit
def transpose_kernel(x_ptr, m, n, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    """out (n x m) = x (m x n) transposed, tile by tile over a 2-D grid."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    tile = tl.load(x_ptr + rm[:, None] * n + rn[None, :], mask=(rm[:, None] < m) & (rn[None, :] < n))
    t = tl.trans(tile)
    tl.store(out_ptr + rn[:, None] * m + rm[None, :], t, mask=(rn[:, None] < n) & (rm[None, :] < m))


@triton.jit
def complex_mul_kernel(a_ptr, b_ptr, n, out_ptr, swapped_ptr, BLOCK: tl.constexpr):
    """Interleaved complex numbers: split into real/imag, multiply, join back; a permute on the side."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    pairs = offs[:, None] * 2 + tl.arange(0, 2)[None, :]
    mask = pairs < 2 * n
    a = tl.load(a_ptr + pairs, mask=mask, other=0.0)
    b = tl.load(b_ptr + pairs, mask=mask, other=0.0)
    ar, ai = tl.split(a)
    br, bi = tl.split(b)
    prod = tl.join(ar * br - ai * bi, ar * bi + ai * br)
    tl.store(out_ptr + pairs, prod, mask=mask)
    cube = tl.reshape(a, (BLOCK // 4, 4, 2))
    swapped = tl.permute(cube, (0, 2, 1))  # [block, re/im, 4]
    flat = tl.reshape(swapped, (BLOCK, 2))
    tl.store(swapped_ptr + pairs, flat, mask=mask)


# ----------------------------------------------------------------------------- attention and matmul


@triton.jit
def flash_attention_fwd_kernel(q_ptr, k_ptr, v_ptr, seq_len, sm_scale, o_ptr, HEAD: tl.constexpr,
                               BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr):
    """One (query block, batch*head) per program; K/V blocks in a loop with a running max (exp2)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh.to(tl.int64) * seq_len * HEAD
    rm = start_m * BM + tl.arange(0, BM)
    rd = tl.arange(0, HEAD)
    q = tl.load(q_ptr + base + rm[:, None] * HEAD + rd[None, :], mask=rm[:, None] < seq_len, other=0.0)
    m_i = tl.full([BM], -float("inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, HEAD], tl.float32)
    qk_scale = sm_scale * 1.44269504
    end = tl.minimum((start_m + 1) * BM, seq_len) if CAUSAL else seq_len
    for start_n in range(0, end, BN):
        rn = start_n + tl.arange(0, BN)
        kv_mask = rn[:, None] < seq_len
        k = tl.load(k_ptr + base + rn[:, None] * HEAD + rd[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + base + rn[:, None] * HEAD + rd[None, :], mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        valid = rn[None, :] < seq_len
        if CAUSAL:
            valid = valid & (rm[:, None] >= rn[None, :])
        qk = tl.where(valid, qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + rm[:, None] * HEAD + rd[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rm[:, None] < seq_len)


@triton.jit
def grouped_matmul_kernel(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                          stride_cm, stride_cn, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                          GROUP_M: tl.constexpr, ACTIVATION: tl.constexpr):
    """fp16 matmul with fp32 accumulation, grouped program order, masked K tail, fused leaky ReLU."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    in_group = GROUP_M * num_n
    group = pid // in_group
    first_m = group * GROUP_M
    group_size = min(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % in_group) % group_size)
    pid_n = (pid % in_group) // group_size
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    if ACTIVATION == "leaky_relu":
        acc = tl.where(acc >= 0, acc, 0.01 * acc)
    c = acc.to(tl.float16)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


# ----------------------------------------------------------------------------- memory


@triton.jit
def block_ptr_copy_kernel(x_ptr, m, n, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    """Copy plus one with block pointers, walking column tiles with tl.advance (Triton < 3.9)."""
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, shape=(m, n), strides=(n, 1), offsets=(pid * BM, 0), block_shape=(BM, BN),
                            order=(1, 0))
    dst = tl.make_block_ptr(out_ptr, shape=(m, n), strides=(n, 1), offsets=(pid * BM, 0), block_shape=(BM, BN),
                            order=(1, 0))
    for _ in range(0, tl.cdiv(n, BN)):
        tile = tl.load(src, boundary_check=(0, 1), padding_option="zero")
        tl.store(dst, tile + 1, boundary_check=(0, 1))
        src = tl.advance(src, (0, BN))
        dst = tl.advance(dst, (0, BN))


@triton.jit
def descriptor_tiles_kernel(x_ptr, m, n, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    """A 2-D tiled scale with tensor descriptors over a (rows, cols) grid (edges handled by the descriptor)."""
    src = tl.make_tensor_descriptor(x_ptr, shape=[m, n], strides=[n, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[m, n], strides=[n, 1], block_shape=[BM, BN])
    r = tl.program_id(0) * BM
    c = tl.program_id(1) * BN
    tile = src.load([r, c])
    dst.store([r, c], tile * 3 - 1)


@triton.jit
def histogram_kernel(x_ptr, n, n_bins, lo, width, counts_ptr, bin_max_ptr, BLOCK: tl.constexpr):
    """Bins by value: atomic_add counts (many lanes hit one bin) and the largest value per bin (atomic_max)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = ((x - lo) / width).to(tl.int32)
    b = tl.minimum(tl.maximum(b, 0), n_bins - 1)
    tl.atomic_add(counts_ptr + b, 1, mask=mask)
    tl.atomic_max(bin_max_ptr + b, x, mask=mask)


@triton.jit
def column_sum_atomic_kernel(x_ptr, n_rows, n_cols, out_ptr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Column sums split over row chunks: programs meet on the same outputs through atomic_add."""
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    rows = pid_r * ROWS + tl.arange(0, ROWS)
    cols = pid_c * BLOCK + tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
    tl.atomic_add(out_ptr + cols, tl.sum(x, axis=0), mask=cols < n_cols)


# ----------------------------------------------------------------------------- loops and grids


@triton.jit
def poly_collatz_kernel(x_ptr, start_ptr, n, poly_ptr, steps_ptr, C0: tl.constexpr, C1: tl.constexpr,
                        C2: tl.constexpr, C3: tl.constexpr, BLOCK: tl.constexpr):
    """Horner over a static_range of constexpr coefficients; a while loop whose trip count is data."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    acc = tl.zeros_like(x)
    for i in tl.static_range(4):
        c = C3 if i == 0 else (C2 if i == 1 else (C1 if i == 2 else C0))
        acc = acc * x + c
    tl.store(poly_ptr + offs, acc, mask=mask)
    # one scalar Collatz walk per program: the loop runs a different number of times in each
    v = tl.load(start_ptr + tl.program_id(0))
    steps = 0
    while v != 1:
        if v % 2 == 0:
            v = v // 2
        else:
            v = 3 * v + 1
        steps += 1
    tl.store(steps_ptr + tl.program_id(0), steps)


@triton.jit
def grid3d_kernel(x_ptr, stride_b, stride_h, H, W, out_ptr, info_ptr, BLOCK: tl.constexpr):
    """A 3-D grid (width tiles, rows, batch) with int64 offsets and tl.num_programs."""
    pid_w = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    base = b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h
    cols = pid_w * BLOCK + tl.arange(0, BLOCK)
    mask = cols < W
    x = tl.load(x_ptr + base + cols, mask=mask)
    scale = (b * H + h + 1).to(tl.float32)
    tl.store(out_ptr + base + cols, x * scale, mask=mask)
    linear = (b * tl.num_programs(1) + h) * tl.num_programs(0) + pid_w
    total = tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)
    tl.store(info_ptr + linear, total * 1000 + linear)


@triton.jit
def strided_rows_kernel(x_ptr, n_rows, n_cols, out_ptr, ROWS_PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr):
    """Each program walks a chunk of rows with a dynamic upper bound and keeps a running row maximum."""
    first = tl.program_id(0) * ROWS_PER_PROGRAM
    last = tl.minimum(first + ROWS_PER_PROGRAM, n_rows)
    cols = tl.arange(0, BLOCK)
    running = tl.full([BLOCK], -float("inf"), tl.float32)
    for row in range(first, last):
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        running = tl.maximum(running, x)
    tl.store(out_ptr + tl.program_id(0) * n_cols + cols, running, mask=cols < n_cols)
