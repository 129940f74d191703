"""Correct bf16 numerics for Triton's interpreter.

The interpreter stores bf16 values as their uint16 bit patterns and hands them to NumPy
as integers, so ``x + y`` on two bf16 tensors adds bit patterns, ``fp64 -> bf16`` casts a
number to an integer, ``tl.sum`` sums integers, and ``fp32 -> bf16`` truncates instead of
rounding to nearest even. :func:`install` replaces, for the duration of one run, every
builder entry point that computes on values (rather than moving bits around) with one that
widens bf16 operands to fp32 exactly, computes there and rounds the result back to bf16
once, to nearest even, as a GPU does for one bf16 operation. Ops that only move bits (loads,
stores, ``where``, reshapes, broadcasts, ``abs``, bitcasts) are left alone.

Where the result can differ from a GPU:

* the fast reductions and scans (``sum``, ``cumsum``, ``cumprod``) accumulate in fp32 and
  round once at the end; a GPU rounds each step in an unspecified order, so this is the
  more accurate of the possible answers;
* ``tl.dot`` with bf16 inputs multiplies exactly and accumulates in fp32, like a GPU.

Arithmetic the interpreter cannot do on bf16 raises ``NotImplementedError``, never a
wrong number.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import triton.language as tl

from tritonplug_interpret import compat

BF16 = tl.bfloat16
F16 = tl.float16
F32 = tl.float32
F64 = tl.float64
_U16 = np.dtype(np.uint16)
_F32 = np.dtype(np.float32)
_FLOATS = (F16, F32, F64)


# --------------------------------------------------------------------------- conversions

def widen(bits: Any) -> np.ndarray:
    """bf16 bit patterns -> the same values as float32 (exact)."""
    return (np.asarray(bits, dtype=_U16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _quiet_nan_bits(b32: np.ndarray, out: np.ndarray) -> np.ndarray:
    nan = (b32 & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        out = np.where(nan, ((b32 >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16), out)
    return out


def round_f32(values: Any, toward_zero: bool = False) -> np.ndarray:
    """float32 -> bf16 bit patterns, to nearest even (or toward zero)."""
    b32 = np.array(values, dtype=np.float32, ndmin=1).view(np.uint32)
    if toward_zero:
        out = (b32 >> np.uint32(16)).astype(np.uint16)
    else:
        bias = np.uint32(0x7FFF) + ((b32 >> np.uint32(16)) & np.uint32(1))
        out = ((b32 + bias) >> np.uint32(16)).astype(np.uint16)
    return _quiet_nan_bits(b32, out).reshape(np.shape(values))


def _narrow_f64(values: Any, toward_zero: bool) -> np.ndarray:
    """float64 -> bf16 bits with a single rounding: round to odd at fp32, then to bf16."""
    x = np.array(values, dtype=np.float64, ndmin=1).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float32)
    back = r.astype(np.float64)
    inexact = (back != x) & np.isfinite(back)
    bits = r.view(np.uint32).copy()
    if inexact.any():
        bits[inexact & (np.abs(back) > np.abs(x))] -= np.uint32(1)  # toward zero
        if not toward_zero:
            bits[inexact] |= np.uint32(1)  # sticky bit: round to odd
    if toward_zero:
        overflow = np.isinf(r) & np.isfinite(x)
        if overflow.any():  # toward zero never reaches infinity: largest finite bf16
            bits[overflow] = (bits[overflow] & np.uint32(0x80000000)) | np.uint32(0x7F7F0000)
    return round_f32(bits.view(np.float32), toward_zero).reshape(np.shape(values))


def to_bits(values: Any, toward_zero: bool = False) -> np.ndarray:
    """Any NumPy number array -> bf16 bit patterns, rounded once."""
    data = np.asarray(values)
    kind, size = data.dtype.kind, data.dtype.itemsize
    if kind == "f" and size <= 4 or kind in "biu" and size <= 2:
        return round_f32(data.astype(np.float32), toward_zero)  # exact in fp32
    return _narrow_f64(data.astype(np.float64), toward_zero)


def _f16_toward_zero(x32: np.ndarray) -> np.ndarray:
    r = x32.astype(np.float16)
    away = np.abs(r.astype(np.float32)) > np.abs(x32)
    return np.where(away, np.nextafter(r, np.float16(0)), r)


def _fma_bits(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """x * y + z on bf16 bits, rounded once."""
    a, b, c = (widen(v).astype(np.float64) for v in (x, y, z))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a * b  # exact: 8-bit significands
        s = p + c
        bp = s - c
        err = (p - bp) + (c - (s - bp))  # TwoSum: s + err == p + c exactly
    inexact = (err != 0) & np.isfinite(s)
    if np.any(inexact):  # round to odd at fp64 so the bf16 rounding stays single
        s = np.array(s, dtype=np.float64, ndmin=1)
        inexact = np.broadcast_to(inexact, s.shape)
        toward = inexact & (np.sign(err) != np.sign(s))
        s = np.where(toward, np.nextafter(s, 0.0), s)
        s = np.where(inexact, (s.view(np.uint64) | np.uint64(1)).view(np.float64), s)
    return _narrow_f64(s, False).reshape(np.shape(s))


# --------------------------------------------------------------------------- handles

def _is_bf16(handle: Any) -> bool:
    data = getattr(handle, "data", None)
    return getattr(data, "dtype", None) is _U16 and handle.dtype.scalar.name == "bf16"


def _wide(handle: Any) -> Any:
    return compat.TensorHandle(widen(handle.data), F32) if _is_bf16(handle) else handle


def _result(data: Any, fallback: Any) -> Any:
    """Round a float result back to bf16; keep others (comparisons) as they are."""
    data = np.asarray(data)
    if data.dtype.kind == "f":
        return compat.TensorHandle(round_f32(data), BF16)
    return compat.TensorHandle(data, tl.int1 if data.dtype == np.bool_ else fallback)


def _wide_tensor(t: Any) -> Any:
    return tl.tensor(compat.TensorHandle(widen(t.handle.data), F32), t.type.with_element_ty(F32))


def _narrow_tensor(t: Any) -> Any:
    return tl.tensor(compat.TensorHandle(round_f32(t.handle.data), BF16), t.type.with_element_ty(BF16))


def _is_bf16_tensor(t: Any) -> bool:
    return isinstance(t, tl.tensor) and _is_bf16(t.handle)


# --------------------------------------------------------------------------- install

def install(scope: Any) -> None:
    """Patch the interpreter's builder and its reductions for the current run (``scope`` restores)."""
    b = compat.builder
    o_binary, o_unary, o_ternary = b.binary_op, b.unary_op, b.ternary_op
    o_cast, o_fp_to_fp, o_fma = b.cast_impl, b.create_fp_to_fp, b.create_fma
    o_dot, o_erf, o_rsqrt = b.create_dot, b.create_erf, b.create_rsqrt
    o_rmw, o_print = b.create_atomic_rmw, b.create_print

    def binary_op(lhs, rhs, op):
        if not (_is_bf16(lhs) or _is_bf16(rhs)):
            return o_binary(lhs, rhs, op)
        return _result(op(_wide(lhs).data, _wide(rhs).data), lhs.dtype.scalar)

    def unary_op(arg, op):
        if not _is_bf16(arg):
            return o_unary(arg, op)
        return _result(op(widen(arg.data)), arg.dtype.scalar)

    def ternary_op(lhs, rhs, other, op):
        if op is np.where or not (_is_bf16(lhs) or _is_bf16(rhs) or _is_bf16(other)):
            return o_ternary(lhs, rhs, other, op)
        return _result(op(_wide(lhs).data, _wide(rhs).data, _wide(other).data), other.dtype.scalar)

    def cast_impl(src, dst_type):
        dst = dst_type.scalar
        if _is_bf16(src):
            if dst.name == "bf16":
                return compat.TensorHandle(src.data, dst)
            wide = widen(src.data)
            return compat.TensorHandle(wide if dst == F32 else wide.astype(compat.np_dtype(dst)), dst)
        if dst.name == "bf16":
            return compat.TensorHandle(to_bits(src.data), dst)
        return o_cast(src, dst_type)

    def create_fp_to_fp(src, dst_type, rounding_mode):
        dst, rtz = dst_type.scalar, rounding_mode == compat.ROUND_TOWARD_ZERO
        if _is_bf16(src) and dst in _FLOATS:
            wide = widen(src.data)
            if dst == F16 and rtz:
                return compat.TensorHandle(_f16_toward_zero(wide), dst)
            return compat.TensorHandle(wide.astype(compat.np_dtype(dst)), dst)
        if dst.name == "bf16" and src.dtype.scalar in _FLOATS:
            return compat.TensorHandle(to_bits(src.data, rtz), dst)
        return o_fp_to_fp(src, dst_type, rounding_mode)

    def create_fma(x, y, z):
        if not (_is_bf16(x) or _is_bf16(y) or _is_bf16(z)):
            return o_fma(x, y, z)
        if not (_is_bf16(x) and _is_bf16(y) and _is_bf16(z)):
            raise NotImplementedError("the interpreter backend does fma on bf16 only when all three are bf16")
        return compat.TensorHandle(_fma_bits(*np.broadcast_arrays(x.data, y.data, z.data)), BF16)

    def create_dot(a, b_, d, *rest):
        if not (_is_bf16(a) or _is_bf16(b_) or _is_bf16(d)):
            return o_dot(a, b_, d, *rest)
        out = o_dot(_wide(a), _wide(b_), _wide(d), *rest)
        return compat.TensorHandle(round_f32(out.data), BF16) if _is_bf16(d) else out

    def create_erf(arg):
        return _result(o_erf(_wide(arg)).data, BF16) if _is_bf16(arg) else o_erf(arg)

    def create_rsqrt(arg):
        return _result(o_rsqrt(_wide(arg)).data, BF16) if _is_bf16(arg) else o_rsqrt(arg)

    def create_atomic_rmw(op, ptr, val, mask, *rest):
        if not _is_bf16(val):
            return o_rmw(op, ptr, val, mask, *rest)
        return _bf16_atomic(op, ptr, val, mask)

    def create_print(prefix, hex, values, *rest):
        if not hex:
            values = [_wide(v) for v in values]
        return o_print(prefix, hex, values, *rest)

    def get_bf16(value):
        return compat.TensorHandle(to_bits(np.array([value], dtype=np.float64)), BF16)

    for fn in (binary_op, unary_op, ternary_op, cast_impl, create_fp_to_fp, create_fma, create_dot,
               create_erf, create_rsqrt, create_atomic_rmw, create_print, get_bf16):
        scope.set_attr(b, fn.__name__, fn)
    _install_reductions(scope)


