"""Per-launch cost against the size of the kernel call's opaque payload, on a CUDA GPU.

jaxlib looks a kernel call up by its whole opaque payload (a zlib-compressed proto) on every launch, so the
payload's size is part of every launch's cost. This measures, for the add kernel of examples/add.py on 1024
float32 elements:

* ``jit``: per-call time inside one jitted program of ``--calls`` chained calls (one XLA executable);
* ``eager``: per-call time of an eager call (the memoised fast path, an XLA executable per call);

for the payload tritonplug sends now (``lean``: no TTIR, on jaxlib 0.11+ a cubin tag instead of the PTX), the
payload it sent before (``full``: PTX + TTIR + cubin) and the lean payload padded with incompressible
``serialized_metadata`` of 4 KiB to 256 KiB, which isolates the size effect.

Usage: python bench/launch_payload.py [--calls N] [--reps N] [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import Results, format_table, load_example, summarize, write_json  # noqa: E402

import tritonplug  # noqa: E402
from tritonplug.adapters import jaxlib_compat  # noqa: E402
from tritonplug.inspection import unescape_mlir_string  # noqa: E402
from tritonplug.lowering import payload as launch_payload

PAYLOAD = re.compile(r'custom_call @triton_kernel_call_ffi\(.*?opaque = "((?:[^"\\]|\\.)+)"')
N = 1024


def full_payload(kernels, debug):
    """What tritonplug sent before payloads were lean: every field the plugin filled in."""
    if jaxlib_compat.accepts_module_image():
        return list(kernels)
    return [dataclasses.replace(k, module_image=None) for k in kernels]


def add_call(metadata: bytes):
    add_kernel = load_example("add").add_kernel

    def add(x):
        return tritonplug.triton_call(x, x, N, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct((N,), jnp.float32),
                                      grid=(1,), BLOCK=N, serialized_metadata=metadata)
    return add


def measure(results: Results, variant: str, metadata: bytes, calls: int, reps: int) -> None:
    add = add_call(metadata)

    def chain(x):
        for _ in range(calls):
            x = add(x)
        return x

    x = jnp.ones(N, jnp.float32)
    text = jax.jit(add).lower(x).as_text()
    opaque = len(unescape_mlir_string(PAYLOAD.search(text).group(1)))
    jitted = jax.jit(chain)
    jax.block_until_ready(jitted(x))
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(jitted(x))
        samples.append((time.perf_counter() - start) / calls)
    results.add("jit", variant, opaque_bytes=opaque, **summarize(samples))
    jax.block_until_ready(add(x))
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        y = x
        for _ in range(200):
            y = add(x)
        jax.block_until_ready(y)
        samples.append((time.perf_counter() - start) / 200)
    results.add("eager", variant, opaque_bytes=opaque, **summarize(samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "launch-payload.json"))
    args = parser.parse_args()
    results = Results()
    if jax.default_backend() not in ("gpu", "cuda"):
        results.skip("jit", "lean", "no CUDA device is visible: this benchmark measures jaxlib's GPU runtime")
    else:
        variants = [("lean", b""), *((f"lean + {k} KiB", os.urandom(k << 10)) for k in (4, 16, 64, 256))]
        for name, metadata in variants:
            with results.guard("jit", name):
                measure(results, name, metadata, args.calls, args.reps)
        lean = launch_payload.lean_gpu_kernels
        launch_payload.lean_gpu_kernels = full_payload
        try:
            jax.clear_caches()
            with results.guard("jit", "full (before)"):
                measure(results, "full (before)", b"", args.calls, args.reps)
        finally:
            launch_payload.lean_gpu_kernels = lean
        results.add_ratios("lean", "vs_lean")
    print(format_table(results.records, ["bench", "impl", "opaque_bytes", "median_us", "min_us", "vs_lean"]))
    print(f"wrote {write_json(args.out, results.records, calls=args.calls, reps=args.reps)}")


if __name__ == "__main__":
    main()
