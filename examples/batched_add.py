"""The fast path for jax.vmap: a kernel that takes the batch as a grid axis, via custom_vmap.

``jax.vmap`` of any ``triton_call`` works: tritonplug's batching rule runs the kernel once
per batch element in a loop inside the compiled program. That is correct for every
kernel but sequential. When the kernel can do better, say so with
``jax.custom_batching.custom_vmap``: its rule receives the batched operands (and which
of them are batched) and launches one kernel whose second grid axis walks the batch. An
unbatched operand is passed with a batch stride of 0, so every batch element reads the
same row without materialising a broadcast.

Runs on the CPU interpret backend when no GPU is visible.
"""

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
def batched_add_kernel(x_ptr, y_ptr, n, x_batch_stride, y_batch_stride, out_ptr, BLOCK: tl.constexpr):
    """``out[b] = x[b] + y[b]``: axis 0 of the grid tiles a row, axis 1 walks the batch."""
    batch = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + batch * x_batch_stride + offs, mask=mask)
    y = tl.load(y_ptr + batch * y_batch_stride + offs, mask=mask)
    tl.store(out_ptr + batch * n + offs, x + y, mask=mask)


def _launch(x: jax.Array, y: jax.Array, batch: int, x_stride: int, y_stride: int, block: int = 128) -> jax.Array:
    n = x.shape[-1]
    return tritonplug.triton_call(
        x, y, n, x_stride, y_stride, kernel=batched_add_kernel,
        out_type=jax.ShapeDtypeStruct((batch, n), x.dtype), grid=(triton.cdiv(n, block), batch), BLOCK=block)


@jax.custom_batching.custom_vmap
def add(x: jax.Array, y: jax.Array) -> jax.Array:
    """``x + y`` for two vectors; ``jax.vmap`` of it is a single kernel launch."""
    return _launch(x, y, 1, 0, 0)[0]


@add.def_vmap
def _add_vmap(axis_size: int, in_batched: list[bool], x: jax.Array, y: jax.Array) -> tuple[jax.Array, bool]:
    """custom_vmap hands over batched operands with the batch axis first, unbatched ones as they are."""
    x_batched, y_batched = in_batched
    n = x.shape[-1]
    return _launch(x, y, axis_size, n if x_batched else 0, n if y_batched else 0), True


def main() -> None:
    batch, n = (64, 1 << 16) if on_gpu() else (8, 1000)
    kx, ky = jax.random.split(jax.random.key(0))
    xs = jax.random.normal(kx, (batch, n), jnp.float32)
    y = jax.random.normal(ky, (n,), jnp.float32)
    fast = jax.jit(jax.vmap(add, in_axes=(0, None)))(xs, y)
    np.testing.assert_allclose(np.asarray(fast), np.asarray(xs + y), rtol=1e-6)
    jaxpr = str(jax.make_jaxpr(jax.vmap(add, in_axes=(0, None)))(xs, y))
    assert "while" not in jaxpr and "scan" not in jaxpr, "the custom_vmap rule should launch one kernel, no loop"
    print(f"vmap of add over {batch}x{n} on platform {platform()!r} by backend {backend_name()!r}: "
          f"one launch with grid (cdiv({n}, 128), {batch}), matches xs + y")


if __name__ == "__main__":
    main()
