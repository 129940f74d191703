"""The XLA-path corpus, part one: kernels along rows and elements (normalisations, elementwise and
libdevice functions, casts and fp8, reductions and scans). Tiles, memory and grids:
``xla_corpus_tile_kernels.py``; both are listed in ``xla_corpus_kernels.py``.
Module-level, so Triton finds their source."""

import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

try:  # Triton 3.6 spells fp8 e5m2 ``float8e5`` as well; keep one name for the kernels
    FP8_E5M2 = tl.float8e5
except AttributeError:  # pragma: no cover - every supported Triton has it
    FP8_E5M2 = tl.float8e5m2


# ----------------------------------------------------------------------------- normalisations


@triton.jit
def softmax_rows_kernel(in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, out_ptr, BLOCK: tl.constexpr):
    """Fused softmax, several rows per program (a grid smaller than the row count), masked columns."""
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row in tl.range(row_start, n_rows, row_step):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        den = tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


@triton.jit
def softmax_one_row_kernel(in_ptr, n_cols, row_stride, out_ptr, BLOCK: tl.constexpr):
    """One row per program; fp16 in and out, fp32 inside."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    e = tl.exp(z)
    tl.store(out_ptr + row * row_stride + cols, (e / tl.sum(e, axis=0)).to(tl.float16), mask=mask)


@triton.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, stride, n_cols, eps, y_ptr, mean_ptr, rstd_ptr,
                          BLOCK: tl.constexpr):
    """Layer norm forward in chunks of BLOCK columns: mean, then variance, then normalise."""
    row = tl.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        acc += d * d
    var = tl.sum(acc, axis=0) / n_cols
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < n_cols
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + cols, (x - mean) * rstd * w + b, mask=mask)


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, n_cols, eps, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    ms = tl.sum(x * x, axis=0) / n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x * tl.math.rsqrt(ms + eps) * w, mask=mask)


# ----------------------------------------------------------------------------- elementwise


@triton.jit
def dropout_kernel(x_ptr, n, p, seed, out_ptr, keep_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    r = tl.rand(seed, offs)
    keep = r > p
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)
    tl.store(keep_ptr + offs, keep.to(tl.int8), mask=mask)


@triton.jit
def activations_kernel(x_ptr, n, gelu_ptr, gelu_tanh_ptr, silu_ptr, BLOCK: tl.constexpr, LIBDEVICE: tl.constexpr):
    """GELU (erf and tanh forms) and SiLU; LIBDEVICE=False spells erf/tanh with tl.math, which Triton's
    interpreter can run (it has no libdevice)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    if LIBDEVICE:
        erf = tl.extra.cuda.libdevice.erf(x * 0.7071067811865476)
        tanh = tl.extra.cuda.libdevice.tanh(inner)
    else:
        erf = tl.math.erf(x * 0.7071067811865476)
        tanh = 2 * tl.sigmoid(2 * inner) - 1
    tl.store(gelu_ptr + offs, 0.5 * x * (1 + erf), mask=mask)
    tl.store(gelu_tanh_ptr + offs, 0.5 * x * (1 + tanh), mask=mask)
    tl.store(silu_ptr + offs, x / (1 + tl.exp(-x)), mask=mask)


@triton.jit
def int_ops_kernel(a_ptr, b_ptr, u_ptr, n, out_ptr, BLOCK: tl.constexpr):
    """Signed div/rem (C semantics, negatives included), shifts, bitwise, unsigned, cdiv, where."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=1)
    b = tl.load(b_ptr + offs, mask=mask, other=1)
    u = tl.load(u_ptr + offs, mask=mask, other=1)
    b = tl.where(b == 0, 7, b)
    q = a // b
    r = a % b
    bits = ((a << 3) ^ (b >> 1)) & 0xFFFF | (a & -a)
    ushift = (u >> 7) + (u << 3) + u // 10 + u % 10
    big = u > 0x80000000
    cd = tl.cdiv(tl.abs(a), 16)
    tl.store(out_ptr + offs * 6 + 0, q, mask=mask)
    tl.store(out_ptr + offs * 6 + 1, r, mask=mask)
    tl.store(out_ptr + offs * 6 + 2, bits, mask=mask)
    tl.store(out_ptr + offs * 6 + 3, ushift.to(tl.int32, bitcast=True), mask=mask)
    tl.store(out_ptr + offs * 6 + 4, tl.where(big, 1, -1), mask=mask)
    tl.store(out_ptr + offs * 6 + 5, cd + tl.umulhi(u, u).to(tl.int32, bitcast=True), mask=mask)


@triton.jit
def casts_kernel(x_ptr, n, f16_ptr, bf16_ptr, e4_ptr, e5_ptr, back_ptr, i_ptr, BLOCK: tl.constexpr):
    """Round trips fp32 → fp16/bf16/fp8 → fp32, and float → int, as Triton rounds them."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    h = x.to(tl.float16)
    b = x.to(tl.bfloat16)
    e4 = x.to(tl.float8e4nv)
    e5 = x.to(FP8_E5M2)
    tl.store(f16_ptr + offs, h, mask=mask)
    tl.store(bf16_ptr + offs, b, mask=mask)
    tl.store(e4_ptr + offs, e4.to(tl.uint8, bitcast=True), mask=mask)  # bytes, through a bitcast
    tl.store(e5_ptr + offs, e5.to(tl.uint8, bitcast=True), mask=mask)
    back = h.to(tl.float32) + b.to(tl.float32) + e4.to(tl.float32) + e5.to(tl.float32)
    tl.store(back_ptr + offs, back, mask=mask)
    tl.store(i_ptr + offs, (x * 100).to(tl.int32) + (h * 3).to(tl.int16).to(tl.int32), mask=mask)


