"""The Triton type of each scalar a kernel is given (``calls.binding.scalar_type``) at every edge of its rule:
ints by range as Triton and jax-triton 0.4 type them (i32, u32, i64, u64), Python floats fp32 within float32's range
and fp64 beyond it, NumPy scalars by dtype. A wrong edge passes a value the kernel reads as another number."""

from __future__ import annotations

import numpy as np
import pytest

from tritonplug.calls.binding import scalar_type

F32 = np.finfo(np.float32)

EDGES = [
    (-(2**63) - 1, None), (-(2**63), "i64"), (-(2**31) - 1, "i64"), (-(2**31), "i32"), (-1, "i32"), (0, "i32"),
    (2**31 - 1, "i32"), (2**31, "u32"), (2**32 - 1, "u32"), (2**32, "i64"), (2**63 - 1, "i64"), (2**63, "u64"),
    (2**64 - 1, "u64"), (2**64, None),
    (True, "i1"), (np.bool_(False), "i1"), (np.int8(3), "i32"), (np.int64(3), "i64"), (np.uint32(3), "u32"),
    (np.uint64(3), "u64"),
    (0.0, "fp32"), (-0.0, "fp32"), (float("inf"), "fp32"), (float("-inf"), "fp32"), (float("nan"), "fp32"),
    (float(F32.tiny), "fp32"), (float(F32.tiny) / 2, "fp64"), (float(F32.max), "fp32"),
    (-float(F32.max), "fp32"), (float(F32.max) * 2, "fp64"), (1e-300, "fp64"), (0.1, "fp32"),
    (np.float16(1), "fp32"), (np.float32(1), "fp32"), (np.float64(1), "fp64"),
]


@pytest.mark.parametrize(("value", "want"), EDGES, ids=[f"{type(v).__name__}({v!r})" for v, _ in EDGES])
def test_each_edge_of_the_scalar_rule(value, want):
    if want is None:
        with pytest.raises(ValueError, match="does not fit in 64 bits"):
            scalar_type(value, "argument 'n'")
    else:
        assert scalar_type(value, "argument 'n'") == want


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="this platform's long double is 64-bit")
def test_a_wider_than_64_bit_numpy_float_is_refused():
    with pytest.raises(TypeError, match="longdouble|float128|float96"):
        scalar_type(np.longdouble(1), "argument 'x'")
