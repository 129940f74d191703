"""Partitioned launchers on every device this process sees: kernel × layout cases, printed as one JSON report.

Run in a child process (``tests/test_partitioned.py``: 8 CPU devices through ``XLA_FLAGS``) or directly on a
GPU machine (``python tests/sharding_suite.py shardy``: its GPUs). The argument picks the partitioner
(``shardy`` or ``gspmd``). Each case runs the partitioned function in a sharded jit and records: whether it
matches the ``jnp`` reference and the same function on one device, the collectives in the compiled program
(``tritonplug.inspection.collectives``) and the results' shardings.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tritonplug
from tritonplug import inspection
from tritonplug.process.state import state

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import sharding_kernels as sk  # noqa: E402

REPORT: dict = {}
DECISIONS: list = []  # every case's partitioning decisions (inspection.partitions()), in order


def _spec(sharding) -> list:
    return [list(e) if isinstance(e, tuple) else e for e in getattr(sharding, "spec", ())]


def run(name, fn, args, reference, specs, mesh, tol=1e-5, **jit_kwargs):
    """Run ``fn(*args)`` on one device and sharded by ``specs`` (None: left where it is) over ``mesh``."""
    entry: dict = {}
    try:
        whole = jax.jit(fn)(*args)
        state.partitions.clear()
        placed = [a if s is None else jax.device_put(a, NamedSharding(mesh, s))
                  for a, s in zip(args, specs, strict=True)]
        jitted = jax.jit(fn, **jit_kwargs)
        start = time.perf_counter()
        out = jitted(*placed)
        jax.block_until_ready(out)
        entry["seconds"] = round(time.perf_counter() - start, 3)
        text = jitted.lower(*placed).compile().as_text()
        expect = jax.jit(reference)(*args)  # one compile, where eager jnp compiles each primitive on its own
        got, want, one = (jax.tree.leaves(t) for t in (out, expect, whole))
        entry["correct"] = all(np.allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=tol, atol=tol)
                               for g, w in zip(got, want, strict=True))
        entry["same_as_one_device"] = all(np.allclose(np.asarray(g, np.float32), np.asarray(o, np.float32),
                                                      rtol=tol, atol=tol) for g, o in zip(got, one, strict=True))
        entry["collectives"] = sorted({c["op"] for c in inspection.collectives(text)})
        entry["out_specs"] = [_spec(g.sharding) for g in got]
        entry["transfers"] = sorted({(t.operand, t.factors, t.bytes_per_device) for r in inspection.partitions()
                                     for t in r.transfers})
        entry["decisions"] = [[[f, list(axes)] for f, axes in r.factors] for r in inspection.partitions()]
        DECISIONS.extend({"function": r.function, "path": r.path, "factors": [list(f) for f in r.factors],
                          "transfers": [t.operand for t in r.transfers]} for r in inspection.partitions())
        entry["ok"] = True
    except Exception as exc:  # reported per case; the test names the case that failed
        entry = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    REPORT[name] = entry


def refusal(name, thunk):
    try:
        thunk()
        REPORT[name] = {"ok": True}
    except Exception as exc:
        REPORT[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def main(mode: str) -> None:
    """``mode``: ``shardy`` or ``gspmd`` (automatic mesh axes, that partitioner), ``explicit`` (explicit axes)."""
    jax.config.update("jax_use_shardy_partitioner", mode != "gspmd")
    devices = jax.devices()
    n = len(devices)
    REPORT["devices"], REPORT["platform"], REPORT["mode"] = n, devices[0].platform, mode
    kind = jax.sharding.AxisType.Explicit if mode == "explicit" else jax.sharding.AxisType.Auto
    line = jax.make_mesh((n,), ("x",), axis_types=(kind,))
    grid = jax.make_mesh((n // 2, 2), ("x", "y"), axis_types=(kind, kind))
    rng = np.random.default_rng(0)

    def rand(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    # elementwise
    x, y = rand(8 * n, 48), rand(8 * n, 48)
    add = lambda a, b: a + b  # noqa: E731
    run("add_flat/x", sk.add_flat, (x.ravel(), y.ravel()), add, (P("x"), P("x")), line)
    run("add_rows/rows", sk.add_rows, (x, y), add, (P("x"), P("x")), line)
    run("add_rows/cols", sk.add_rows, (x[:, :16 * 2], y[:, :16 * 2]), add, (P(None, "y"), P(None, "y")), grid)
    run("add_rows/2d_mesh", sk.add_rows, (x, y), add, (P("x", "y"), P("x", "y")), grid)
    run("add_rows/both_axes_on_rows", sk.add_rows, (x, y), add, (P(("x", "y")), P(("x", "y"))), grid)
    run("add_rows/operands_disagree", sk.add_rows, (x, y), add, (P("x"), P(None, "x")), line)
    run("add_rows/one_sharded_one_local", sk.add_rows, (x, y), add, (P("x"), None), line)
    # both split the rows, over different axes: the first operand decides (each way round), XLA moves the other
    run("add_rows/rows_split_differently_x_first", sk.add_rows, (x, y), add, (P("x"), P("y")), grid)
    run("add_rows/rows_split_differently_y_first", sk.add_rows, (x, y), add, (P("y"), P("x")), grid)
    run("add_rows/keyword_operands", lambda a, b: sk.add_rows(y=b, x=a), (x, y), add, (P("x"), P("x")), line)
    run("add_rows/out_shardings_flow_back", sk.add_rows, (x, y), add, (None, None), line,
        out_shardings=NamedSharding(line, P("x")))
    if mode != "explicit":  # under explicit axes a result's sharding is its type's: reshard moves it after
        run("add_rows/constraint_flows_back", lambda a, b: jax.lax.with_sharding_constraint(
            sk.add_rows(a, b), NamedSharding(grid, P("x", "y"))), (x, y), add, (None, None), grid)
    run("add_rows/uneven_rows_gathered", sk.add_rows, (x[:8 * n - 1], y[:8 * n - 1]), add, (None, None), line,
        out_shardings=NamedSharding(line, P(None, "x")))
    # row-wise norms: rows split, the normalised axis whole
    w = rand(48)
    norm_ref = lambda a, b: (sk.rms_norm_reference(a, b), 1 / jnp.sqrt(jnp.mean(a * a, -1) + 1e-6))  # noqa: E731
    run("rms_norm/rows", sk.rms_norm, (x, w), norm_ref, (P("x"), None), line)
    run("rms_norm/normalised_axis_gathered", sk.rms_norm, (x, w), norm_ref, (P(None, "x"), P("x")), line)
    x3 = rand(n, 4, 48)
    run("rms_norm/3d_batch_and_seq", sk.rms_norm, (x3, w), norm_ref, (P("x", "y"), None), grid)
    run("rms_norm/bf16", sk.rms_norm, (x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)), norm_ref,
        (P("x"), None), line, tol=3e-2)
    # a reduction factor: a row shard's column sums are partial and get added
    run("column_sum/rows_reduced", sk.column_sum, (x,), lambda a: a.sum(0), (P("x"),), line, tol=1e-4)
    run("column_sum/cols", sk.column_sum, (x[:, :32],), lambda a: a.sum(0), (P(None, "y"),), grid, tol=1e-4)
    # RoPE and attention: batch and heads split
    q = rand(n, 4, 8, 16)
    ang = rand(8, 8)
    cos, sin = np.cos(ang), np.sin(ang)
    run("rope/batch", sk.rope, (q, cos, sin), sk.rope_reference, (P("x"), None, None), line)
    run("rope/heads", sk.rope, (q, cos, sin), sk.rope_reference, (P(None, "y"), None, None), grid)
    run("rope/batch_and_heads", sk.rope, (q, cos, sin), sk.rope_reference, (P("x", "y"), None, None), grid)
    qa, ka, va = (rand(2, n, 32, 16) for _ in range(3))
    from fused_attention import reference as attention_reference
    # tl.dot rounds fp32 operands to TF32 on the GPU (Triton's default), hence the attention cases' tolerance
    run("attention/heads", sk.attention, (qa, ka, va), attention_reference, (P(None, "x"),) * 3, line, tol=1e-2)
    run("attention/batch_heads_causal", lambda a, b, c: sk.attention(a, b, c, causal=True), (qa, ka, va),
        lambda a, b, c: attention_reference(a, b, c, True), (P("y", "x"),) * 3, grid, tol=1e-2)
    # forward and backward under custom_vjp, each partitioned; jax.grad through a sharded jit
    loss = lambda f: (lambda a, b: jnp.sum(f(a, b) ** 2))  # noqa: E731
    run("grad_rms_norm/rows", jax.grad(loss(sk.rms_norm_vjp), argnums=(0, 1)), (x, w),
        jax.grad(loss(sk.rms_norm_reference), argnums=(0, 1)), (P("x"), None), line, tol=1e-3)
    run("grad_rms_norm/2d_mesh_3d", jax.grad(loss(sk.rms_norm_vjp), argnums=(0, 1)), (x3, w),
        jax.grad(loss(sk.rms_norm_reference), argnums=(0, 1)), (P("x", "y"), None), grid, tol=1e-3)
    # transformations
    xb, yb = rand(n, 8 * n, 16), rand(n, 8 * n, 16)
    run("vmap/add_rows_batch_split", jax.vmap(sk.add_rows), (xb, yb), add, (P("x"), P("x")), line)
    run("vmap/add_rows_rows_split", jax.vmap(sk.add_rows), (xb, yb), add, (P(None, "x"), P(None, "x")), line)
    run("vmap/one_operand_batched", jax.vmap(sk.rms_norm, in_axes=(0, None)), (xb, w[:16]),
        lambda a, b: (sk.rms_norm_reference(a, b), 1 / jnp.sqrt(jnp.mean(a * a, -1) + 1e-6)),
        (P(None, "x"), None), line)
    ws = rand(3, 48)

    def layers(a, stack):
        def step(h, wl):
            return jax.checkpoint(lambda hh: sk.rms_norm_vjp(hh, wl) * 1.5)(h), None
        return jax.lax.scan(step, a, stack)[0]

    def layers_ref(a, stack):
        for wl in stack:
            a = sk.rms_norm_reference(a, wl) * 1.5
        return a
    run("scan_checkpoint/rows", layers, (x, ws), layers_ref, (P("x"), None), line, tol=1e-4)
    run("grad_scan_checkpoint/rows", jax.grad(lambda a, s: jnp.sum(layers(a, s)), argnums=(0, 1)), (x, ws),
        jax.grad(lambda a, s: jnp.sum(layers_ref(a, s)), argnums=(0, 1)), (P("x"), None), line, tol=1e-3)
    run("donation/add_rows", sk.add_rows, (x, y), add, (P("x"), P("x")), line, donate_argnums=(0,))
    # clear refusals
    xs = jax.device_put(x, NamedSharding(line, P("x")))
    refusal("refuse/unpartitioned", lambda: jax.jit(sk.add_rows.fn)(xs, xs))
    refusal("refuse/arity", lambda: tritonplug.partitioned("r c -> r c")(sk.add_rows.fn)(x, y))
    refusal("refuse/rank", lambda: tritonplug.partitioned("r c, c -> r c")(sk.add_rows.fn)(x, y))
    refusal("refuse/two_sizes", lambda: tritonplug.partitioned("r c, r c -> r c")(sk.add_rows.fn)(x, y[:, :32]))
    refusal("refuse/unknown_factor", lambda: tritonplug.partitioned("r c, r c -> r c", need_replication=("d",)))
    mixed = jax.make_mesh((n // 2, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,
                                                               jax.sharding.AxisType.Auto))

    def on_mixed_mesh():
        with jax.set_mesh(mixed):
            return jax.jit(sk.add_rows)(jax.device_put(x, NamedSharding(mixed, P("x"))), y)
    refusal("refuse/mixed_axis_types", on_mixed_mesh)
    REPORT["partitions"] = DECISIONS[-8:]


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "shardy")
    print("REPORT " + json.dumps(REPORT))
