"""The CPU backend's XLA path on the corpus kernels along rows and elements (``xla_corpus_row_kernels.py``):
normalisations, elementwise and libdevice functions, casts, reductions and scans.

Each test runs its kernel through ``triton_call`` on the CPU with the default path, checks that
the kernel was translated (``xla_corpus_support.run_xla``) and checks the numbers against NumPy, or
against Triton's interpreter where Triton's own rounding or random numbers are the reference. The
last test exports a program calling two corpus kernels and runs it in a fresh Python. Tiles, memory
and grids: ``test_xla_corpus_tiles.py``.
"""

from __future__ import annotations

import math
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import scipy.special
import triton
import xla_corpus_row_kernels as K
from helpers import requires_backend, run_exported
from xla_corpus_support import call, rng, run_interpreter, run_xla, sds, softmax_ref, xla_path_fixture

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
_xla_path = xla_path_fixture()


# ----------------------------------------------------------------------------- normalisations


def test_softmax_several_rows_per_program_non_power_of_two_columns(caplog):
    x = rng(1).standard_normal((37, 781)).astype(np.float32) * 4
    rows, cols = x.shape
    got = run_xla(lambda a: call(K.softmax_rows_kernel, a, cols, cols, rows, cols, out=sds(a.shape, a.dtype),
                                 grid=(8,), BLOCK=1024), x, caplog=caplog)
    np.testing.assert_allclose(got, softmax_ref(x), rtol=2e-6, atol=1e-7)


def test_softmax_fp16_one_row_per_program(caplog):
    x = (rng(2).standard_normal((50, 300)) * 3).astype(np.float16)
    got = run_xla(lambda a: call(K.softmax_one_row_kernel, a, 300, 300, out=sds(a.shape, a.dtype), grid=(50,),
                                 BLOCK=512), x, caplog=caplog)
    ref = softmax_ref(x.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-3, atol=1e-6)


def test_layer_norm_forward_in_column_chunks(caplog):
    r = rng(3)
    x = (r.standard_normal((23, 1000)) * 2 + 1).astype(np.float32)
    w, b = r.standard_normal(1000).astype(np.float32), r.standard_normal(1000).astype(np.float32)
    rows, cols = x.shape
    outs = (sds(x.shape, jnp.float32), sds((rows,), jnp.float32), sds((rows,), jnp.float32))
    y, mean, rstd = run_xla(lambda a, w, b: call(K.layer_norm_fwd_kernel, a, w, b, cols, cols, 1e-5, out=outs,
                                                 grid=(rows,), BLOCK=256), x, w, b, caplog=caplog)
    ref_mean = x.mean(axis=1)
    ref_rstd = 1 / np.sqrt(x.var(axis=1) + 1e-5)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, ref_rstd, rtol=1e-5)
    np.testing.assert_allclose(y, (x - ref_mean[:, None]) * ref_rstd[:, None] * w + b, rtol=1e-4, atol=1e-4)


def test_rms_norm(caplog):
    r = rng(4)
    x, w = r.standard_normal((64, 200)).astype(np.float32), r.standard_normal(200).astype(np.float32)
    got = run_xla(lambda a, w: call(K.rms_norm_kernel, a, w, 200, 1e-6, out=sds(a.shape, a.dtype), grid=(64,),
                                    BLOCK=256), x, w, caplog=caplog)
    ref = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-6)


# ----------------------------------------------------------------------------- elementwise


