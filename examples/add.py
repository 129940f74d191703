"""Add two vectors with a Triton kernel called from JAX, eagerly and under jax.jit.

On a machine without a GPU this runs on the CPU interpret backend; set
TRITONPLUG_CUDA_ARCH=90 and pass ``--lower-cuda`` to print the PTX it would run on sm_90.
"""

from __future__ import annotations

import sys

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
def add_kernel(x_ptr, y_ptr, n_elements, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: jax.Array, y: jax.Array, block: int = 1024) -> jax.Array:
    return tritonplug.triton_call(
        x, y, x.size, kernel=add_kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(tritonplug.cdiv(x.size, block),), BLOCK=block)


def lowered_ptx(n: int = 4096) -> str:
    x = jax.ShapeDtypeStruct((n,), jnp.float32)
    lowered = jax.jit(add).trace(x, x).lower(lowering_platforms=("cuda",))
    from tritonplug.inspection import kernel_calls

    return kernel_calls(lowered.as_text())[0]["kernel_call"]["kernel"]["ptx"]


def main() -> None:
    if "--lower-cuda" in sys.argv:
        ptx = lowered_ptx()
        print("\n".join(line for line in ptx.splitlines()[:20]))
        return
    n = (1 << 24) + 3 if on_gpu() else 100_003
    kx, ky = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (n,), jnp.float32)
    y = jax.random.normal(ky, (n,), jnp.float32)
    eager = add(x, y)
    jitted = jax.jit(add)(x, y)
    np.testing.assert_allclose(np.asarray(eager), np.asarray(x + y), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(x + y), rtol=1e-6)
    print(f"add of {n} float32 elements on platform {platform()!r} by backend {backend_name()!r}: "
          f"matches x + y (first values {np.asarray(jitted)[:3]})")


if __name__ == "__main__":
    main()
