"""@triton.jit helpers living in another module, for tests/test_interpret_runner.py."""

import triton


@triton.jit
def _twice(x):
    return x + x


@triton.jit
def scale_shift(x, shift):
    # a helper calling another helper of its own module
    return _twice(x) + shift


@triton.jit
def negate(x):
    return -x
