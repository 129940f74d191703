"""@triton.jit helpers living in another module, for interpret_runner_kernels.py."""

import triton
import triton.language as tl


@triton.jit
def _twice(x):
    return x + x


@triton.jit
def scale_shift(x, shift):
    # a helper calling another helper of its own module, and a builtin through this module's `tl`
    return _twice(x) + tl.cast(shift, x.dtype)


@triton.jit
def negate(x):
    return -x
