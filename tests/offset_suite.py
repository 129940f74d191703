"""``tritonplug.shard_offset`` on every device this process sees: kernels that take a global index, partitioned
along it (``offset_kernels.py``), printed as one JSON report.

Run in a child process by ``tests/test_partitioned_offsets.py`` (8 CPU devices through ``XLA_FLAGS``); the
argument picks the partitioner (``shardy``, ``gspmd``) or explicit axes (``explicit``). Each case is
``sharding_suite.run``'s (the result against a ``jnp`` reference and the same function on one device, the
collectives, the results' shardings, the gathers), plus the factors the call split and over which mesh axes.
"""

from __future__ import annotations

import json
import sys

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from tritonplug import inspection

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import offset_kernels as ok  # noqa: E402
import sharding_suite as ss  # noqa: E402


def case(name, fn, args, reference, specs, mesh, tol=1e-5):
    ss.run(name, fn, args, reference, specs, mesh, tol=tol)
    if ss.REPORT[name].get("ok"):
        split = {(f, tuple(axes)) for r in inspection.partitions() for f, axes in r.factors}
        ss.REPORT[name]["factors"] = sorted([f, list(axes)] for f, axes in split)


def main(mode: str) -> None:
    jax.config.update("jax_use_shardy_partitioner", mode != "gspmd")
    devices = jax.devices()
    n = len(devices)
    ss.REPORT["devices"], ss.REPORT["mode"] = n, mode
    kind = jax.sharding.AxisType.Explicit if mode == "explicit" else jax.sharding.AxisType.Auto

    def line(k):
        return jax.make_mesh((k,), ("x",), axis_types=(kind,), devices=devices[:k])
    grid = jax.make_mesh((n // 2, 2), ("x", "y"), axis_types=(kind, kind))
    rng = np.random.default_rng(0)

    # positions: offset + local index along n, on 2, 4 and 8 devices and over two mesh axes in either order
    x = np.zeros((4, 64), np.float32)
    for k in sorted({k for k in (2, 4, n) if k <= n}):  # 2, 4, 8 on 8 CPU devices; what a GPU machine has
        case(f"positions/{k}_devices", ok.positions, (x,), ok.positions_reference, (P(None, "x"),), line(k))
    case("positions/two_axes_xy", ok.positions, (x,), ok.positions_reference, (P(None, ("x", "y")),), grid)
    case("positions/two_axes_yx", ok.positions, (x,), ok.positions_reference, (P(None, ("y", "x")),), grid)
    case("positions/rows_x_cols_y", ok.positions, (x,), ok.positions_reference, (P("x", "y"),), grid)
    case("positions/rows_y_cols_x", ok.positions, (x,), ok.positions_reference, (P("y", "x"),), grid)
    case("positions/kept_whole", ok.positions_kept_whole, (x,), ok.positions_reference, (P(None, "x"),), line(n))
    case("positions/vmap", jax.vmap(ok.positions), (np.zeros((3, 4, 64), np.float32),),
         jax.vmap(ok.positions_reference), (P(None, None, "x"),), line(n))

    # vocabulary-parallel cross entropy: logits split along the vocabulary, targets global
    logits = rng.standard_normal((16, 512)).astype(np.float32) * 3
    target = rng.integers(0, 512, 16).astype(np.int32)
    for name, specs, mesh in (("vocab", (P(None, "x"), None), line(n)),
                              ("rows_x_vocab_y", (P("x", "y"), P("x")), grid),
                              ("vocab_two_axes", (P(None, ("x", "y")), None), grid)):
        case(f"cross_entropy/{name}", ok.vocab_parallel_cross_entropy, (logits, target), ok.cross_entropy_reference,
             specs, mesh, tol=1e-5)

    # RoPE with the sequence split: positions = offset + local index
    q = rng.standard_normal((2, 64, 4, 16)).astype(np.float32)
    for name, spec, mesh in (("seq", P(None, "x"), line(n)), ("batch_y_seq_x", P("y", "x"), grid),
                             ("seq_two_axes", P(None, ("x", "y")), grid)):
        case(f"rope/{name}", ok.rope_positions, (q,), ok.rope_reference, (spec,), mesh, tol=1e-4)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "shardy")
    print("REPORT " + json.dumps(ss.REPORT))
