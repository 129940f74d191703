"""One "host" of a fleet: lowers an autotuned Triton kernel for sm_90 (no GPU needed) and prints, as the last line
of stdout, a JSON object with its compile counters and the tritonplug warnings it saw.

Usage: python fleet_child.py CONFIGS SALT [--twice-with-pause FILE]
``CONFIGS`` autotune configurations of a small add kernel; ``SALT`` goes into the kernel's source, so each test
has keys of its own. With ``--twice-with-pause FILE`` it lowers, writes FILE, waits until FILE is deleted, then
lowers a second kernel (for killing the server mid-run). With ``FLEET_COORDINATOR=host:port``, ``FLEET_PROCESSES``
and ``FLEET_RANK`` set, it first joins a ``jax.distributed`` job; with ``FLEET_RANK_0_FIRST=1`` too, rank 0 lowers
first and waits (at most 60 s) until it has published ``CONFIGS`` entries, and the other ranks lower after that; with
``FLEET_PLANT=FILE`` (a JSON object of store key → hex bytes), rank 0 first puts those values in the coordination
service (forged entries).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TRITONPLUG_CUDA_ARCH", "90")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import triton  # noqa: E402

import tritonplug  # noqa: E402

SOURCE = '''
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    salt = {salt}
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask) * salt, mask=mask)
'''


def make_kernel(configs: int, salt: int):
    """A kernel defined in a file of its own (Triton needs the source), autotuned over ``configs`` block sizes."""
    path = os.path.join(tempfile.mkdtemp(prefix="tritonplug-kernel-"), f"kernel_{salt}.py")
    with open(path, "w") as f:
        f.write(SOURCE.format(salt=salt))
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"kernel_{salt}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    blocks = [64 * 2 ** i for i in range(configs)]
    return triton.autotune([triton.Config({"BLOCK": b}, num_warps=4) for b in blocks], key=["n"])(module.add_kernel)


def lower(kernel) -> None:
    def add(x, y):
        return tritonplug.triton_call(x, y, x.size, kernel=kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                      grid=lambda meta: (triton.cdiv(x.size, meta["BLOCK"]),))

    spec = jax.ShapeDtypeStruct((4096,), jnp.float32)
    jax.jit(add).trace(spec, spec).lower(lowering_platforms=("cuda",))


def rank_0_done(configs: int) -> None:
    """Rank 0: wait until this process has published ``configs`` entries (in the background), then say so."""
    from tritonplug.adapters import jax_compat

    deadline = time.monotonic() + 60
    while tritonplug.compile_stats()["remote_published"] < configs and time.monotonic() < deadline:
        time.sleep(0.05)
    jax_compat.distributed_runtime().client.key_value_set("fleet-test/rank-0-done", "1")


def plant(path: str) -> None:
    from tritonplug.adapters import jax_compat
    from tritonplug.cache.jax_coordination import NAMESPACE

    with open(path) as f:
        values = json.load(f)
    for name, data in values.items():
        jax_compat.distributed_runtime().client.key_value_set_bytes(NAMESPACE + name, bytes.fromhex(data),
                                                                     allow_overwrite=True)


def wait_for_rank_0() -> None:
    from tritonplug.adapters import jax_compat

    jax.devices()  # the backend starts with every process of the job at once: before waiting, not after
    jax_compat.distributed_runtime().client.blocking_key_value_get("fleet-test/rank-0-done", 120_000)


def main() -> None:
    configs, salt = int(sys.argv[1]), int(sys.argv[2])
    pause = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--twice-with-pause" else None
    if os.environ.get("FLEET_COORDINATOR"):
        jax.distributed.initialize(os.environ["FLEET_COORDINATOR"], int(os.environ["FLEET_PROCESSES"]),
                                   int(os.environ["FLEET_RANK"]), initialization_timeout=60)
    ordered = bool(os.environ.get("FLEET_RANK_0_FIRST")) and os.environ.get("FLEET_RANK", "0") != "0"
    if ordered:
        wait_for_rank_0()
    elif os.environ.get("FLEET_PLANT"):
        plant(os.environ["FLEET_PLANT"])
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lower(make_kernel(configs, salt))
        if os.environ.get("FLEET_RANK_0_FIRST") and not ordered:
            rank_0_done(configs)
        if pause:
            open(pause, "w").close()
            while os.path.exists(pause):
                time.sleep(0.05)
            lower(make_kernel(configs, salt + 1))
    seen = [str(w.message) for w in caught if "tritonplug" in str(w.message)]
    print(json.dumps({"stats": tritonplug.compile_stats(), "warnings": seen, "seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
