"""Where one eager ``triton_call`` spends its time: the API side and JAX's dispatch, profiled.

Run on a GPU machine: ``python bench/profile_eager.py``. Prints per-call times and the top
functions by cumulative time; compare with ``jax_triton`` when it imports.
"""

from __future__ import annotations

import cProfile
import importlib.util
import pstats
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import tritonplug
import tritonplug.api

spec = importlib.util.spec_from_file_location("add_example", Path(__file__).parent.parent / "examples" / "add.py")
example = importlib.util.module_from_spec(spec)
sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
spec.loader.exec_module(example)

N = 1024
x = jax.random.normal(jax.random.key(0), (N,), jnp.float32)
y = jax.random.normal(jax.random.key(1), (N,), jnp.float32)
out_shape = jax.ShapeDtypeStruct((N,), jnp.float32)


def ours():
    return tritonplug.triton_call(x, y, N, kernel=example.add_kernel, out_shape=out_shape, grid=(1,), BLOCK=N)


def per_call_us(fn, n=2000):
    for _ in range(20):
        jax.block_until_ready(fn())
    start = time.perf_counter()
    for _ in range(n):
        out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    if "--no-device-lowering" in sys.argv:  # experiment: lower without JAX's device assignment
        from tritonplug.adapters.jax_compat import require_devices_during_lowering
        from tritonplug.lowering.primitive import triton_call_p

        require_devices_during_lowering(triton_call_p, required=False)
    impls = {"tritonplug": ours, "xla": lambda: x + y}
    try:
        import jax_triton

        impls["jax_triton"] = lambda: jax_triton.triton_call(x, y, N, kernel=example.add_kernel, out_shape=out_shape,
                                                             grid=(1,), BLOCK=N)
    except Exception as exc:  # noqa: BLE001 - report and go on
        print("jax_triton unavailable:", exc)
    for name, fn in impls.items():
        print(f"{name:12s} async per call: {per_call_us(fn):8.1f} us")
    bind = tritonplug.api.triton_call_p.bind
    tritonplug.api.triton_call_p.bind = lambda *a, **k: [x]
    print(f"{'api only':12s} per call:       {per_call_us(ours):8.1f} us")
    tritonplug.api.triton_call_p.bind = bind
    for name in [n for n in ("tritonplug", "jax_triton") if n in impls]:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(1000):
            impls[name]()
        profile.disable()
        print(f"--- {name}")
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
