"""A Hopper-style matmul: A and B read through host-side TMA descriptors (``tritonplug.TensorDescriptor``),
C written through a descriptor over a ``jax.new_ref`` output.

Runs everywhere: on an sm_90+ GPU the loads are TMA copies (jaxlib 0.11.1+ encodes the descriptors);
on the CPU the interpret backend compiles the same kernel with XLA (the descriptors as the base pointer, shape
and strides Triton's descriptor-to-pointer pass leaves).
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
def tma_matmul_kernel(a_desc, b_desc, c_desc, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([pid_m * BLOCK_M, k])
        b = b_desc.load([k, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def tma_matmul(a: jax.Array, b: jax.Array, block_m: int = 128, block_n: int = 256, block_k: int = 64,
               num_warps: int = 8, num_stages: int = 3) -> jax.Array:
    """``a @ b`` (fp16/bf16, fp32 accumulation); edge tiles are padded and clipped by the descriptors."""
    m, k = a.shape
    _, n = b.shape
    c = jax.new_ref(jnp.empty((m, n), a.dtype))
    tritonplug.triton_call(
        tritonplug.TensorDescriptor.from_array(a, [block_m, block_k]),
        tritonplug.TensorDescriptor.from_array(b, [block_k, block_n]),
        tritonplug.TensorDescriptor.from_array(c, [block_m, block_n]), k,
        kernel=tma_matmul_kernel, out_type=(), grid=(triton.cdiv(m, block_m), triton.cdiv(n, block_n)),
        num_warps=num_warps, num_stages=num_stages, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c[...]


def main() -> None:
    size = 1024 if on_gpu() else 64
    blocks = {} if on_gpu() else dict(block_m=32, block_n=32, block_k=32, num_warps=4)
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (size, size), jnp.float16)
    b = jax.random.normal(kb, (size, size), jnp.float16)
    out = jax.jit(lambda a, b: tma_matmul(a, b, **blocks))(a, b)
    want = np.asarray(a, np.float32) @ np.asarray(b, np.float32)
    np.testing.assert_allclose(np.asarray(out, np.float32), want, rtol=2e-2, atol=0.25)
    print(f"platform={platform()} backend={backend_name()} tma_matmul {size}x{size}x{size}: ok")


if __name__ == "__main__":
    main()
