"""arith/math ops, casts, constants and libdevice calls as jax.numpy / jax.lax operations.

MLIR integers are signless; values are kept in signed JAX dtypes and the ops that care
(``divui``, ``cmpi ult``, ``extui``, ``uitofp`` …) reinterpret them as unsigned.
"""

from __future__ import annotations

import ast
import re
import struct

import jax.numpy as jnp
import numpy as np
from jax import lax

from tritonplug_interpret.xla.libdevice import mulhi, round_half_away
from tritonplug_interpret.xla.program import Deferred, Frame, family
from tritonplug_interpret.xla.ttir import Op
from tritonplug_interpret.xla.types import (
    bitwidth,
    parse_type,
    reinterpret,
    to_signed,
    to_unsigned,
    unsigned,
)

HANDLERS, handler = family()   # this family's part of the op table (ops.TABLE)

_u = to_unsigned


def _s(x, like):
    return to_signed(x, like.dtype)


def _unsigned_op(fn):
    return lambda a, b: _s(fn(_u(a), _u(b)), a)


def _floordiv(a, b):
    q = lax.div(a, b)
    return jnp.where((lax.rem(a, b) != 0) & ((a < 0) != (b < 0)), q - 1, q)


def _ceildiv(a, b):
    q = lax.div(a, b)
    return jnp.where((lax.rem(a, b) != 0) & ((a < 0) == (b < 0)), q + 1, q)


def _shift(fn):
    def apply(a, b):
        width = bitwidth(a.dtype)
        out = fn(a, b)
        return jnp.where(_u(b) >= width, jnp.zeros_like(a), out) if width > 1 else out
    return apply


def _remf(a, b):
    return lax.rem(a, b)


_BINARY = {
    "arith.addi": jnp.add, "arith.subi": jnp.subtract, "arith.muli": jnp.multiply,
    "arith.divsi": lax.div, "arith.remsi": lax.rem, "arith.divui": _unsigned_op(lax.div),
    "arith.remui": _unsigned_op(lax.rem), "arith.floordivsi": _floordiv, "arith.ceildivsi": _ceildiv,
    "arith.andi": jnp.bitwise_and, "arith.ori": jnp.bitwise_or, "arith.xori": jnp.bitwise_xor,
    "arith.shli": _shift(lax.shift_left), "arith.shrsi": lax.shift_right_arithmetic,
    "arith.shrui": _shift(lax.shift_right_logical),
    "arith.maxsi": jnp.maximum, "arith.minsi": jnp.minimum,
    "arith.maxui": _unsigned_op(jnp.maximum), "arith.minui": _unsigned_op(jnp.minimum),
    "arith.addf": jnp.add, "arith.subf": jnp.subtract, "arith.mulf": jnp.multiply, "arith.divf": jnp.divide,
    "arith.remf": _remf, "arith.maximumf": jnp.maximum, "arith.minimumf": jnp.minimum,
    "arith.maxnumf": jnp.fmax, "arith.minnumf": jnp.fmin,
    "tt.precise_divf": jnp.divide, "math.copysign": jnp.copysign, "math.powf": jnp.power,
    "math.atan2": jnp.arctan2, "math.fpowi": lambda x, n: jnp.power(x, n.astype(x.dtype)),
    "math.ipowi": lambda x, n: lax.integer_pow(x, n) if isinstance(n, int) else jnp.power(x, n),
    "tt.mulhiui": lambda a, b: _s(mulhi(_u(a), _u(b)), a),
}

_UNARY = {
    "arith.negf": jnp.negative, "math.absf": jnp.abs, "math.absi": jnp.abs, "math.exp": jnp.exp,
    "math.exp2": jnp.exp2, "math.log": jnp.log, "math.log2": jnp.log2, "math.log10": jnp.log10,
    "math.log1p": jnp.log1p, "math.expm1": jnp.expm1, "math.sqrt": jnp.sqrt, "math.rsqrt": lax.rsqrt,
    "tt.precise_sqrt": jnp.sqrt, "math.sin": jnp.sin, "math.cos": jnp.cos, "math.tan": jnp.tan,
    "math.tanh": jnp.tanh, "math.erf": lax.erf, "math.floor": jnp.floor, "math.ceil": jnp.ceil,
    "math.trunc": jnp.trunc, "math.roundeven": jnp.round, "math.round": round_half_away,
    "math.asin": jnp.arcsin, "math.acos": jnp.arccos, "math.atan": jnp.arctan, "math.sinh": jnp.sinh,
    "math.cosh": jnp.cosh, "math.asinh": jnp.arcsinh, "math.acosh": jnp.arccosh, "math.atanh": jnp.arctanh,
    "math.ctlz": lax.clz, "math.ctpop": lax.population_count, "math.cbrt": jnp.cbrt,
}


