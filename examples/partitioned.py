"""A Triton RMSNorm in a data-parallel × tensor-parallel jit: ``tritonplug.partitioned``, no shard_map.

Runs on every visible GPU, or on 8 CPU devices when run on a machine without a GPU (``XLA_FLAGS`` is set below
before JAX starts). The norm runs per shard of the batch; the matmul after it is XLA's own, split over the
model axis. Checked against ``jnp``; prints the result's sharding and the collectives in the compiled program.
"""

from __future__ import annotations

import math
import os
import shutil

if shutil.which("nvidia-smi") is None:  # no GPU: 8 CPU devices, which JAX only makes if told before it starts
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tritonplug


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@tritonplug.partitioned("... d, d -> ... d", need_replication=("d",))
def rms_norm(x: jax.Array, w: jax.Array, eps: float = 1e-6) -> jax.Array:
    """Normalise over the last axis (kept whole); the leading axes may be split, and then ``rows`` below is the
    shard's."""
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    y = tritonplug.triton_call(x.reshape(rows, d), w, n_cols=d, eps=eps, kernel=rms_norm_kernel,
                               out_type=jax.ShapeDtypeStruct((rows, d), x.dtype), grid=(rows,),
                               BLOCK=triton.next_power_of_2(d))
    return y.reshape(x.shape)


def block(x: jax.Array, w: jax.Array, h: jax.Array) -> jax.Array:
    return jnp.einsum("bsd,df->bsf", rms_norm(x, w), h)


def reference(x: jax.Array, w: jax.Array, h: jax.Array) -> jax.Array:
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w
    return jnp.einsum("bsd,df->bsf", y, h)


def main() -> None:
    n = jax.device_count()
    model = 2 if n % 2 == 0 and n > 1 else 1
    mesh = jax.make_mesh((n // model, model), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    rng = np.random.default_rng(0)
    x = jax.device_put(rng.standard_normal((2 * n, 64, 256), np.float32), NamedSharding(mesh, P("data")))
    w = jax.device_put(rng.standard_normal(256).astype(np.float32), NamedSharding(mesh, P()))
    h = jax.device_put(rng.standard_normal((256, 128), np.float32), NamedSharding(mesh, P(None, "model")))
    jitted = jax.jit(block)
    out = jitted(x, w, h)
    np.testing.assert_allclose(np.asarray(out), np.asarray(jax.jit(reference)(x, w, h)), rtol=2e-2, atol=2e-2)
    collectives = tritonplug.inspection.collectives(jitted.lower(x, w, h).compile().as_text())
    print(f"{n} {jax.devices()[0].platform} devices, mesh {dict(mesh.shape)}: result split {out.sharding.spec}, "
          f"matches jnp; collectives in the program: {sorted({c['op'] for c in collectives}) or 'none'}")


if __name__ == "__main__":
    main()
