"""Compound factors ``(a b)`` in rules on every device this process sees, printed as one JSON report.

Run in one child process by ``tests/test_partitioned_compound.py`` (8 CPU devices through ``XLA_FLAGS``): each
case runs under Shardy, GSPMD and explicit axes in turn (``sharding_suite.run``: the result against NumPy and
the same function on one device, the compiled program's collectives, the factors split). Two kernels:

* ``grouped_scale``: grouped heads, as grouped-query attention has them: q's heads are ``(k g)``, ``k`` kv heads
  of ``g`` q heads each; q head ``h`` reads kv head ``h // g``, whose softmax over ``d`` (kept whole) scales it.
  Splitting ``k`` hands each device its kv heads and their q heads, with no reshape and no collective.
* ``merge_heads``: ``b s h d -> b s (h d)``: heads flattened into the result's last dimension, doubled.
* ``global_heads``: each q head's global index, from ``shard_offset`` of ``k`` and of ``g`` (each in its own
  factor's units: q head ``(k0 + i) * G + g0 + j`` for the shard's kv head ``i`` and group member ``j``).
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl
from jax.sharding import PartitionSpec as P

import tritonplug
from tritonplug import inspection

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import sharding_suite as ss  # noqa: E402


@triton.jit
def grouped_scale_kernel(q_ptr, kv_ptr, out_ptr, heads, kv_heads, D: tl.constexpr):
    row = tl.program_id(0)  # one (batch, q head) row
    head = row % heads
    kv_row = (row // heads) * kv_heads + head // (heads // kv_heads)
    cols = tl.arange(0, D)
    kv = tl.load(kv_ptr + kv_row * D + cols)
    w = tl.exp(kv - tl.max(kv, axis=0))
    tl.store(out_ptr + row * D + cols, tl.load(q_ptr + row * D + cols) * w / tl.sum(w, axis=0))


@tritonplug.partitioned("b (k g) d, b k d -> b (k g) d", need_replication=("d",))
def grouped_scale(q, kv):
    batch, heads, d = q.shape  # the shard's: its kv heads' q heads
    return tritonplug.triton_call(q, kv, heads=heads, kv_heads=kv.shape[1], kernel=grouped_scale_kernel,
                                  out_type=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=(batch * heads,), D=d)


def grouped_scale_reference(q, kv):
    return q * jnp.repeat(jax.nn.softmax(kv, -1), q.shape[1] // kv.shape[1], axis=1)


@triton.jit
def merge_heads_kernel(x_ptr, out_ptr, D: tl.constexpr):
    row = tl.program_id(0)  # one (batch, position, head) row: x's and the result's memory orders agree
    cols = tl.arange(0, D)
    tl.store(out_ptr + row * D + cols, 2 * tl.load(x_ptr + row * D + cols))


@tritonplug.partitioned("b s h d -> b s (h d)")
def merge_heads(x):
    batch, seq, heads, d = x.shape
    return tritonplug.triton_call(x, kernel=merge_heads_kernel, grid=(batch * seq * heads,), D=d,
                                  out_type=jax.ShapeDtypeStruct((batch, seq, heads * d), x.dtype))


def merge_heads_reference(x):
    return 2 * x.reshape(*x.shape[:2], -1)


@triton.jit
def global_heads_kernel(k_offset_ptr, g_offset_ptr, out_ptr, heads, local_group, group, D: tl.constexpr):
    row = tl.program_id(0)  # one (batch, local q head) row
    head = row % heads
    index = (tl.load(k_offset_ptr) + head // local_group) * group + tl.load(g_offset_ptr) + head % local_group
    tl.store(out_ptr + row * D + tl.arange(0, D), index + tl.zeros((D,), tl.int32))


@tritonplug.partitioned("b (k g) d, b k d -> b (k g) d")
def global_heads(q, kv, group):
    batch, heads, d = q.shape
    return tritonplug.triton_call(tritonplug.shard_offset("k"), tritonplug.shard_offset("g"), heads=heads,
                                  local_group=heads // kv.shape[1], group=group, kernel=global_heads_kernel,
                                  out_type=jax.ShapeDtypeStruct(q.shape, jnp.int32), grid=(batch * heads,), D=d)


def global_heads_reference(q, kv):
    return jnp.broadcast_to(jnp.arange(q.shape[1], dtype=jnp.int32)[None, :, None], q.shape)


def case(name, fn, args, reference, specs, mesh):
    ss.run(name, fn, args, reference, specs, mesh)
    if ss.REPORT[name].get("ok"):
        split = {(f, tuple(axes)) for r in inspection.partitions() for f, axes in r.factors}
        ss.REPORT[name]["factors"] = sorted([f, list(axes)] for f, axes in split)


def main(mode: str) -> None:
    jax.config.update("jax_use_shardy_partitioner", mode != "gspmd")
    kind = jax.sharding.AxisType.Explicit if mode == "explicit" else jax.sharding.AxisType.Auto
    n = len(jax.devices())  # 8 CPU devices in the tests; the GPUs there are on a GPU machine
    line = jax.make_mesh((n,), ("x",), axis_types=(kind,))
    grid = jax.make_mesh((n // 2, 2), ("x", "y"), axis_types=(kind, kind))
    pair = jax.make_mesh((2, n // 2), ("x", "y"), axis_types=(kind, kind))
    rng = np.random.default_rng(0)
    q, kv = rng.standard_normal((2, 16, 32), np.float32), rng.standard_normal((2, 8, 32), np.float32)
    case(f"{mode}/grouped/heads", grouped_scale, (q, kv), grouped_scale_reference, (P(None, "x"), None), line)
    case(f"{mode}/grouped/batch_y_heads_x", grouped_scale, (q, kv), grouped_scale_reference,
         (P("y", "x"), P("y")), grid)
    # k = 2 over x is one kv head per device; the rest of the heads' axes, y, splits each group g
    q2, kv2 = rng.standard_normal((2, 8, 32), np.float32), rng.standard_normal((2, 2, 32), np.float32)
    case(f"{mode}/grouped/k_and_g", grouped_scale, (q2, kv2), grouped_scale_reference,
         (P(None, ("x", "y")), None), pair)
    for name, (qs, kvs), specs, mesh in (("heads", (q, kv), (P(None, "x"), None), line),
                                         ("k_and_g", (q2, kv2), (P(None, ("x", "y")), None), pair)):
        group = qs.shape[1] // kvs.shape[1]
        case(f"{mode}/global_heads/{name}", lambda a, b, g=group: global_heads(a, b, g), (qs, kvs),
             global_heads_reference, specs, mesh)
    x = rng.standard_normal((2, 8, 8, 16), np.float32)
    case(f"{mode}/merge/heads", merge_heads, (x,), merge_heads_reference, (P(None, None, "x"),), line)
    case(f"{mode}/merge/seq_x_heads_y", merge_heads, (x,), merge_heads_reference, (P(None, "x", "y"),), grid)
    # d split alone would give each device a strided part of (h d): the call takes d whole (x gathered)
    case(f"{mode}/merge/minor_gathered", merge_heads, (x,), merge_heads_reference, (P(None, None, None, "x"),),
         line)


if __name__ == "__main__":
    for each in ("shardy", "gspmd", "explicit"):
        main(each)
    ss.REPORT["devices"], ss.REPORT["mode"] = len(jax.devices()), "all"
    print("REPORT " + json.dumps(ss.REPORT))
