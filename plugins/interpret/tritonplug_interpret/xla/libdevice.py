"""``tt.extern_elementwise``: libdevice (CUDA ``__nv_*``) and OCML (HIP ``__ocml_*``) functions.

Kernels reach these through ``tl.extra.cuda.libdevice``/``tl.extra.libdevice``; Triton's
interpreter cannot run any of them, so here is the only CPU path they have. A symbol names the
function and its type (``__nv_erff``, ``__nv_erf``, ``__ocml_erf_f32``, ``__nv_isinfd``); the
table is keyed by the bare name. ``_rn`` variants are ordinary IEEE operations; the directed
roundings (``_rz``/``_rd``/``_ru``) of float arithmetic are not expressed and fall back.
Conversions (``float2int_rz`` …) round as named, then take the op's result type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
from jax import lax

from tritonplug_interpret.xla.program import Frame, Unsupported, family
from tritonplug_interpret.xla.ttir import Op
from tritonplug_interpret.xla.types import bitwidth, parse_type, to_signed, to_unsigned, unsigned

HANDLERS, handler = family()   # this family's part of the op table (ops.TABLE)


def round_half_away(x):
    """C ``round``: halfway cases away from zero (``x + 0.5`` would misround 0.49999997)."""
    t = jnp.trunc(x)
    return jnp.where(jnp.abs(x - t) >= 0.5, t + jnp.sign(x), t)


def mulhi(a, b):
    """The high half of the full product (``umulhi`` unsigned, ``mulhi`` signed), 32-bit operands."""
    if a.dtype.itemsize != 4:
        raise Unsupported("tt.extern_elementwise", f"mulhi of {a.dtype}")
    if jnp.issubdtype(a.dtype, jnp.unsignedinteger):
        return ((a.astype(jnp.uint64) * b.astype(jnp.uint64)) >> 32).astype(a.dtype)
    return ((a.astype(jnp.int64) * b.astype(jnp.int64)) >> 32).astype(a.dtype)


def _unsigned(fn: Callable) -> Callable:
    """``fn`` on the operands viewed unsigned (signless integers are kept signed here)."""
    return lambda *xs: to_signed(fn(*(to_unsigned(x) for x in xs)), xs[0].dtype)


def _frexp_exponent(x):
    return jnp.frexp(x)[1] - 1


def _logb(x):
    e = _frexp_exponent(x).astype(x.dtype)
    return jnp.where(x == 0, -jnp.inf, jnp.where(jnp.isfinite(x), e, jnp.abs(x)))


def _ilogb(x):
    e = _frexp_exponent(x).astype(jnp.int32)
    low, high = jnp.int32(np.iinfo(np.int32).min), jnp.int32(np.iinfo(np.int32).max)
    return jnp.where(jnp.isnan(x) | (x == 0), low, jnp.where(jnp.isinf(x), high, e))


def _sinpi(x):
    r = x - 2 * jnp.round(x / 2)  # exact: in [-1, 1]
    return jnp.where(r == jnp.round(r), jnp.zeros_like(x) * jnp.sign(x), jnp.sin(jnp.pi * r))


def _cospi(x):
    r = jnp.abs(x - 2 * jnp.round(x / 2))
    return jnp.where(r == 0.5, jnp.zeros_like(x), jnp.cos(jnp.pi * r))


def _remainder(a, b):
    """IEEE remainder: a - n*b with n the quotient rounded to nearest even (exact, through fmod)."""
    r = lax.rem(a, b)
    half = jnp.abs(b) / 2
    odd = jnp.abs(lax.rem(a, 2 * b)) >= jnp.abs(b)
    past = (jnp.abs(r) > half) | ((jnp.abs(r) == half) & odd)
    return jnp.where(past, r - jnp.copysign(jnp.abs(b), r), r)


def _erfcx(x):
    big = x > 9
    safe = jnp.where(big, 0, x)
    inv = 1 / jnp.where(big, x, 1)
    asymptotic = inv / math.sqrt(math.pi) * (1 - inv * inv / 2 + 3 * inv ** 4 / 4)
    return jnp.where(big, asymptotic, jnp.exp(safe * safe) * lax.erfc(safe))


def _bit_reverse(x):
    u = to_unsigned(x)
    width = bitwidth(u.dtype)
    shift, mask = width // 2, (1 << (width // 2)) - 1
    while shift:
        m = u.dtype.type(mask)
        u = ((u >> shift) & m) | ((u & m) << shift)
        shift //= 2
        mask ^= mask << shift
    return to_signed(u, x.dtype)


def _ffs(x):
    u = to_unsigned(x)
    low = u & (~u + u.dtype.type(1))  # the lowest set bit
    return jnp.where(u == 0, 0, lax.population_count(low - u.dtype.type(1)) + 1).astype(jnp.int32)


def _sext24(x):
    return lax.shift_right_arithmetic(lax.shift_left(x, jnp.int32(8)), jnp.int32(8))


def _halving_add(rounding: bool, unsigned: bool) -> Callable:
    def add(a, b):
        shift = lax.shift_right_logical if unsigned else lax.shift_right_arithmetic
        one = jnp.asarray(1, a.dtype)
        return ((a | b) - shift(a ^ b, one)) if rounding else ((a & b) + shift(a ^ b, one))
    return add


def _norm(*xs):
    return jnp.sqrt(sum(x * x for x in xs))


_CONVERT = re.compile(r"^(float|double|int|uint|ll|ull)2(float|double|int|uint|ll|ull)_(rn|rz|rd|ru)$")
_TO_INTEGER = {"rn": jnp.round, "rz": jnp.trunc, "rd": jnp.floor, "ru": jnp.ceil}

#: bare name → function of the operands; the handler converts the result to the op's type
TABLE: dict[str, Callable] = {
    "exp": jnp.exp, "exp2": jnp.exp2, "exp10": lambda x: jnp.power(jnp.asarray(10, x.dtype), x), "expm1": jnp.expm1,
    "log": jnp.log, "log2": jnp.log2, "log10": jnp.log10, "log1p": jnp.log1p, "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt,
    "cbrt": jnp.cbrt, "rcbrt": lambda x: 1 / jnp.cbrt(x), "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan,
    "asin": jnp.arcsin, "acos": jnp.arccos, "atan": jnp.arctan, "sinh": jnp.sinh, "cosh": jnp.cosh,
    "tanh": jnp.tanh, "asinh": jnp.arcsinh, "acosh": jnp.arccosh, "atanh": jnp.arctanh, "sinpi": _sinpi,
    "cospi": _cospi, "erf": lax.erf, "erfc": lax.erfc, "erfinv": lax.erf_inv, "erfcinv": lambda x: lax.erf_inv(1 - x),
    "erfcx": _erfcx, "normcdf": lambda x: lax.erfc(-x / math.sqrt(2)) / 2, "normcdfinv": jsp.ndtri,
    "lgamma": lax.lgamma, "tgamma": lambda x: jnp.exp(lax.lgamma(x)) * jnp.where(
        (x < 0) & (jnp.floor(x) % 2 == 1), -1, 1).astype(x.dtype),
    "cyl_bessel_i0": jsp.i0, "cyl_bessel_i1": jsp.i1,
    "floor": jnp.floor, "ceil": jnp.ceil, "trunc": jnp.trunc, "round": round_half_away, "llround": round_half_away,
    "lround": round_half_away, "rint": jnp.round, "nearbyint": jnp.round, "llrint": jnp.round, "lrint": jnp.round,
    "fabs": jnp.abs, "abs": jnp.abs, "llabs": jnp.abs, "pow": jnp.power, "powf": jnp.power, "fast_powf": jnp.power,
    "powi": lambda x, n: jnp.power(x, n.astype(x.dtype)), "fmod": lax.rem, "remainder": _remainder,
    "atan2": jnp.arctan2, "hypot": jnp.hypot, "rhypot": lambda a, b: 1 / jnp.hypot(a, b), "norm3d": _norm,
    "norm4d": _norm, "rnorm3d": lambda *xs: 1 / _norm(*xs), "rnorm4d": lambda *xs: 1 / _norm(*xs),
    "fmin": jnp.fmin, "fmax": jnp.fmax, "min": jnp.minimum, "max": jnp.maximum, "umin": _unsigned(jnp.minimum),
    "umax": _unsigned(jnp.maximum), "ullmin": _unsigned(jnp.minimum), "ullmax": _unsigned(jnp.maximum),
    "llmin": jnp.minimum, "llmax": jnp.maximum, "fdim": lambda a, b: jnp.where(
        jnp.isnan(a) | jnp.isnan(b), a + b, jnp.maximum(a - b, 0)),
    "copysign": jnp.copysign, "nextafter": jnp.nextafter, "ldexp": lambda x, n: jnp.ldexp(x, n),
    "scalbn": lambda x, n: jnp.ldexp(x, n), "logb": _logb, "ilogb": _ilogb,
    "isnan": jnp.isnan, "isinf": jnp.isinf, "isfinite": jnp.isfinite, "finite": jnp.isfinite, "signbit": jnp.signbit,
    "fma": lambda a, b, c: a * b + c, "fma_rn": lambda a, b, c: a * b + c, "fmaf_rn": lambda a, b, c: a * b + c,
    "add_rn": jnp.add, "sub_rn": jnp.subtract, "mul_rn": jnp.multiply, "div_rn": jnp.divide,
    "fadd_rn": jnp.add, "fsub_rn": jnp.subtract, "fmul_rn": jnp.multiply, "fdiv_rn": jnp.divide,
    "dadd_rn": jnp.add, "dsub_rn": jnp.subtract, "dmul_rn": jnp.multiply, "ddiv_rn": jnp.divide,
    "sqrt_rn": jnp.sqrt, "fsqrt_rn": jnp.sqrt, "dsqrt_rn": jnp.sqrt, "frsqrt_rn": lax.rsqrt,
    "rcp_rn": lambda x: 1 / x, "frcp_rn": lambda x: 1 / x, "drcp_rn": lambda x: 1 / x,
    "saturate": lambda x: jnp.clip(x, 0, 1), "fast_exp": jnp.exp, "fast_exp10": lambda x: jnp.power(
        jnp.asarray(10, x.dtype), x), "fast_log": jnp.log, "fast_log2": jnp.log2, "fast_log10": jnp.log10,
    "fast_sin": jnp.sin, "fast_cos": jnp.cos, "fast_tan": jnp.tan, "fast_divide": jnp.divide,
    "fast_fdivide": jnp.divide, "fast_exp2": jnp.exp2,
    "clz": lax.clz, "clzll": lax.clz, "popc": lax.population_count, "popcll": lax.population_count,
    "brev": _bit_reverse, "brevll": _bit_reverse, "ffs": _ffs, "ffsll": _ffs, "mulhi": mulhi,
    "umulhi": _unsigned(mulhi), "mul24": lambda a, b: _sext24(a) * _sext24(b),
    "umul24": lambda a, b: (a & 0xFFFFFF) * (b & 0xFFFFFF), "hadd": _halving_add(False, False),
    "uhadd": _halving_add(False, True), "rhadd": _halving_add(True, False), "urhadd": _halving_add(True, True),
    "sad": lambda a, b, c: jnp.abs(a - b) + c, "usad": lambda a, b, c: to_signed(
        _unsigned(jnp.maximum)(a, b) - _unsigned(jnp.minimum)(a, b), a.dtype) + c,
}
#: reinterpretations of the bits (the result type says which)
BITCASTS = frozenset({"float_as_int", "int_as_float", "float_as_uint", "uint_as_float", "double_as_longlong",
                      "longlong_as_double"})
_PREFIX = re.compile(r"^(__nv_|__ocml_)")
_SUFFIX = re.compile(r"(_f16|_f32|_f64)$")


def bare_name(symbol: str) -> str:
    return _SUFFIX.sub("", _PREFIX.sub("", symbol))


def lookup(symbol: str) -> tuple[str, Callable] | None:
    """(kind, function) for a symbol, kind "table" or "bitcast"; None if it is not expressed here."""
    name = bare_name(symbol)
    # the type letter: a trailing f (float) or d (double: isinfd, signbitd …)
    for candidate in (name, name[:-1] if name[-1:] in "fd" else name):
        if candidate in BITCASTS:
            return "bitcast", lax.bitcast_convert_type
        if candidate in TABLE:
            return "table", TABLE[candidate]
    return None


def conversion(symbol: str) -> tuple[Callable, bool] | None:
    """``float2int_rz`` and friends: (rounding applied before the conversion, whether the target is
    unsigned); None for what is not expressed (an integer to float in a directed rounding)."""
    m = _CONVERT.match(bare_name(symbol))
    if not m:
        return None
    source, target, mode = m.groups()
    unsigned_target = target in ("uint", "ull")
    if source in ("float", "double") and target not in ("float", "double"):
        return _TO_INTEGER[mode], unsigned_target
    if mode != "rn":
        return None
    return (to_unsigned if source in ("uint", "ull") else (lambda x: x)), unsigned_target


@handler("tt.extern_elementwise")
def _extern(f: Frame, op: Op):
    symbol = op.attrs.get("symbol", "").strip('"')
    target = parse_type(op.result_types[0]).dtype
    args = f.args(op)
    convert = conversion(symbol)
    if convert is not None:
        rounding, unsigned_target = convert
        out = rounding(args[0])
        if unsigned_target:  # the signless result holds the unsigned value's bits
            return [to_signed(lax.convert_element_type(out, unsigned(target)), target)]
        return [lax.convert_element_type(out, target)]
    found = lookup(symbol)
    if found is None:
        raise Unsupported("tt.extern_elementwise", f"symbol {symbol}")
    kind, fn = found
    if kind == "bitcast":
        return [lax.bitcast_convert_type(args[0], target)]
    return [lax.convert_element_type(fn(*args), target)]