def test_dropout_with_philox_matches_the_interpreter(caplog, monkeypatch):
    x = rng(5).standard_normal(3000).astype(np.float32)

    def fn(a):
        return call(K.dropout_kernel, a, a.size, 0.3, 1234, out=(sds(a.shape, a.dtype), sds(a.shape, jnp.int8)),
                    grid=(triton.cdiv(a.size, 512),), BLOCK=512)

    out, keep = run_xla(fn, x, caplog=caplog)
    ref_out, ref_keep = run_interpreter(fn, x, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(keep, ref_keep)  # the same Philox numbers, bit for bit
    # XLA divides by a broadcast scalar as a multiplication by its reciprocal (1 ulp; Triton's own fp32
    # division on a GPU, div.full.f32, is no closer), so the kept values match to rounding, not bits
    np.testing.assert_allclose(out, ref_out, rtol=2.5e-7, atol=0)
    np.testing.assert_allclose(out, np.where(keep == 1, x / np.float32(0.7), 0), rtol=2.5e-7, atol=0)
    assert 0.62 < keep.mean() < 0.78  # the random numbers are uniform-ish, not all one value


@pytest.mark.parametrize("libdevice", [True, False], ids=["libdevice", "tl_math"])
def test_gelu_and_silu(libdevice, caplog):
    from math import erf

    x = np.concatenate([np.linspace(-8, 8, 1001), rng(6).standard_normal(500) * 3]).astype(np.float32)
    outs = tuple(sds(x.shape, jnp.float32) for _ in range(3))
    gelu, gelu_tanh, silu = run_xla(lambda a: call(K.activations_kernel, a, a.size, out=outs,
                                                   grid=(triton.cdiv(a.size, 256),), BLOCK=256, LIBDEVICE=libdevice), x,
                                    caplog=caplog)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(gelu, 0.5 * xd * (1 + np.vectorize(erf)(xd / np.sqrt(2))), rtol=1e-5, atol=1e-6)
    inner = np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3)
    np.testing.assert_allclose(gelu_tanh, 0.5 * xd * (1 + np.tanh(inner)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(silu, xd / (1 + np.exp(-xd)), rtol=1e-5, atol=1e-6)


def test_integer_ops_with_negatives_and_unsigned(caplog, monkeypatch):
    r = rng(7)
    n = 1500
    a = r.integers(-(1 << 31), (1 << 31) - 1, n, dtype=np.int64).astype(np.int32)
    a[:6] = [-7, 7, -7, 7, -(1 << 31), 0]
    b = r.integers(-50, 50, n).astype(np.int32)
    b[:6] = [2, -2, -2, 2, -1, 3]
    u = r.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)

    def fn(a, b, u):
        return call(K.int_ops_kernel, a, b, u, n, out=sds((n * 6,), jnp.int32), grid=(triton.cdiv(n, 256),),
                    BLOCK=256)

    got = run_xla(fn, a, b, u, caplog=caplog).reshape(n, 6)
    with np.errstate(over="ignore"):
        bb = np.where(b == 0, 7, b).astype(np.int64)
        aa = a.astype(np.int64)
        ref_q = np.fix(aa / bb).astype(np.int64)  # C: truncation toward zero, remainder takes a's sign
        ref_q[(aa == -(1 << 31)) & (bb == -1)] = -(1 << 31)  # wraps, as in C on two's complement
        np.testing.assert_array_equal(got[:, 0], ref_q.astype(np.int32))
        np.testing.assert_array_equal(got[:, 1], (aa - ref_q * bb).astype(np.int32))
        bits = ((a << 3) ^ (np.where(b == 0, 7, b) >> 1)) & 0xFFFF | (a & -a)
        np.testing.assert_array_equal(got[:, 2], bits)
        uu = u.astype(np.uint64)
        ush = ((uu >> 7) + ((uu << 3) & 0xFFFFFFFF) + uu // 10 + uu % 10) & 0xFFFFFFFF
        np.testing.assert_array_equal(got[:, 3], ush.astype(np.uint32).view(np.int32))
        np.testing.assert_array_equal(got[:, 4], np.where(u > 0x80000000, 1, -1))
        cd = (np.abs(aa) % (1 << 32)).astype(np.int32).astype(np.int64)
        cd = np.where(cd < 0, cd, (cd + 15) // 16)
        hi = ((uu * uu) >> 32).astype(np.uint32).view(np.int32).astype(np.int64)
    ref = run_interpreter(fn, a, b, u, monkeypatch=monkeypatch).reshape(n, 6)
    np.testing.assert_array_equal(got, ref)
    fine = a != -(1 << 31)
    np.testing.assert_array_equal(got[fine, 5], (cd + hi).astype(np.int32)[fine])


def fp8_as_triton(x, dtype):
    """Triton's fp32 -> fp8 on sm_90 (cvt.rn.satfinite): nearest-even, saturating at the largest finite value.
    (Triton's own interpreter is no reference here: it rounds ties up and drops the carry into the exponent; the
    plugin's interpreter path corrects that, ``tritonplug_interpret/fp8.py``.)"""
    top = float(ml_dtypes.finfo(dtype).max)
    return np.clip(x, -top, top).astype(dtype)


def test_casts_fp16_bf16_fp8_round_trips_as_triton_rounds(caplog, monkeypatch):
    r = rng(8)
    x = np.concatenate([r.standard_normal(900) * 4, r.standard_normal(100) * 300, [
        0.0, -0.0, 1e-6, 448, 464, 500, -1e5, 57344, 61440, 7e4, np.inf, -np.inf, np.nan, 3.14159265,
        7.75, 7.7500005, 2.0 ** -9, 2.0 ** -10 * 3, 2.0 ** -17]]).astype(np.float32)
    n = x.size
    outs = (sds((n,), jnp.float16), sds((n,), jnp.bfloat16), sds((n,), jnp.uint8), sds((n,), jnp.uint8),
            sds((n,), jnp.float32), sds((n,), jnp.int32))

    def fn(a):
        return call(K.casts_kernel, a, n, out=outs, grid=(triton.cdiv(n, 128),), BLOCK=128)

    f16, bf16, e4, e5, back, ints = run_xla(fn, x, caplog=caplog)
    np.testing.assert_array_equal(f16.view(np.uint16), x.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(bf16.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
    e4_ref, e5_ref = fp8_as_triton(x, ml_dtypes.float8_e4m3fn), fp8_as_triton(x, ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(e4, e4_ref.view(np.uint8))
    np.testing.assert_array_equal(e5, e5_ref.view(np.uint8))
    total = (x.astype(np.float16).astype(np.float32) + x.astype(ml_dtypes.bfloat16).astype(np.float32)
             + e4_ref.astype(np.float32) + e5_ref.astype(np.float32))
    np.testing.assert_array_equal(back, total)
    # fp16/bf16/fp8 and float -> int conversions as the interpreter path does them (finite inputs: C leaves the
    # conversion of inf/nan to int undefined)
    finite = np.isfinite(x) & (np.abs(x) < 1e4)
    ref_f16, ref_bf16, ref_e4, ref_e5, _, ref_ints = run_interpreter(fn, x, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(f16.view(np.uint16), ref_f16.view(np.uint16))
    np.testing.assert_array_equal(bf16.view(np.uint16), ref_bf16.view(np.uint16))
    nan = np.isnan(x)  # a NaN's fp8 bits may differ (several encodings)
    np.testing.assert_array_equal(e4[~nan], ref_e4[~nan])
    np.testing.assert_array_equal(e5[~nan], ref_e5[~nan])
    np.testing.assert_array_equal(ints[finite], ref_ints[finite])


def test_fp8_arrays_in_and_out(caplog):
    x = (rng(13).standard_normal(700) * 20).astype(ml_dtypes.float8_e4m3fn)
    got = run_xla(lambda a: call(K.fp8_rescale_kernel, a, a.size, 0.37, out=sds(a.shape, jnp.float8_e5m2),
                                 grid=(triton.cdiv(a.size, 256),), BLOCK=256), x, caplog=caplog)
    ref = (x.astype(np.float32) * np.float32(0.37)).astype(ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))


def test_int8_quantisation_rounds_halves_as_libdevice_does(caplog):
    x = rng(23).uniform(-100, 100, (5, 90)).astype(np.float32)
    x[:, 0] = 127  # scale 1: the quotients below are exact, halves included
    x[:, 1:9] = [0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, -126.5, 3.5]
    outs = (sds(x.shape, jnp.int8), sds(x.shape, jnp.int32), sds((5,), jnp.float32))
    q, q_even, scale = run_xla(lambda a: call(K.quantize_rows_kernel, a, 90, out=outs, grid=(5,), BLOCK=128), x,
                               caplog=caplog)
    np.testing.assert_array_equal(scale, np.float32(1.0))
    np.testing.assert_array_equal(q[:, 1:9], np.broadcast_to([1, -1, 2, 3, -3, 0, -127, 4], (5, 8)))
    np.testing.assert_array_equal(q_even[:, 1:9], np.broadcast_to([0, 0, 2, 2, -2, 0, -126, 4], (5, 8)))
    np.testing.assert_array_equal(q, np.sign(x) * np.floor(np.abs(x.astype(np.float64)) + 0.5))
    np.testing.assert_array_equal(q_even, np.rint(x))


LIBDEVICE = {  # FN: (reference in float64, x, y)
    "erfcinv": (lambda x, y: scipy.special.erfcinv(x), np.linspace(0.02, 1.98, 64), None),
    "normcdf": (lambda x, y: scipy.special.ndtr(x), np.linspace(-6, 6, 64), None),
    "normcdfinv": (lambda x, y: scipy.special.ndtri(x), np.linspace(0.01, 0.99, 64), None),
    "sinpi": (lambda x, y: np.sin(np.pi * x), np.linspace(-4, 4, 64), None),
    "cospi": (lambda x, y: np.cos(np.pi * x), np.linspace(-4, 4, 64), None),
    "logb": (lambda x, y: np.floor(np.log2(np.abs(x))), np.geomspace(1e-30, 1e30, 64) * (-1) ** np.arange(64), None),
    "ilogb": (lambda x, y: np.floor(np.log2(np.abs(x))), np.geomspace(1e-30, 1e30, 64), None),
    "rcbrt": (lambda x, y: 1 / np.cbrt(x), np.linspace(-8, 8, 64) + 0.01, None),
    "i0": (lambda x, y: scipy.special.i0(x), np.linspace(-10, 10, 64), None),
    "erfcx": (lambda x, y: scipy.special.erfcx(x), np.linspace(-3, 30, 64), None),
    "remainder": (lambda x, y: np.vectorize(math.remainder)(x, y), np.linspace(-10, 10, 64), np.full(64, 1.25)),
    "fdim": (lambda x, y: np.maximum(x - y, 0), np.linspace(-3, 3, 64), np.linspace(3, -3, 64)),
    "rhypot": (lambda x, y: 1 / np.hypot(x, y), np.linspace(-3, 3, 64), np.linspace(1, 2, 64)),
    "ldexp": (lambda x, y: np.ldexp(x, y.astype(int)), np.linspace(-3, 3, 64), np.arange(-32, 32)),
    "nearbyint": (lambda x, y: np.rint(x) + np.trunc(y), np.arange(-16, 16, 0.5), np.linspace(-3, 3, 64)),
}


@pytest.mark.parametrize("fn", sorted(LIBDEVICE))
def test_libdevice_functions_beyond_the_interpreter(fn, caplog):
    ref, x, y = LIBDEVICE[fn]
    x = x.astype(np.float32)
    y = (np.linspace(0.5, 2, 64) if y is None else y).astype(np.float32)
    got = run_xla(lambda a, b: call(K.libdevice_kernel, a, b, out=sds((64,), jnp.float32), grid=(1,), FN=fn,
                                    BLOCK=64), x, y, caplog=caplog)
    want = ref(x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=1e-6 if fn not in ("sinpi", "cospi") else 3e-7)


# ----------------------------------------------------------------------------- reductions and scans


def test_cumsum_custom_combine_scan_and_reverse_scan(caplog):
    r = rng(9)
    rows, cols = 12, 100
    x = r.standard_normal((rows, cols)).astype(np.float32)
    decay = r.uniform(0.5, 1.0, (rows, cols)).astype(np.float32)
    outs = tuple(sds(x.shape, jnp.float32) for _ in range(3))
    cum, rec, rev = run_xla(lambda a, d: call(K.scans_kernel, a, d, cols, out=outs, grid=(rows,), BLOCK=128),
                            x, decay, caplog=caplog)
    np.testing.assert_allclose(cum, np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)
    h = np.zeros((rows, cols), np.float64)
    state = np.zeros(rows)
    for j in range(cols):
        state = decay[:, j] * state + x[:, j]
        h[:, j] = state
    np.testing.assert_allclose(rec, h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rev, np.maximum.accumulate(np.abs(x)[:, ::-1], axis=1)[:, ::-1], rtol=0)


def test_max_with_indices_and_argmin_on_masked_rows(caplog):
    x = rng(10).standard_normal((45, 70)).astype(np.float32)
    x[3, 10] = x[3, 50] = 9.0  # a tie: the first index wins
    outs = (sds((45,), jnp.float32), sds((45,), jnp.int32), sds((45,), jnp.int32))
    best, where, low = run_xla(lambda a: call(K.argmax_kernel, a, 45, 70, out=outs, grid=(triton.cdiv(45, 8),),
                                              BLOCK_R=8, BLOCK_C=128), x, caplog=caplog)
    np.testing.assert_array_equal(best, x.max(axis=1))
    np.testing.assert_array_equal(where, x.argmax(axis=1))
    np.testing.assert_array_equal(low, x.argmin(axis=1))


def test_max_and_min_skip_nan_unless_asked_to_propagate_it(caplog):
    x = rng(22).standard_normal((6, 50)).astype(np.float32)
    x[1, 7] = x[3, 0] = x[3, 49] = np.nan
    x[4, :] = np.nan
    got = run_xla(lambda a: call(K.nan_row_stats_kernel, a, 50, out=sds((6, 4), jnp.float32), grid=(6,), BLOCK=64),
                  x, caplog=caplog)
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning, match="All-NaN"):
        ref = np.stack([np.nanmax(x, axis=1), x.max(axis=1), np.nanmin(x, axis=1)], axis=1)
    np.testing.assert_array_equal(got[:, :3], ref)
    np.testing.assert_allclose(got[:, 3], x.sum(axis=1), rtol=1e-5)  # NaN where a row holds one


# ----------------------------------------------------------------------------- export

EXPORT_SCRIPT = textwrap.dedent("""
    import sys
    import jax, numpy as np
    exported = jax.export.deserialize(open(sys.argv[1], "rb").read())
    x = np.random.default_rng(0).standard_normal((24, 300)).astype(np.float32)
    w = np.linspace(0.5, 1.5, 300).astype(np.float32)
    got = np.asarray(exported.call(x, w))
    normed = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w
    e = np.exp(normed - normed.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    print("ok", "tritonplug" in sys.modules, "triton" in sys.modules)
""")


def test_exported_program_of_two_corpus_kernels_runs_in_a_fresh_python(tmp_path, monkeypatch, caplog):
    """RMS norm then a softmax over the normalised rows (several rows per program), one jitted program,
    exported for the CPU and run where neither tritonplug nor Triton is imported."""
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")  # checked mode adds a host callback
    rows, cols = 24, 300

    def program(x, w):
        normed = call(K.rms_norm_kernel, x, w, cols, 1e-6, out=sds(x.shape, x.dtype), grid=(rows,), BLOCK=512)
        return call(K.softmax_rows_kernel, normed, cols, cols, rows, cols, out=sds(x.shape, x.dtype), grid=(5,),
                    BLOCK=512)

    x, w = np.zeros((rows, cols), np.float32), np.zeros(cols, np.float32)
    run_xla(program, x, w, caplog=caplog)  # both kernels take the XLA path
    exported = jax.export.export(jax.jit(program), platforms=["cpu"])(x, w)
    path = tmp_path / "rms_softmax.jax"
    path.write_bytes(exported.serialize())
    assert run_exported(EXPORT_SCRIPT, path) == ["ok", "False", "False"]
