"""Misused partitioned launchers on 8 CPU devices, run in a child process (``tests/test_bad_input_sharded.py``):
each case records the error it raised (its type and message) or what it computed, and the child prints one JSON
report. The argument picks a group: ``callbacks`` alone, since XLA:CPU used to crash on them (a segfault would
take every other case down with it), or ``others``.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import triton
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tritonplug

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import sharding_kernels as sk  # noqa: E402

REPORT: dict = {}
X = np.arange(16 * 32, dtype=np.float32).reshape(16, 32) / 100


def case(name: str, fn) -> None:
    try:
        REPORT[name] = {"result": fn()}
    except Exception as exc:  # noqa: BLE001 - the report says what was raised
        REPORT[name] = {"error": type(exc).__name__, "message": str(exc)}


def auto_mesh():
    return jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


@tritonplug.partitioned("r c, r c -> r c")
def printing(a, b):
    jax.debug.print("shard {}", a.shape)
    return sk.add_rows.fn(a, b)


@tritonplug.partitioned("r c, r c -> r c")
def printing_in_a_cond(a, b):
    jax.lax.cond(a.shape[0] > 1, lambda: jax.debug.print("many rows"), lambda: None)
    return sk.add_rows.fn(a, b)


def callbacks() -> None:
    mesh = auto_mesh()
    x = jax.device_put(X, NamedSharding(mesh, P("x")))
    case("debug_print", lambda: np.asarray(jax.jit(printing)(x, x)).tolist())
    case("debug_print_in_a_cond", lambda: np.asarray(jax.jit(printing_in_a_cond)(x, x)).tolist())
    # operands whose types name no mesh, split only by out_shardings: refused when XLA partitions the program
    split_later = jax.jit(lambda a: printing(a, a), out_shardings=NamedSharding(mesh, P("x")))
    case("debug_print_split_by_out_shardings", lambda: np.asarray(split_later(X)).tolist())


@tritonplug.partitioned("r c, r c -> r c")
def wrong_on_a_shard(a, b):
    out = sk.add_rows.fn(a, b)
    return out if a.shape[0] == 16 else out + jnp.ones(3)  # only a shard's shapes reveal the mistake


@tritonplug.partitioned("r d, d -> r d", need_replication=("d",))
def norm_with_its_own_vjp(x, w):
    return sk.rms_norm_vjp(x, w)


def rms_norm_unpartitioned(x, w):
    rows, d = x.shape
    return tritonplug.triton_call(x, w, n_cols=d, eps=1e-6, kernel=sk.rms_norm_kernel,
                                  out_type=(jax.ShapeDtypeStruct((rows, d), x.dtype),
                                            jax.ShapeDtypeStruct((rows,), jnp.float32)),
                                  grid=(rows,), BLOCK=triton.next_power_of_2(d))


def others() -> None:
    mesh = auto_mesh()
    x = jax.device_put(X, NamedSharding(mesh, P("x")))
    w = jax.device_put(X[0], NamedSharding(mesh, P()))
    case("shard_mistake_jit", lambda: jax.jit(wrong_on_a_shard)(x, x).shape)
    case("shard_mistake_eager", lambda: wrong_on_a_shard(x, x).shape)
    # operands whose types name no mesh, split only by out_shardings: found when XLA partitions the program
    split_later = jax.jit(lambda a: wrong_on_a_shard(a, a), out_shardings=NamedSharding(mesh, P("x")))
    case("shard_mistake_split_later", lambda: split_later(X).shape)
    case("grad_auto", lambda: jax.jit(jax.grad(lambda a: jnp.sum(sk.add_rows(a, a))))(x).shape)
    case("jvp_auto", lambda: jax.jit(lambda a: jax.jvp(lambda b: sk.add_rows(b, b), (a,), (a,)))(x)[1].shape)
    case("unpartitioned_reduction", lambda: jax.jit(rms_norm_unpartitioned)(x, w)[0].shape)
    case("unpartitioned_elementwise", lambda: jax.jit(sk.add_rows.fn)(x, x).shape)
    explicit = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    batch = np.arange(8 * 16 * 32, dtype=np.float32).reshape(8, 16, 32) / 1000
    with jax.set_mesh(explicit):
        xb = jax.device_put(batch, NamedSharding(explicit, P("x")))
        case("vmap_explicit_batch_split", lambda: _vmapped(xb, batch))
        xe, we = jax.device_put(X, NamedSharding(explicit, P("x"))), jax.device_put(X[0], NamedSharding(explicit, P()))
        case("grad_explicit_through_the_shard_map", lambda: _grads_agree(xe, we))
        case("shard_mistake_explicit", lambda: jax.jit(wrong_on_a_shard)(xe, xe).shape)


def _vmapped(xb, batch) -> dict:
    out = jax.jit(jax.vmap(sk.add_rows))(xb, xb)
    return {"correct": bool(np.allclose(np.asarray(out), 2 * batch)), "spec": [str(e) for e in out.sharding.spec]}


def _grads_agree(x, w) -> bool:
    sharded = jax.jit(jax.grad(lambda a, b: jnp.sum(norm_with_its_own_vjp(a, b) ** 2), argnums=(0, 1)))(x, w)
    whole = jax.grad(lambda a, b: jnp.sum(sk.rms_norm_vjp(a, b) ** 2), argnums=(0, 1))(X, X[0])
    return all(bool(np.allclose(np.asarray(s), np.asarray(o), rtol=1e-4, atol=1e-4))
               for s, o in zip(sharded, whole, strict=True))


if __name__ == "__main__":
    {"callbacks": callbacks, "others": others}[sys.argv[1]]()
    print("REPORT " + json.dumps(REPORT), flush=True)
