"""The interpret backend's runner on bf16, driven with hand-made Launch records (no JAX): arithmetic,
reductions, comparisons, conversions rounded to nearest even, dots and atomics, against references
rounded exactly (``interpret_runner_support.bf16_round_exact``).
"""

from __future__ import annotations

import numpy as np
import pytest
from interpret_runner_kernels import (
    add_kernel,
    bf16_atomic_kernel,
    bf16_convert_kernel,
    bf16_dot_kernel,
    bf16_ops_kernel,
    bf16_sum_kernel,
)
from interpret_runner_support import CHECK, RNG, bf16_round, bf16_round_exact, bfloat16, cdiv, run

from tritonplug.records import ArrayParam, ConstexprParam, ScalarParam

# ----------------------------------------------------------------------------- bf16

@CHECK
def test_bf16_add_matches_fp32_reference(check):
    n, block = 1000, 256
    x = RNG.standard_normal(n).astype(bfloat16)
    y = (RNG.standard_normal(n) * 1e-2).astype(bfloat16)
    out = np.zeros(n, bfloat16)
    run(add_kernel, (cdiv(n, block), ), [ArrayParam(0), ArrayParam(1), ArrayParam(2), ScalarParam(n, "i32"),
                                         ConstexprParam(block)],
        ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"], [x, y], [out], check)
    expected = bf16_round(x.astype(np.float32) + y.astype(np.float32))
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))


def test_bf16_arithmetic_reductions_and_comparisons():
    n, block = 100, 128
    x = (RNG.standard_normal(n) * 3).astype(bfloat16)
    y = (RNG.uniform(0.5, 4, n) * np.sign(RNG.standard_normal(n))).astype(bfloat16)
    mul, ex = np.zeros(n, bfloat16), np.zeros(n, bfloat16)
    mx, cmp = np.zeros(1, bfloat16), np.zeros(n, np.int32)
    run(bf16_ops_kernel, (1, ), [ArrayParam(0), ArrayParam(1), ArrayParam(2), ArrayParam(3), ArrayParam(4),
                                 ArrayParam(5), ScalarParam(n, "i32"), ConstexprParam(block)],
        ["x_ptr", "y_ptr", "mul_ptr", "exp_ptr", "max_ptr", "cmp_ptr", "n", "BLOCK"], [x, y],
        [mul, ex, mx, cmp], check=True)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    # bf16 * bf16 rounds to bf16; Triton divides bf16 in fp32, so the difference is fp32, rounded when stored
    step = bf16_round(xf * yf).astype(np.float32) - xf / yf
    np.testing.assert_array_equal(mul.view(np.uint16), bf16_round(step).view(np.uint16))
    np.testing.assert_array_equal(ex.view(np.uint16), bf16_round(np.exp(xf)).view(np.uint16))
    assert mx[0] == x.max()
    np.testing.assert_array_equal(cmp, (xf < yf).astype(np.int32))


def test_bf16_row_sum_accumulates_then_rounds_once():
    rows, cols = 4, 100
    x = RNG.standard_normal((rows, cols)).astype(bfloat16)
    out = np.zeros(rows, bfloat16)
    run(bf16_sum_kernel, (rows, ),
        [ArrayParam(0), ArrayParam(1), ScalarParam(cols, "i32"), ConstexprParam(128)],
        ["x_ptr", "out_ptr", "cols", "BLOCK_C"], [x], [out], check=True)
    expected = bf16_round(x.astype(np.float32).sum(axis=1, dtype=np.float64))
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("source", ["float32", "float64"])
def test_conversion_to_bf16_rounds_to_nearest_even(source):
    special = [0.0, -0.0, 1.0, 1.00390625, 1.01171875, 1 + 2 ** -8 + 2 ** -30, -3.0e38, 3.4e38, np.inf,
               -np.inf, 1e-40, 5e-324 if source == "float64" else 1e-45]
    x = np.concatenate([np.array(special), RNG.standard_normal(200) * 10 ** RNG.uniform(-30, 30, 200)])
    x = x.astype(source)
    out = np.zeros(x.size, bfloat16)
    run(bf16_convert_kernel, (1, ),
        [ArrayParam(0), ArrayParam(1), ScalarParam(x.size, "i32"), ConstexprParam(256)],
        ["x_ptr", "bf_ptr", "n", "BLOCK"], [x], [out], check=True)
    np.testing.assert_array_equal(out.view(np.uint16), bf16_round_exact(x).view(np.uint16))
    if source == "float32":
        np.testing.assert_array_equal(out.view(np.uint16), bf16_round(x).view(np.uint16))
    else:
        assert out.view(np.uint16)[5] == 0x3F81  # 1 + 2**-8 + 2**-30 is above the tie: rounded once, up


def test_bf16_dot_accumulates_in_fp32():
    a = RNG.standard_normal((16, 16)).astype(bfloat16)
    b = RNG.standard_normal((16, 16)).astype(bfloat16)
    c = np.zeros((16, 16), np.float32)
    run(bf16_dot_kernel, (1, ), [ArrayParam(0), ArrayParam(1), ArrayParam(2), ConstexprParam(16)],
        ["a_ptr", "b_ptr", "c_ptr", "B"], [a, b], [c], check=True)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_bf16_atomic_add():
    n, block = 64, 32
    x = RNG.integers(-4, 4, n).astype(bfloat16)
    out = np.zeros(2, bfloat16)
    run(bf16_atomic_kernel, (cdiv(n, block), ), [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"),
                                                 ConstexprParam(block)],
        ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out], check=True)
    xf = x.astype(np.float32)
    np.testing.assert_array_equal(out.astype(np.float32), [xf[0::2].sum(), xf[1::2].sum()])
