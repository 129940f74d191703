"""An autotuned kernel whose result names the configuration that ran, for the tuning tests, and a script
that runs it in a fresh process."""

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

import tritonplug

BLOCKS = (32, 64, 128)


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=1) for b in BLOCKS], key=["n"])
@triton.jit
def tagged_copy_kernel(x_ptr, n, out_ptr, block_ptr, BLOCK: tl.constexpr):
    """Copies x and writes its BLOCK to ``block_ptr[0]``: the output tells which configuration ran."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
    if pid == 0:
        tl.store(block_ptr, BLOCK)


def tagged_copy(x: jax.Array, **options) -> tuple[jax.Array, jax.Array]:
    return tritonplug.triton_call(
        x, x.size, kernel=tagged_copy_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((1,), jnp.int32)),
        grid=lambda meta: (triton.cdiv(x.size, meta["BLOCK"]),), **options)


#: Run in a fresh process: prints the BLOCK the CPU lowering used and the process's compile stats.
FRESH_PROCESS = """
import json, sys
sys.path.insert(0, {tests!r})
import jax, jax.numpy as jnp, tritonplug
from tuning_kernels import tagged_copy
out, block = jax.jit(tagged_copy)(jnp.arange(1000, dtype=jnp.float32))
assert (out == jnp.arange(1000, dtype=jnp.float32)).all()
print(json.dumps({{"block": int(block[0]), "stats": tritonplug.compile_stats()}}))
"""
