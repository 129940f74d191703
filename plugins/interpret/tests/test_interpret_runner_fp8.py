"""fp8 arrays on both CPU paths: a kernel forced onto Triton's interpreter (``TRITONPLUG_CPU_PATH=interpret``, or
the XLA path's fallback) takes and returns float8_e4m3fn and float8_e5m2 arrays, and converts to fp8 as a GPU does
(nearest even, saturating at the largest finite value, NaN kept), as the XLA path does: both match ml_dtypes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from xla_corpus_row_kernels import FP8_E5M2, fp8_rescale_kernel
from xla_corpus_support import call, rng, run_interpreter, run_xla, sds

pytestmark = requires_backend("interpret")
FP8 = (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)


@triton.jit
def fp8_convert_kernel(x_ptr, n, e4_ptr, e5_ptr, back_ptr, wide_ptr, BLOCK: tl.constexpr):
    """fp32 → fp8 (both formats) stored as fp8 arrays, fp8 → fp32 and → bf16 back."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    e4 = x.to(tl.float8e4nv)
    e5 = x.to(FP8_E5M2)
    tl.store(e4_ptr + offs, e4, mask=mask)
    tl.store(e5_ptr + offs, e5, mask=mask)
    tl.store(back_ptr + offs, e4.to(tl.float32) + e5.to(tl.float32), mask=mask)
    tl.store(wide_ptr + offs, e4.to(tl.bfloat16), mask=mask)


def as_triton(x: np.ndarray, dtype) -> np.ndarray:
    """Triton's fp32 → fp8 on sm_90 (``cvt.rn.satfinite``): nearest even, saturating, NaN kept."""
    top = float(ml_dtypes.finfo(dtype).max)
    return np.where(np.isnan(x), x, np.clip(x, -top, top)).astype(dtype)


def inputs() -> np.ndarray:
    edges = [0.0, -0.0, 1.0625, 1.1875, -1.0625, 448, 464, 480, 500, -1e5, 57344, 61440, 7e4, np.inf, -np.inf,
             np.nan, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11, 2.0 ** -16, 2.0 ** -17, 15.5, 240, 248]
    return np.concatenate([rng(3).standard_normal(300) * 8, edges]).astype(np.float32)


def convert(x: np.ndarray):
    n = x.size
    return call(fp8_convert_kernel, x, n, grid=(triton.cdiv(n, 128),), BLOCK=128,
                out=(sds((n,), jnp.float8_e4m3fn), sds((n,), jnp.float8_e5m2), sds((n,), jnp.float32),
                     sds((n,), jnp.bfloat16)))


def same_bits(got: np.ndarray, ref: np.ndarray) -> None:
    """Equal bit patterns, except that any NaN matches any NaN (a format may have several)."""
    nan = np.isnan(ref.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(got[~nan].view(f"u{got.itemsize}"), ref[~nan].view(f"u{ref.itemsize}"))


def check_conversions(e4, e5, back, wide, x: np.ndarray) -> None:
    e4_ref, e5_ref = as_triton(x, FP8[0]), as_triton(x, FP8[1])
    assert e4.dtype == FP8[0] and e5.dtype == FP8[1]
    same_bits(e4, e4_ref)
    same_bits(e5, e5_ref)
    np.testing.assert_array_equal(back, e4_ref.astype(np.float32) + e5_ref.astype(np.float32))
    same_bits(wide, e4_ref.astype(ml_dtypes.bfloat16))


def test_fp8_conversions_on_the_interpreter_path_match_ml_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    x = inputs()
    check_conversions(*run_interpreter(convert, x, monkeypatch=monkeypatch), x)


def test_fp8_conversions_on_the_xla_path_match_ml_dtypes(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")
    x = inputs()
    check_conversions(*run_xla(convert, x, caplog=caplog), x)


@pytest.mark.parametrize("path", ["interpret", "xla"])
def test_fp8_arrays_in_and_out_on_both_paths(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", path)
    x = (rng(13).standard_normal(700) * 20).astype(ml_dtypes.float8_e4m3fn)
    got = np.asarray(jax.jit(lambda a: call(fp8_rescale_kernel, a, a.size, 0.37, out=sds(a.shape, jnp.float8_e5m2),
                                           grid=(triton.cdiv(a.size, 256),), BLOCK=256))(x))
    ref = (x.astype(np.float32) * np.float32(0.37)).astype(ml_dtypes.float8_e5m2)
    assert got.dtype == ml_dtypes.float8_e5m2
    same_bits(got, ref)
