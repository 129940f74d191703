"""fp8 arguments and conversions in Triton's interpreter.

The interpreter stores every fp8 type as uint8 bit patterns, which loads, stores and bitcasts move as they are,
so an fp8 buffer is handed to it as its bytes (:data:`ELEMENT_TYPES` names the Triton type of each JAX fp8
dtype). Its own conversions to and from fp8 (``_convert_float``) are not a GPU's: to fp8 they round ties up, drop
the carry into the exponent and neither saturate nor keep NaN. :func:`install` replaces, for the duration of one
run, ``create_fp_to_fp`` where either side is fp8 with exact conversions through ``ml_dtypes``: from fp8 exactly;
to fp8 once, to nearest even (or toward zero), saturating at the largest finite value as ``cvt.rn.satfinite`` does
on sm_90 (NaN stays NaN), which is what the XLA path does too. Arithmetic on fp8 values is Triton's to refuse (a
kernel converts them first); ``tl.dot`` on fp8 operands is the interpreter's own (exact widening to fp16).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import triton.language as tl

from tritonplug_interpret import bf16, compat

#: Each fp8 Triton type this Triton has → the NumPy (ml_dtypes) dtype of the same encoding.
_FORMATS = {"float8e4nv": ml_dtypes.float8_e4m3fn, "float8e5": ml_dtypes.float8_e5m2,
            "float8e4b8": ml_dtypes.float8_e4m3fnuz, "float8e5b16": ml_dtypes.float8_e5m2fnuz}
FP8: dict[Any, Any] = {getattr(tl, name): np.dtype(dtype) for name, dtype in _FORMATS.items() if hasattr(tl, name)}
#: A buffer's dtype name (as JAX and ml_dtypes name it) → the Triton type the interpreter loads it as.
ELEMENT_TYPES = {np.dtype(dtype).name: getattr(tl, name) for name, dtype in _FORMATS.items() if hasattr(tl, name)}
_UNSIGNED_ZERO_ONLY = {np.dtype(ml_dtypes.float8_e4m3fnuz), np.dtype(ml_dtypes.float8_e5m2fnuz)}


def is_fp8(handle: Any) -> bool:
    return handle.dtype.scalar in FP8


def values(handle: Any) -> np.ndarray:
    """The numbers a float handle holds: fp8 and bf16 bit patterns decoded exactly, other floats as they are."""
    scalar = handle.dtype.scalar
    if scalar in FP8:
        return np.asarray(handle.data).view(FP8[scalar]).astype(np.float32)
    if scalar.name == "bf16":
        return bf16.widen(handle.data)
    return np.asarray(handle.data)


def encode(numbers: Any, dtype: np.dtype, toward_zero: bool = False) -> np.ndarray:
    """Numbers → fp8 bit patterns (uint8) of ``dtype``, rounded once, saturating at the largest finite value."""
    x = np.asarray(numbers)
    top = float(ml_dtypes.finfo(dtype).max)
    with np.errstate(invalid="ignore"):
        out = np.where(np.isnan(x), x, np.clip(x, -top, top)).astype(dtype)
    bits = np.array(out, ndmin=1).view(np.uint8).reshape(np.shape(out))
    if toward_zero:
        back = out.astype(np.float64)
        away = np.isfinite(back) & (np.abs(back) > np.abs(x.astype(np.float64)))
        bits = np.where(away, bits - np.uint8(1), bits).astype(np.uint8)  # sign-magnitude: one step toward zero
        if dtype in _UNSIGNED_ZERO_ONLY:
            bits = np.where(away & (bits == 0x80), np.uint8(0), bits).astype(np.uint8)  # 0x80 is their NaN
    return bits


def install(scope: Any) -> None:
    """Patch the interpreter's fp8 conversions for the current run (``scope`` restores); after :func:`bf16.install`,
    whose conversions it keeps for every other pair of types."""
    b = compat.builder
    previous = b.create_fp_to_fp

    def create_fp_to_fp(src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        dst = dst_type.scalar
        if not (is_fp8(src) or dst in FP8):
            return previous(src, dst_type, rounding_mode)
        numbers = values(src)
        if dst in FP8:
            return compat.TensorHandle(encode(numbers, FP8[dst], rounding_mode == compat.ROUND_TOWARD_ZERO), dst)
        if dst.name == "bf16":
            return compat.TensorHandle(bf16.to_bits(numbers), dst)  # exact: every fp8 value is a bf16 value
        return compat.TensorHandle(numbers.astype(compat.np_dtype(dst)), dst)

    scope.set_attr(b, "create_fp_to_fp", create_fp_to_fp)