_NARROW = {np.dtype(jnp.bfloat16): (8, 7), np.dtype(jnp.float16): (5, 10)}


def rounded(x):
    """Round a bf16/fp16 result to its type: XLA may otherwise keep intermediate results in fp32
    (excess precision), where Triton rounds after every operation."""
    bits = _NARROW.get(np.dtype(x.dtype)) if hasattr(x, "dtype") else None
    return lax.reduce_precision(x, *bits) if bits else x


#: Columns of a tile that ``across`` computes on its transpose. XLA:CPU compiles an elementwise loop whose
#: innermost dimension has 9 to 16 elements two to three times slower than the same loop with a long innermost
#: dimension (``exp2`` over (16, 128, 16): 0.18 s of compile, over (16, 16, 128): 0.06 s; Triton's tutorial
#: attention backward, whose masked steps work on 128 x 16 tiles: 1.7 s of XLA compile, 1.2 s when computed
#: across). Narrower tiles (a complex number's 2 columns) compile fast and would only gain transposes.
NARROW_COLUMNS = range(9, 17)


def across(fn):
    """``fn`` of same-shaped tiles (and scalars), computed on the transposes when the tiles have
    ``NARROW_COLUMNS`` columns and at least four times as many rows. The result is the same to the bit; XLA cancels
    the transposes between two such operations, so a chain of them runs transposed from end to end."""
    def apply(*args):
        shape = next((a.shape for a in args if getattr(a, "ndim", 0) == 2), None)
        if shape is None or shape[1] not in NARROW_COLUMNS or shape[0] < 4 * shape[1]:
            return fn(*args)
        flipped = [jnp.swapaxes(a, 0, 1) if getattr(a, "ndim", 0) == 2 else a for a in args]
        return jnp.swapaxes(fn(*flipped), 0, 1)
    return apply


_ACROSS = {name: across(fn) for name, fn in {**_BINARY, **_UNARY}.items()}
for _name in _ACROSS:
    handler(_name)(lambda f, op, name=_name: [rounded(_ACROSS[name](*f.args(op)))])


@handler("math.fma")
def _fma(f: Frame, op: Op):
    a, b, c = f.args(op)
    return [rounded(a * b + c)]


@handler("tt.clampf")
def _clampf(f: Frame, op: Op):
    x, lo, hi = f.args(op)
    if op.words and "all" in op.words[-1]:  # propagateNan = all
        return [jnp.where(jnp.isnan(x), x, jnp.clip(x, lo, hi))]
    return [jnp.fmin(jnp.fmax(x, lo), hi)]


_CMPI = {"eq": jnp.equal, "ne": jnp.not_equal, "slt": jnp.less, "sle": jnp.less_equal, "sgt": jnp.greater,
         "sge": jnp.greater_equal}
_CMPF = {"eq": jnp.equal, "gt": jnp.greater, "ge": jnp.greater_equal, "lt": jnp.less, "le": jnp.less_equal,
         "ne": jnp.not_equal}


@handler("arith.cmpi")
def _cmpi(f: Frame, op: Op):
    predicate = op.keyword
    a, b = f.args(op)
    if predicate in _CMPI:
        return [across(_CMPI[predicate])(a, b)]
    return [_CMPI["s" + predicate[1:]](_u(a), _u(b))]


@handler("arith.cmpf")
def _cmpf(f: Frame, op: Op):
    predicate = op.keyword
    a, b = f.args(op)
    if predicate in ("true", "false"):
        return [jnp.full(jnp.broadcast_shapes(a.shape, b.shape), predicate == "true")]
    unordered = jnp.isnan(a) | jnp.isnan(b)
    if predicate == "ord":
        return [~unordered]
    if predicate == "uno":
        return [unordered]
    result = _CMPF[predicate[1:]](a, b)
    if predicate[0] == "o":
        return [result & ~unordered] if predicate == "one" else [result]
    return [result | unordered]


@handler("arith.select")
def _select(f: Frame, op: Op):
    c, a, b = f.args(op)
    from tritonplug_interpret.xla.memory import select_pointers

    if not hasattr(a, "dtype"):
        return [select_pointers(c, a, b)]
    return [across(jnp.where)(c, a, b)]


def _result_dtype(op: Op) -> np.dtype:
    return parse_type(op.result_types[0]).dtype


@handler("arith.extsi", "arith.trunci", "arith.extf", "arith.truncf", "arith.sitofp", "arith.fptosi",
         "arith.index_cast")
