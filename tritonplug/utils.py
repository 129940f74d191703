"""Small helpers jax-triton users import from it."""

from __future__ import annotations

import math


def cdiv(a: int, b: int) -> int:
    """Ceiling division, for grids: ``cdiv(n, BLOCK)`` programs cover ``n`` elements."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def strides_from_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of a shape."""
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
