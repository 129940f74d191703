"""Kernels of rows for the ``vmap_method`` tests: each program handles one row of ``n`` elements, and the grid, a
callable of the named arguments, counts the rows of the arrays' leading dimensions, so a batch dimension in front
is more rows (``vmap_method="broadcast_all"``)."""

import math

import jax
import triton
import triton.language as tl

import tritonplug


@triton.jit
def rows_mul_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    """``out[r] = x[r] * y[r]`` for every row ``r``: every array is addressed by row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask)
    y = tl.load(y_ptr + row * n + cols, mask=mask)
    tl.store(out_ptr + row * n + cols, x * y, mask=mask)


@triton.jit
def scale_columns_kernel(x_ptr, w_ptr, n, out_ptr, BLOCK: tl.constexpr):
    """``out[r] = x[r] * w`` for every row ``r``: the weights ``w`` are read by column only."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask)
    w = tl.load(w_ptr + cols, mask=mask)
    tl.store(out_ptr + row * n + cols, x * w, mask=mask)


@triton.jit
def accumulate_rows_kernel(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    """``acc[r] += x[r]`` in place (``acc`` a Ref)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    acc = tl.load(acc_ptr + row * n + cols, mask=mask)
    tl.store(acc_ptr + row * n + cols, acc + tl.load(x_ptr + row * n + cols, mask=mask), mask=mask)


def rows(name: str):
    """A grid callable: one program per row of argument ``name`` (the product of its leading dimensions)."""
    return lambda meta: (math.prod(meta[name].shape[:-1]),)


def rows_mul(x: jax.Array, y: jax.Array, vmap_method: str = "broadcast_all") -> jax.Array:
    n = x.shape[-1]
    return tritonplug.triton_call(x, y, n, kernel=rows_mul_kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=rows("x_ptr"), BLOCK=triton.next_power_of_2(n), vmap_method=vmap_method)


def scale_columns(x: jax.Array, w: jax.Array, vmap_method: str = "expand_dims") -> jax.Array:
    n = x.shape[-1]
    return tritonplug.triton_call(x, w, n, kernel=scale_columns_kernel,
                                  out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=rows("x_ptr"),
                                  BLOCK=triton.next_power_of_2(n), vmap_method=vmap_method)