@triton.jit
def fp8_rescale_kernel(x_ptr, n, scale, out_ptr, BLOCK: tl.constexpr):
    """fp8 e4m3 in, fp8 e5m2 out: dequantise, scale, requantise."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x * scale).to(FP8_E5M2), mask=mask)


@triton.jit
def quantize_rows_kernel(x_ptr, n_cols, q_ptr, q_even_ptr, scale_ptr, BLOCK: tl.constexpr):
    """Symmetric int8 quantisation per row: libdevice round (halves away from zero) and rint (to even)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    scale = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-8) / 127
    v = x / scale
    q = tl.clamp(tl.extra.cuda.libdevice.round(v), -127.0, 127.0).to(tl.int8)
    q_even = tl.extra.cuda.libdevice.float2int_rn(v)
    tl.store(q_ptr + row * n_cols + cols, q, mask=mask)
    tl.store(q_even_ptr + row * n_cols + cols, q_even, mask=mask)
    tl.store(scale_ptr + row, scale)


@triton.jit
def libdevice_kernel(x_ptr, y_ptr, out_ptr, FN: tl.constexpr, BLOCK: tl.constexpr):
    """One libdevice function per FN (Triton's interpreter runs none of them)."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if FN == "erfcinv":
        r = libdevice.erfcinv(x)
    elif FN == "normcdf":
        r = libdevice.normcdf(x)
    elif FN == "normcdfinv":
        r = libdevice.normcdfinv(x)
    elif FN == "sinpi":
        r = libdevice.sinpi(x)
    elif FN == "cospi":
        r = libdevice.cospi(x)
    elif FN == "logb":
        r = libdevice.logb(x)
    elif FN == "ilogb":
        r = libdevice.ilogb(x).to(tl.float32)
    elif FN == "rcbrt":
        r = libdevice.rcbrt(x)
    elif FN == "i0":
        r = libdevice.cyl_bessel_i0(x)
    elif FN == "erfcx":
        r = libdevice.erfcx(x)
    elif FN == "remainder":
        r = libdevice.remainder(x, y)
    elif FN == "fdim":
        r = libdevice.fdim(x, y)
    elif FN == "rhypot":
        r = libdevice.rhypot(x, y)
    elif FN == "ldexp":
        r = libdevice.ldexp(x, y.to(tl.int32))
    else:
        r = libdevice.nearbyint(x) + libdevice.trunc(y)
    tl.store(out_ptr + offs, r)


# ----------------------------------------------------------------------------- reductions and scans


@triton.jit
def _first_order(a_left, b_left, a_right, b_right):
    """h = a*h + b composed: apply left, then right."""
    return a_right * a_left, a_right * b_left + b_right


@triton.jit
def _max_abs(a, b):
    return tl.maximum(tl.abs(a), tl.abs(b))


@triton.jit
def scans_kernel(x_ptr, decay_ptr, n_cols, cum_ptr, rec_ptr, rev_ptr, BLOCK: tl.constexpr):
    """Per row: cumsum, a linear recurrence through a custom combine, and a reverse running max-abs."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    a = tl.load(decay_ptr + row * n_cols + cols, mask=mask, other=1.0)
    tl.store(cum_ptr + row * n_cols + cols, tl.cumsum(x, axis=0), mask=mask)
    _, h = tl.associative_scan((a, x), axis=0, combine_fn=_first_order)
    tl.store(rec_ptr + row * n_cols + cols, h, mask=mask)
    rev = tl.associative_scan(x, axis=0, combine_fn=_max_abs, reverse=True)
    tl.store(rev_ptr + row * n_cols + cols, rev, mask=mask)


@triton.jit
def argmax_kernel(x_ptr, n_rows, n_cols, max_ptr, idx_ptr, min_idx_ptr, BLOCK_R: tl.constexpr,
                  BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=-float("inf"))
    best, where = tl.max(x, axis=1, return_indices=True)
    low = tl.argmin(tl.where(mask, x, float("inf")), axis=1)
    tl.store(max_ptr + rows, best, mask=rows < n_rows)
    tl.store(idx_ptr + rows, where, mask=rows < n_rows)
    tl.store(min_idx_ptr + rows, low, mask=rows < n_rows)


@triton.jit
def _max_propagating_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def nan_row_stats_kernel(x_ptr, n_cols, out_ptr, BLOCK: tl.constexpr):
    """Row max/min (tl.max/tl.min skip NaN, as max.f32 does on a GPU), a NaN-propagating max, and the sum."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("nan"))  # padding: NaN, skipped
    stats = tl.join(tl.join(tl.max(x, axis=0), tl.min(x, axis=0)),  # [[max, nan-max], [min, sum]]
                    tl.join(tl.reduce(tl.where(cols < n_cols, x, -float("inf")), 0, _max_propagating_nan),
                            tl.sum(tl.where(cols < n_cols, x, 0.0), axis=0)))
    tl.store(out_ptr + row * 4 + tl.arange(0, 4), tl.reshape(stats, (4,)))