def _bf16_atomic(op: Any, ptr: Any, val: Any, mask: Any) -> Any:
    """bf16 atomics one lane after another (the interpreter's native atomics lack bf16)."""
    if op not in (compat.ATOMIC_FADD, compat.ATOMIC_XCHG):
        raise NotImplementedError(f"the interpreter backend has no bf16 atomic {op}")
    values = np.asarray(val.data)
    addresses = np.array(np.broadcast_to(ptr.data, values.shape), dtype=np.uint64).reshape(-1)
    active = np.broadcast_to(mask.data, values.shape).reshape(-1)
    flat = np.array(values, dtype=_U16).reshape(-1)
    old = np.zeros(flat.shape, dtype=_U16)
    one, zero = np.ones(1, dtype=bool), np.zeros(1, dtype=_U16)
    for i in np.flatnonzero(active):
        where = addresses[i:i + 1]
        current = compat.raw_load(where, one, zero, _U16)
        old[i] = current[0]
        new = flat[i:i + 1] if op == compat.ATOMIC_XCHG else round_f32(widen(current) + widen(flat[i:i + 1]))
        compat.raw_store(where, new, one)
    return compat.TensorHandle(old.reshape(values.shape), BF16)


def _install_reductions(scope: Any) -> None:
    """The interpreter's fast sum/min/max/argmin/argmax/cumsum/cumprod run NumPy on the raw data."""
    fast_reduce = {id(f) for f in compat.FAST_REDUCE_COMBINERS}
    fast_scan = {id(f) for f in compat.FAST_SCAN_COMBINERS}

    def wrap(inner, fast):
        def run(input, axis, combine_fn, *args, **kwargs):
            items = input if isinstance(input, tuple) else (input, )
            flags = [_is_bf16_tensor(t) for t in items]
            if id(combine_fn) not in fast or not any(flags):
                return inner(input, axis, combine_fn, *args, **kwargs)
            wide = tuple(_wide_tensor(t) if f else t for t, f in zip(items, flags, strict=True))
            out = inner(wide if isinstance(input, tuple) else wide[0], axis, combine_fn, *args, **kwargs)
            outs = out if isinstance(out, tuple) else (out, )
            outs = tuple(_narrow_tensor(t) if f and isinstance(t, tl.tensor) and t.dtype == F32 else t
                         for t, f in zip(outs, flags + [False] * (len(outs) - len(flags)), strict=False))
            return outs if isinstance(out, tuple) else outs[0]
        return run

    for module in (tl, tl.core):
        scope.set_attr(module, "reduce", wrap(module.reduce, fast_reduce))
        scope.set_attr(module, "associative_scan", wrap(module.associative_scan, fast_scan))
