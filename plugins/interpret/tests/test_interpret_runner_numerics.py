"""The interpret backend's runner on numbers, driven with hand-made Launch records (no JAX): masks,
dtypes, helpers, scalars, aliases, atomics, dots, grids, tuples, descriptors, threads; and its checked
mode, which names the argument, the offset and the program of an out-of-bounds access.
bf16: ``test_interpret_runner_bf16.py``; operands and hooks: ``test_interpret_runner_launch.py``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import triton.language as tl
from interpret_helpers import negate
from interpret_runner_kernels import (
    accumulate_kernel,
    add_kernel,
    apply_kernel,
    atomic_kernel,
    atomic_oob_kernel,
    cas_kernel,
    copy_kernel,
    descriptor_kernel,
    failing_kernel,
    grid_kernel,
    helper_kernel,
    matmul_kernel,
    positive_row_sum_kernel,
    scalars_kernel,
    shifted_load_kernel,
    tuple_kernel,
    two_outputs_kernel,
    unmasked_store_kernel,
)
from interpret_runner_support import CHECK, RNG, bfloat16, cdiv, read_only, run
from tritonplug_interpret.runner import OutOfBoundsAccess

from tritonplug.records import ArrayParam, ConstexprParam, ScalarParam

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