def _convert(f: Frame, op: Op):
    (x,) = f.args(op)
    return [across(lambda v: lax.convert_element_type(v, _result_dtype(op)))(x)]


@handler("arith.extui")
def _extui(f: Frame, op: Op):
    (x,) = f.args(op)
    target = _result_dtype(op)
    return [lax.bitcast_convert_type(_u(x).astype(unsigned(target)), target)]


@handler("arith.uitofp")
def _uitofp(f: Frame, op: Op):
    (x,) = f.args(op)
    return [lax.convert_element_type(_u(x), _result_dtype(op))]


@handler("arith.fptoui")
def _fptoui(f: Frame, op: Op):
    (x,) = f.args(op)
    target = _result_dtype(op)
    return [_s(lax.convert_element_type(x, unsigned(target)), jnp.zeros((), target))]


@handler("tt.fp_to_fp")
def _fp_to_fp(f: Frame, op: Op):
    (x,) = f.args(op)
    target = _result_dtype(op)
    if any("rtz" in w for w in op.words[1:]) and np.dtype(target).itemsize < x.dtype.itemsize:
        return [_round_toward_zero(x, target)]
    if np.dtype(target).itemsize == 1 and x.dtype.itemsize > 1:
        # Triton's sm_90 lowering (cvt.rn.satfinite): nearest-even, out-of-range values (and infinities)
        # saturate to the largest finite fp8 value, NaN stays NaN; XLA alone would give NaN or inf
        top = float(jnp.finfo(target).max)
        wide = jnp.clip(lax.convert_element_type(x, jnp.float32), -top, top)
        return [lax.convert_element_type(wide, target)]
    if x.dtype.itemsize == 1 or np.dtype(target).itemsize == 1:  # fp8 goes through fp32, as Triton does
        return [lax.convert_element_type(lax.convert_element_type(x, jnp.float32), target)]
    return [lax.convert_element_type(x, target)]


def _round_toward_zero(x, target):
    """Truncate toward zero: the nearest-even result, stepped back where it grew in magnitude."""
    wide = lax.convert_element_type(x, jnp.float32)
    near = lax.convert_element_type(wide, target)
    back = lax.convert_element_type(near, jnp.float32)
    grew = (jnp.abs(back) > jnp.abs(wide)) & jnp.isfinite(wide)
    bits = lax.bitcast_convert_type(near, unsigned(np.dtype(target)))
    stepped = lax.bitcast_convert_type(bits - bits.dtype.type(1), target)
    return jnp.where(grew, stepped, near)


@handler("arith.bitcast", "tt.bitcast")
def _bitcast(f: Frame, op: Op):
    (x,) = f.args(op)
    target = parse_type(op.result_types[0])
    if target.is_pointer:
        from tritonplug_interpret.xla.memory import bitcast_pointer

        return [bitcast_pointer(x, target)]
    return [reinterpret(x, target.dtype)]


_HEX = re.compile(r"^0x[0-9A-Fa-f]+$")


def constant_value(text: str, type_text: str):
    """``arith.constant``'s value as a JAX array of the type."""
    ty = parse_type(type_text)
    dtype = ty.dtype
    text = text.strip()
    if text.startswith("dense<"):
        text = text[len("dense<"):-1].strip()
        if text.startswith("["):
            values = ast.literal_eval(text.replace("true", "True").replace("false", "False"))
            return jnp.asarray(np.asarray(values).reshape(ty.shape), dtype)
    value = _scalar(text, dtype)
    return jnp.full(ty.shape, value, dtype) if ty.shape else jnp.asarray(value, dtype)


def _scalar(text: str, dtype: np.dtype):
    if text in ("true", "false"):
        return text == "true"
    if _HEX.match(text):
        bits = int(text, 16)
        if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
            return bits
        if dtype == np.float64:
            return struct.unpack("<d", struct.pack("<Q", bits))[0]
        raw = np.array(bits, dtype=np.dtype(f"u{dtype.itemsize}"))
        return raw.view(dtype).astype(np.float64) if dtype.itemsize != 4 else float(raw.view(np.float32))
    if np.issubdtype(dtype, np.integer):
        return int(text)
    return float(text)


@handler("arith.constant")
def _constant(f: Frame, op: Op):
    text = op.header
    if not op.type_text:  # `arith.constant true`
        return [Deferred(lambda: jnp.asarray(text.strip() == "true"))]
    if "[" in text:       # a dense array of distinct values: made once
        return [constant_value(text, op.type_text)]
    return [Deferred(lambda: constant_value(text, op.type_text))]


@handler("ub.poison")
def _poison(f: Frame, op: Op):
    ty = parse_type(op.result_types[0])
    return [jnp.zeros(ty.shape, ty.dtype)]
