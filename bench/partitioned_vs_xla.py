"""Weak scaling of a partitioned RMSNorm beside XLA's own (``jnp``) RMSNorm: 1 device against all of them.

    python bench/partitioned_vs_xla.py

The same per-device rows on one device and on every device (rows split), 20 calls in a row waited for once,
median of 30 rounds, per call. Shows whether a gap in ``partitioned_scaling.py`` is the partitioned launcher's
or the runtime's dispatch of one short program to several devices (XLA's own op pays it too).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import sharding_kernels as sk  # noqa: E402

n = len(jax.devices())
mesh = jax.make_mesh((n,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
rng = np.random.default_rng(0)
def pip(f, *a):
    jax.block_until_ready(f(*a))
    ts = []
    for _ in range(30):
        t = time.perf_counter()
        for _ in range(19):
            f(*a)
        jax.block_until_ready(f(*a))
        ts.append((time.perf_counter() - t) / 20 * 1e6)
    return statistics.median(ts)


w = jnp.asarray(rng.standard_normal(4096), jnp.bfloat16)
for rows in (8192, 32768):
    x1 = jax.device_put(jnp.asarray(rng.standard_normal((rows, 4096)), jnp.bfloat16), jax.devices()[0])
    xn = jax.device_put(jnp.asarray(rng.standard_normal((rows * n, 4096)), jnp.bfloat16),
                        NamedSharding(mesh, P("x")))
    wn = jax.device_put(w, NamedSharding(mesh, P()))
    for name, fn in [("tritonplug rms_norm", lambda a, b: sk.rms_norm(a, b)[0]),
                     ("jnp rms_norm (XLA)", sk.rms_norm_reference)]:
        f1, fn_ = jax.jit(fn), jax.jit(fn)
        a, b = pip(f1, x1, jax.device_put(w, jax.devices()[0])), pip(fn_, xn, wn)
        print(f"{name:22s} rows/dev {rows:6d}: 1 dev {a:8.1f} us  {n} dev {b:8.1f} us  ratio {b/a:.3f}")
