"""Row-wise softmax: one program per row, the row held in one block."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import tritonplug

if __package__ in (None, ""):
    from _common import backend_name, on_gpu, platform
else:
    from ._common import backend_name, on_gpu, platform


@triton.jit
def softmax_kernel(x_ptr, n_cols, row_stride, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    result = numerator / tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * row_stride + cols, result.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: jax.Array) -> jax.Array:
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    return tritonplug.triton_call(
        x, cols, cols, kernel=softmax_kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(rows,),
        num_warps=8 if block >= 2048 else 4, BLOCK=block)


def main() -> None:
    shape = (4096, 4096) if on_gpu() else (37, 200)
    x = jax.random.normal(jax.random.key(1), shape, jnp.float32)
    out = jax.jit(softmax)(x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(jax.nn.softmax(x, axis=-1)), rtol=1e-5, atol=1e-6)
    print(f"softmax {shape} on {platform()!r} by backend {backend_name()!r}: matches jax.nn.softmax")


if __name__ == "__main__":
    main()
