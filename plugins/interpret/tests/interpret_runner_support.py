"""What the interpret runner's tests (``test_interpret_runner_*.py``) share: a Launch record made by
hand and run (no JAX), read-only operands, references for bf16 rounding, the random numbers and the
checked/unchecked parametrisation."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from tritonplug_interpret.runner import run_launch

from tritonplug.records import BufferSpec, Launch

ml_dtypes = pytest.importorskip("ml_dtypes")
bfloat16 = ml_dtypes.bfloat16


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
