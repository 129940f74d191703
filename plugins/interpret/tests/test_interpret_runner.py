"""The interpret backend's runner and hooks, driven with hand-made Launch records (no JAX)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import interpret_helpers
import numpy as np
import pytest
import triton
import triton.language as tl
from interpret_helpers import negate
from tritonplug_interpret import plugin
from tritonplug_interpret.runner import OutOfBoundsAccess, run_launch

from tritonplug.records import (
    ArrayParam,
    BufferSpec,
    CompileJob,
    ConstexprParam,
    HostKernel,
    Launch,
    Options,
    ScalarParam,
)

ml_dtypes = pytest.importorskip("ml_dtypes")
bfloat16 = ml_dtypes.bfloat16


# ----------------------------------------------------------------------------- kernels

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def helper_kernel(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = interpret_helpers.scale_shift(x, shift)  # module attribute, helper calls a helper
    tl.store(out_ptr + offs, negate(y), mask=mask)  # imported name


@triton.jit
def apply_kernel(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, FN(tl.load(x_ptr + offs, mask=mask)), mask=mask)


@triton.jit
def two_outputs_kernel(x_ptr, prod_ptr, sum_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(prod_ptr + offs, x * alpha, mask=mask)
    tl.store(sum_ptr + offs, x + alpha, mask=mask)


@triton.jit
def scalars_kernel(out_ptr, flag, i64, u32, f64):
    tl.store(out_ptr + 0, tl.where(flag, 1.0, -1.0).to(tl.float64))
    tl.store(out_ptr + 1, i64.to(tl.float64))
    tl.store(out_ptr + 2, u32.to(tl.float64))
    tl.store(out_ptr + 3, f64 * 2)


@triton.jit
def accumulate_kernel(acc_ptr, x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(acc_ptr + offs, mask=mask)
    tl.store(acc_ptr + offs, acc + tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def atomic_kernel(x_ptr, total_ptr, bins_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.atomic_add(total_ptr, tl.sum(x, axis=0))
    tl.atomic_add(bins_ptr + offs % 4, 1, mask=mask)  # lanes collide on purpose


@triton.jit
def cas_kernel(lock_ptr, old_ptr, swapped_ptr):
    pid = tl.program_id(0)
    tl.store(old_ptr + pid, tl.atomic_cas(lock_ptr, 0, pid + 1))  # only the first program finds 0
    tl.store(swapped_ptr + pid, tl.atomic_xchg(lock_ptr + 1, pid))


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def positive_row_sum_kernel(x_ptr, out_ptr, cols, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    mask = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=mask, other=0.0)
    tl.store(out_ptr + row, tl.sum(tl.where(x > 0, x, 0.0), axis=0))


@triton.jit
def grid_kernel(out_ptr):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    ny = tl.num_programs(1)
    nz = tl.num_programs(2)
    tl.store(out_ptr + (x * ny + y) * nz + z, x * 100 + y * 10 + z)


@triton.jit
def tuple_kernel(args, out_ptr, n, BLOCK: tl.constexpr):
    x_ptr = args[0]
    y_ptr = args[1][0]
    scale = args[1][1]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * scale + y + args[2], mask=mask)


@triton.jit
def descriptor_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, [M, N], [N, 1], [BM, BN])
    dst.store([pid * BM, 0], src.load([pid * BM, 0]) * 2)  # BN > N: the padding lanes are masked


@triton.jit
def failing_kernel(out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr, 1.0)
    tl.static_assert(BLOCK < 0, "BLOCK must be negative")


@triton.jit
def bf16_ops_kernel(x_ptr, y_ptr, mul_ptr, exp_ptr, max_ptr, cmp_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)
    tl.store(mul_ptr + offs, x * y - x / y, mask=mask)
    tl.store(exp_ptr + offs, tl.exp(x.to(tl.float32)).to(tl.bfloat16), mask=mask)
    tl.store(max_ptr, tl.max(tl.where(mask, x, -1000.0), axis=0))
    tl.store(cmp_ptr + offs, (x < y).to(tl.int32), mask=mask)


@triton.jit
def bf16_sum_kernel(x_ptr, out_ptr, cols, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    x = tl.load(x_ptr + row * cols + c, mask=c < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def bf16_convert_kernel(x_ptr, bf_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(bf_ptr + offs, tl.load(x_ptr + offs, mask=mask).to(tl.bfloat16), mask=mask)


@triton.jit
def bf16_dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    a = tl.load(a_ptr + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + r[:, None] * B + r[None, :])
    tl.store(c_ptr + r[:, None] * B + r[None, :], tl.dot(a, b))


@triton.jit
def bf16_atomic_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offs % 2, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def unmasked_store_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < 1000))


@triton.jit
def shifted_load_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs - 1, mask=mask), mask=mask)


@triton.jit
def atomic_oob_kernel(out_ptr, index):
    tl.atomic_add(out_ptr + index, 1.0)


@triton.jit
def scribble_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, x * 0 - 1, mask=mask)  # writes to an operand that is not aliased
    tl.store(out_ptr + offs, x, mask=mask)


# ----------------------------------------------------------------------------- helpers

def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def make_launch(kernel, grid, params, names, operands, results, aliases=()) -> Launch:
    grid = tuple(grid) + (1, ) * (3 - len(grid))
    return Launch(kernel_name=kernel.__name__, grid=grid, params=tuple(params), arg_names=tuple(names),
                  operands=tuple(BufferSpec(a.shape, a.dtype.name) for a in operands),
                  results=tuple(BufferSpec(a.shape, a.dtype.name) for a in results),
                  aliases=tuple(aliases), kernel=kernel)


def run(kernel, grid, params, names, operands, results, check=False, aliases=()):
    launch = make_launch(kernel, grid, params, names, operands, results, aliases)
    run_launch(launch, list(operands), list(results), check)
    return results


def read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def bf16_round(values: np.ndarray) -> np.ndarray:
    """Reference rounding fp32 -> bf16 (ml_dtypes rounds to nearest even)."""
    return np.asarray(values).astype(bfloat16)


def bf16_round_exact(values: np.ndarray) -> np.ndarray:
    """Reference rounding of any float to nearest-even bf16 with exact arithmetic.

    (ml_dtypes rounds fp64 through fp32, so it rounds twice.)
    """
    out = []
    for x in np.asarray(values, dtype=np.float64).reshape(-1):
        guess = np.array([x]).astype(bfloat16).view(np.uint16)[0]
        if not np.isfinite(x) or not np.isfinite(np.float64(np.array([guess], np.uint16).view(bfloat16)[0])):
            out.append(guess)
            continue
        candidates = [np.uint16(int(guess) + d) for d in (-1, 0, 1) if 0 <= int(guess) + d <= 0xFFFF]
        candidates = [c for c in candidates if np.isfinite(np.array([c], np.uint16).view(bfloat16)[0])]

        def distance(c, x=x):
            value = Fraction(float(np.array([c], np.uint16).view(bfloat16)[0]))
            same_sign = (value >= 0) == (x >= 0) or value == 0
            return (abs(Fraction(float(x)) - value), not same_sign, int(c) & 1)

        out.append(min(candidates, key=distance))
    return np.array(out, dtype=np.uint16).reshape(np.shape(values)).view(bfloat16)


RNG = np.random.default_rng(1234)
CHECK = pytest.mark.parametrize("check", [False, True], ids=["unchecked", "checked"])


# ----------------------------------------------------------------------------- numerics

@CHECK
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32"])
def test_add_with_masks(dtype, check):
    n, block = 1000, 128
    if dtype == "int32":
        x, y = (RNG.integers(-1000, 1000, n).astype(dtype) for _ in range(2))
    else:
        x, y = (RNG.standard_normal(n).astype(dtype) for _ in range(2))
    out = np.full(n, 7, dtype=dtype)
    run(add_kernel, (cdiv(n, block), ), [ArrayParam(0), ArrayParam(1), ArrayParam(2), ScalarParam(n, "i32"),
                                         ConstexprParam(block)],
        ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"], [read_only(x), read_only(y)], [out], check)
    np.testing.assert_array_equal(out, x + y)


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                   "uint64", "float16", "float32", "float64", "bfloat16"])
def test_every_dtype_round_trips(dtype):
    n, block = 77, 32
    x = (RNG.standard_normal(n) * 50).astype(np.float64)
    x = np.abs(x) if dtype.startswith("u") else x
    x = (x > 0) if dtype == "bool" else x.astype(bfloat16 if dtype == "bfloat16" else np.dtype(dtype))
    out = np.zeros_like(x)
    run(copy_kernel, (cdiv(n, block), ),
        [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(block)],
        ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out], check=True)
    np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8))


@CHECK
def test_nested_helpers_from_another_module(check):
    n, block = 100, 64
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    run(helper_kernel, (2, ), [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ScalarParam(0.5, "fp32"),
                               ConstexprParam(block)],
        ["x_ptr", "out_ptr", "n", "shift", "BLOCK"], [x], [out], check)
    np.testing.assert_allclose(out, -(2 * x + 0.5), rtol=1e-6)


def test_jit_function_passed_as_constexpr():
    n, block = 50, 64
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    run(apply_kernel, (1, ), [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(negate),
                              ConstexprParam(block)],
        ["x_ptr", "out_ptr", "n", "FN", "BLOCK"], [x], [out], check=True)
    np.testing.assert_array_equal(out, -x)


@CHECK
def test_two_outputs_and_a_float_scalar(check):
    n, block = 300, 128
    x = RNG.standard_normal(n).astype(np.float32)
    prod, total = np.zeros_like(x), np.zeros_like(x)
    run(two_outputs_kernel, (cdiv(n, block), ),
        [ArrayParam(0), ArrayParam(1), ArrayParam(2), ScalarParam(1.5, "fp32"), ScalarParam(n, "i32"),
         ConstexprParam(block)],
        ["x_ptr", "prod_ptr", "sum_ptr", "alpha", "n", "BLOCK"], [x], [prod, total], check)
    np.testing.assert_array_equal(prod, x * np.float32(1.5))
    np.testing.assert_array_equal(total, x + np.float32(1.5))


def test_scalar_types():
    out = np.zeros(4, np.float64)
    run(scalars_kernel, (1, ), [ArrayParam(0), ScalarParam(True, "i1"), ScalarParam(-(2 ** 40), "i64"),
                                ScalarParam(2 ** 32 - 1, "u32"), ScalarParam(0.1, "fp64")],
        ["out_ptr", "flag", "i64", "u32", "f64"], [], [out], check=True)
    np.testing.assert_array_equal(out, [1.0, -(2.0 ** 40), 2.0 ** 32 - 1, 0.2])


@CHECK
def test_alias_accumulates_in_place(check):
    n, block = 200, 64
    acc0 = read_only(RNG.standard_normal(n).astype(np.float32))
    x = read_only(RNG.standard_normal(n).astype(np.float32))
    result = acc0.copy()  # what the host does for an aliased pair
    run(accumulate_kernel, (cdiv(n, block), ),
        [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(block)],
        ["acc_ptr", "x_ptr", "n", "BLOCK"], [acc0, x], [result], check, aliases=[(0, 0)])
    np.testing.assert_array_equal(result, acc0 + x)
    run(accumulate_kernel, (cdiv(n, block), ),
        [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(block)],
        ["acc_ptr", "x_ptr", "n", "BLOCK"], [result.copy(), x], [result], check, aliases=[(0, 0)])
    np.testing.assert_array_equal(result, (acc0 + x) + x)


@CHECK
def test_atomic_add_into_zeroed_result(check):
    n, block = 1000, 128
    x = RNG.integers(-8, 8, n).astype(np.float32)  # small integers: every order sums exactly
    total, bins = np.zeros(1, np.float32), np.zeros(4, np.int32)
    run(atomic_kernel, (cdiv(n, block), ),
        [ArrayParam(0), ArrayParam(1), ArrayParam(2), ScalarParam(n, "i32"), ConstexprParam(block)],
        ["x_ptr", "total_ptr", "bins_ptr", "n", "BLOCK"], [x], [total, bins], check)
    assert total[0] == x.sum()
    np.testing.assert_array_equal(bins, np.bincount(np.arange(n) % 4))


@CHECK
def test_atomic_cas_and_xchg(check):
    lock, old, swapped = np.zeros(2, np.int32), np.full(3, -1, np.int32), np.full(3, -1, np.int32)
    lock[1] = 42
    run(cas_kernel, (3, ), [ArrayParam(0), ArrayParam(1), ArrayParam(2)],
        ["lock_ptr", "old_ptr", "swapped_ptr"], [], [lock, old, swapped], check)
    np.testing.assert_array_equal(lock, [1, 2])
    np.testing.assert_array_equal(old, [0, 1, 1])
    np.testing.assert_array_equal(swapped, [42, 0, 1])


@CHECK
def test_dot_16x16x16_fp32(check):
    m = n = k = 32
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    run(matmul_kernel, (m // 16, n // 16),
        [ArrayParam(0), ArrayParam(1), ArrayParam(2), ScalarParam(m, "i32"), ScalarParam(n, "i32"),
         ScalarParam(k, "i32"), ConstexprParam(16), ConstexprParam(16), ConstexprParam(16)],
        ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "BM", "BN", "BK"], [a, b], [c], check)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


@CHECK
def test_row_sum_with_where(check):
    rows, cols = 5, 100
    x = RNG.standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros(rows, np.float32)
    run(positive_row_sum_kernel, (rows, ), [ArrayParam(0), ArrayParam(1), ScalarParam(cols, "i32"),
                                            ConstexprParam(128)],
        ["x_ptr", "out_ptr", "cols", "BLOCK_C"], [x], [out], check)
    np.testing.assert_allclose(out, np.where(x > 0, x, 0).sum(axis=1), rtol=1e-5)


@CHECK
@pytest.mark.parametrize("grid", [(3, 4, 1), (3, 4, 2)], ids=["2d", "3d"])
def test_multi_dimensional_grid(grid, check):
    out = np.full(grid, -1, np.int32)
    run(grid_kernel, grid, [ArrayParam(0)], ["out_ptr"], [], [out], check)
    gx, gy, gz = np.indices(grid)
    np.testing.assert_array_equal(out, gx * 100 + gy * 10 + gz)


@CHECK
def test_nested_tuple_argument(check):
    n, block = 90, 64
    x, y = (RNG.standard_normal(n).astype(np.float32) for _ in range(2))
    out = np.zeros_like(x)
    run(tuple_kernel, (cdiv(n, block), ),
        [(ArrayParam(0), (ArrayParam(1), ScalarParam(3.0, "fp32")), ConstexprParam(1)), ArrayParam(2),
         ScalarParam(n, "i32"), ConstexprParam(block)],
        ["args", "out_ptr", "n", "BLOCK"], [x, y], [out], check)
    np.testing.assert_allclose(out, x * 3 + y + 1, rtol=1e-6)


@CHECK
def test_tensor_descriptors(check):
    m, n = 10, 12
    x = RNG.standard_normal((m, n)).astype(np.float32)
    out = np.zeros_like(x)
    run(descriptor_kernel, (3, ), [ArrayParam(0), ArrayParam(1), ScalarParam(m, "i32"), ScalarParam(n, "i32"),
                                   ConstexprParam(4), ConstexprParam(16)],
        ["x_ptr", "out_ptr", "M", "N", "BM", "BN"], [x], [out], check)
    np.testing.assert_array_equal(out, 2 * x)


def test_concurrent_runs_are_serialised():
    n, block = 500, 128
    params = [ArrayParam(0), ArrayParam(1), ArrayParam(2), ScalarParam(n, "i32"), ConstexprParam(block)]
    names = ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
    y = np.arange(n, dtype=np.float32)
    jobs = [(np.full(n, i, np.float32), y, np.zeros(n, np.float32)) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda job: run(add_kernel, (cdiv(n, block), ), params, names, job[:2], job[2:],
                                      check=bool(job[0][0] % 2)), jobs))
    for x, y, out in jobs:
        np.testing.assert_array_equal(out, x + y)


def test_zero_sized_grid_does_nothing():
    out = np.full(4, 9, np.int32)
    run(grid_kernel, (0, 1, 1), [ArrayParam(0)], ["out_ptr"], [], [out], check=True)
    np.testing.assert_array_equal(out, 9)


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


# ----------------------------------------------------------------------------- checked mode

def test_checked_mode_catches_out_of_bounds_store():
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros(1000, np.float32)
    with pytest.raises(OutOfBoundsAccess) as info:
        run(unmasked_store_kernel, (4, ), [ArrayParam(0), ArrayParam(1), ConstexprParam(256)],
            ["x_ptr", "out_ptr", "BLOCK"], [x], [out], check=True)
    message = str(info.value)
    assert isinstance(info.value, IndexError)
    assert "unmasked_store_kernel" in message and "'out_ptr'" in message and "store" in message
    assert "byte offset 4000" in message and "(3, 0, 0)" in message


def test_checked_mode_catches_out_of_bounds_load_before_the_buffer():
    n, block = 100, 64
    x, out = np.arange(n, dtype=np.float64), np.zeros(n, np.float64)
    with pytest.raises(OutOfBoundsAccess) as info:
        run(shifted_load_kernel, (cdiv(n, block), ), [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"),
                                                      ConstexprParam(block)],
            ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out], check=True)
    message = str(info.value)
    assert "shifted_load_kernel" in message and "'x_ptr'" in message and "load" in message
    assert "byte offset -8" in message


def test_checked_mode_catches_out_of_bounds_atomic():
    out = np.zeros(4, np.float32)
    run(atomic_oob_kernel, (1, ), [ArrayParam(0), ScalarParam(3, "i32")], ["out_ptr", "index"], [], [out],
        check=True)
    assert out[3] == 1
    with pytest.raises(OutOfBoundsAccess, match=r"'out_ptr' at byte offset 16"):
        run(atomic_oob_kernel, (1, ), [ArrayParam(0), ScalarParam(4, "i32")], ["out_ptr", "index"], [], [out],
            check=True)


def test_checked_mode_names_the_tuple_entry():
    x, y, out = np.zeros(10, np.float32), np.zeros(3, np.float32), np.zeros(64, np.float32)
    with pytest.raises(OutOfBoundsAccess, match=r"'args\[1\]\[0\]'.*byte offset 12"):
        run(tuple_kernel, (1, ),
            [(ArrayParam(0), (ArrayParam(1), ScalarParam(1.0, "fp32")), ConstexprParam(0)), ArrayParam(2),
             ScalarParam(10, "i32"), ConstexprParam(64)],
            ["args", "out_ptr", "n", "BLOCK"], [x, y], [out], check=True)


def test_checked_mode_does_not_flag_masked_off_lanes():
    n, block = 3, 1024  # almost every lane is masked off and far out of bounds
    x, y, out = np.ones(n, np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    run(add_kernel, (1, ), [ArrayParam(0), ArrayParam(1), ArrayParam(2), ScalarParam(n, "i32"),
                            ConstexprParam(block)],
        ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"], [x, y], [out], check=True)
    np.testing.assert_array_equal(out, 2)


def test_interpreter_state_is_restored_after_a_run_and_after_an_error():
    from triton.runtime.jit import JITFunction

    before = (tl.load, tl.core.load, tl.reduce, tl.tensor.__add__, JITFunction.__call__)
    test_checked_mode_catches_out_of_bounds_store()
    test_add_with_masks("float32", True)
    assert (tl.load, tl.core.load, tl.reduce, tl.tensor.__add__, JITFunction.__call__) == before
    with pytest.raises(AssertionError, match="BLOCK must be negative"):
        run(failing_kernel, (1, ), [ArrayParam(0), ConstexprParam(4)], ["out_ptr", "BLOCK"], [],
            [np.zeros(1, np.float32)])
    assert (tl.load, tl.core.load, tl.reduce, tl.tensor.__add__, JITFunction.__call__) == before
    if os.environ.get("TRITON_INTERPRET") == "1":
        return  # helpers are InterpretedFunctions, callable anywhere
    with pytest.raises(RuntimeError, match="outside of the scope of a kernel"):
        negate(1.0)


# ----------------------------------------------------------------------------- operands

@CHECK
def test_operands_are_not_mutated(check):
    n, block = 100, 64
    x = read_only(RNG.standard_normal(n).astype(np.float32))
    writable = x.copy()
    out = np.zeros_like(x)
    for operand in (x, writable):
        run(scribble_kernel, (cdiv(n, block), ), [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"),
                                                  ConstexprParam(block)],
            ["x_ptr", "out_ptr", "n", "BLOCK"], [operand], [out], check)
        np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(writable, x)


def test_non_contiguous_result_is_written_back():
    n, block = 40, 64
    x = RNG.standard_normal(n).astype(np.float32)
    storage = np.zeros(2 * n, np.float32)
    out = storage[::2]
    run(copy_kernel, (1, ), [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(block)],
        ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out], check=True)
    np.testing.assert_array_equal(storage[::2], x)
    np.testing.assert_array_equal(storage[1::2], 0)


def test_launch_setup_is_cached():
    from tritonplug_interpret import runner

    x, out = np.zeros(4, np.float32), np.zeros(4, np.float32)
    params = [ArrayParam(0), ArrayParam(1), ScalarParam(4, "i32"), ConstexprParam(4)]
    launch = make_launch(copy_kernel, (1, ), params, ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out])
    assert runner.prepare(launch, False) is runner.prepare(launch, False)
    assert runner.prepare(launch, True) is not runner.prepare(launch, False)
    assert plugin.OutOfBoundsAccess is OutOfBoundsAccess and issubclass(OutOfBoundsAccess, IndexError)


def test_wrong_buffer_count_or_dtype_is_an_error():
    n = 8
    x, out = np.zeros(n, np.float32), np.zeros(n, np.float32)
    params = [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(8)]
    launch = make_launch(copy_kernel, (1, ), params, ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out])
    with pytest.raises(ValueError, match="1 operand"):
        run_launch(launch, [], [out], False)
    with pytest.raises(TypeError, match="float64"):
        run_launch(launch, [x.astype(np.float64)], [out], False)


# ----------------------------------------------------------------------------- plugin hooks

def test_compile_and_make_kernel(monkeypatch):
    target = plugin.tritonplug_detect_target("cpu", None, {})
    job = CompileJob("interpret", "add_kernel", target, Options(), "module {}", "ttir")
    binary = plugin.tritonplug_compile(job)
    assert (binary.kernel_name, binary.format, dict(binary.images), dict(binary.metadata)) == \
        ("add_kernel", "ttir", {"ttir": b"module {}"}, {})
    n = 10
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(2, np.float32)
    params = [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(16)]
    launch = make_launch(copy_kernel, (1, ), params, ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out])
    for flag, raises in (("1", True), ("0", False)):
        monkeypatch.setenv(plugin.CHECK_VARIABLE, flag)
        kernel = plugin.tritonplug_make_kernel(target, binary, launch)
        assert isinstance(kernel, HostKernel) and kernel.launch is launch
        assert kernel.kernel_name == "copy_kernel"
        if raises:
            with pytest.raises(OutOfBoundsAccess, match="out_ptr"):
                kernel.run([x], [out])
        else:
            big = np.zeros(n, np.float32)  # the store stays inside: just check it runs unchecked
            plugin.tritonplug_make_kernel(target, binary, make_launch(
                copy_kernel, (1, ), launch.params, launch.arg_names, [x], [big])).run([x], [big])
            np.testing.assert_array_equal(big, x)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="kernels are already interpreted")
def test_kernels_are_plain_jit_functions():
    from triton.runtime.jit import JITFunction

    assert isinstance(add_kernel, JITFunction) and isinstance(interpret_helpers.scale_shift, JITFunction)
