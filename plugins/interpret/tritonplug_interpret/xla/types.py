"""TTIR types (``tensor<64x32xf16>``, ``!tt.ptr<f32>``, ``i1`` …) as shapes and JAX dtypes."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from jax import lax

_SCALARS = {
    "i1": jnp.bool_, "i8": jnp.int8, "i16": jnp.int16, "i32": jnp.int32, "i64": jnp.int64,
    "f16": jnp.float16, "bf16": jnp.bfloat16, "f32": jnp.float32, "f64": jnp.float64,
    "f8E4M3FN": jnp.float8_e4m3fn, "f8E5M2": jnp.float8_e5m2,
}
_UNSIGNED = {1: jnp.bool_, 8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}


class UnsupportedType(NotImplementedError):
    """A type the translation has no JAX dtype for."""


@dataclass(frozen=True)
class TType:
    """A TTIR type: ``shape`` (() for scalars), element text, and the pointee for pointers."""

    shape: tuple[int, ...]
    element: str                 # "f32", "i32", "ptr" …
    pointee: str | None = None   # element text of a pointer's pointee
    text: str = ""

    @property
    def is_pointer(self) -> bool:
        return self.element == "ptr"

    @property
    def dtype(self) -> np.dtype:
        return jnp_dtype(self.element)


def jnp_dtype(element: str) -> np.dtype:
    try:
        return np.dtype(_SCALARS[element])
    except KeyError:
        raise UnsupportedType(f"element type {element}") from None


def unsigned(dtype: np.dtype) -> np.dtype:
    return np.dtype(_UNSIGNED[8 * dtype.itemsize if dtype != np.bool_ else 1])


def to_unsigned(x):
    """Integer values viewed as the unsigned type of their width (MLIR integers are signless)."""
    return lax.bitcast_convert_type(x, unsigned(x.dtype)) if x.dtype != np.bool_ else x


def to_signed(x, dtype):
    """The bits of ``x`` (an unsigned view) back in the signed ``dtype`` of the same width."""
    return lax.bitcast_convert_type(x, dtype) if np.dtype(dtype) != np.bool_ and x.dtype != dtype else x


def reinterpret(x, dtype):
    """The bits of ``x`` as ``dtype`` of the same width. A bool buffer holds one byte per element (Triton reads
    and writes it through an ``i8`` pointer): as a byte it reads 0/1, and a byte written to it is its truth."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtype == np.bool_:
        return x != 0
    if x.dtype == np.bool_:
        return x.astype(dtype)
    return lax.bitcast_convert_type(x, dtype)


def bitwidth(dtype: np.dtype) -> int:
    return 1 if dtype == np.bool_ else 8 * dtype.itemsize


@functools.lru_cache(maxsize=4096)
def parse_type(text: str) -> TType:
    text = text.strip()
    if text.startswith("tensor<") and text.endswith(">"):
        body = text[len("tensor<"):-1]
        dims = []
        while True:
            head, sep, rest = body.partition("x")
            if sep and head.isdigit():
                dims.append(int(head))
                body = rest
                continue
            break
        inner = parse_type(body)
        if inner.shape:
            raise UnsupportedType(f"nested tensor type {text}")
        return TType(tuple(dims), inner.element, inner.pointee, text)
    if text.startswith("!tt.ptr<") and text.endswith(">"):
        inner = text[len("!tt.ptr<"):-1].split(",")[0].strip()
        if inner.startswith("tensor<"):
            return TType((), "ptr", "block:" + inner, text)
        return TType((), "ptr", inner, text)
    if text in _SCALARS:
        return TType((), text, None, text)
    raise UnsupportedType(f"type {text}")
