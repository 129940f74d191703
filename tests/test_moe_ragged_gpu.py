"""``examples/moe/ragged.py`` on GPUs: XLA's own ``ragged_all_to_all`` (XLA:CPU has none, so CPU meshes test its
stand-in, ``ragged._exchange_padded``) against that stand-in on the same inputs, and the ragged expert-parallel MLP
on a mesh of the GPUs against the one-device ``jax`` choice (``ragged_dot``), value and every gradient.

Runs where at least two CUDA devices are visible and vLLM's sources import (``.moe-libs`` on ``PYTHONPATH``:
``bench/gpu_payload.py``), e.g. ``pytest -m cuda tests/test_moe_ragged_gpu.py`` on a two-GPU machine."""

from __future__ import annotations

import importlib.machinery

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import gpu_platforms, requires_backend
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from moe_inputs import mlp_arrays

DEVICES = jax.devices("cuda") if "cuda" in gpu_platforms() else []
pytestmark = [pytest.mark.cuda, requires_backend("cuda"),
              pytest.mark.skipif(len(DEVICES) < 2, reason="fewer than two CUDA devices are visible"),
              pytest.mark.skipif(importlib.machinery.PathFinder.find_spec("vllm") is None,
                                 reason="vllm's sources are not importable (bench/gpu_payload.py builds .moe-libs)")]


def _mesh():
    return jax.make_mesh((len(DEVICES),), ("model",), axis_types=(jax.sharding.AxisType.Auto,), devices=DEVICES)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("slices", [1, 2])
def test_xla_ragged_all_to_all_lands_rows_where_the_cpu_stand_in_does(seed, slices):
    from examples.moe import ragged

    mesh, n, rows = _mesh(), len(DEVICES), 24
    rng = np.random.default_rng(seed)
    count = n * slices
    sizes = np.stack([rng.multinomial(rng.integers(0, rows + 1), [1 / count] * count) for _ in range(n)])
    recv = sizes.reshape(n, n, slices).transpose(1, 0, 2).reshape(n, count)
    landing = np.cumsum(recv, axis=1) - recv  # packed by source, then slice
    offsets = landing.reshape(n, n, slices).transpose(1, 0, 2).reshape(n, count)
    operands = rng.standard_normal((n, rows, 3)).astype(np.float32)

    def run(exchange):
        def body(x, s, w, r):
            starts = (jnp.cumsum(s[0]) - s[0]).astype(jnp.int32)
            out = jnp.full((n * rows, 3), -1.0, jnp.float32)
            return exchange(x[0], out, starts, s[0], w[0], r[0], axis_name="model")[None]
        spec = P("model")
        return np.asarray(jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec,) * 4, out_specs=spec,
                                                check_vma=False))(
            operands, *(a.astype(np.int32) for a in (sizes, offsets, recv))))

    real, padded = run(ragged.exchange), run(ragged._exchange_padded)
    np.testing.assert_array_equal(real, padded)
    assert (real != -1.0).sum() == sizes.sum() * 3  # every row sent arrived, nothing else written


def test_the_ragged_mlp_on_the_gpus_matches_ragged_dot_on_one():
    from examples.moe import layer, ragged
    from examples.moe.config import MoEConfig

    n = len(DEVICES)
    t, d, f, e, k = 128 * n, 64, 32, 4 * n, 2
    cfg = MoEConfig(vocab=256, hidden=d, layers=1, heads=2, kv_heads=1, ffn=0, seq=8, batch=t // 8, experts=e,
                    top_k=k, expert_ffn=f, capacity_factor=1.0, dtype="float32")
    h, p, cot = mlp_arrays(t, d, f, e)

    def with_grads(mlp):
        def run(h, p):
            (out, aux), vjp = jax.vjp(mlp, h, p)
            return out, aux, vjp((cot, jnp.ones_like(aux)))
        return jax.jit(run)

    mesh = _mesh()
    specs = {"router": P(), "w_gate_up": P("model"), "w_down": P("model")}
    sharded = (jax.device_put(h, NamedSharding(mesh, P("model"))),
               {name: jax.device_put(v, NamedSharding(mesh, specs[name])) for name, v in p.items()})
    got = with_grads(lambda h, p: ragged.moe_mlp_ragged(h, p, cfg, mesh))(*sharded)
    one = jax.device_put((h, p), DEVICES[0])
    want = with_grads(lambda h, p: layer.moe_mlp(h, p, cfg, "jax"))(*one)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        # TF32 in both (XLA's fp32 dots and tl.dot's default): a misplaced row is off by O(1), not 1e-3
        np.testing.assert_allclose(a, b, rtol=5e-3, atol=5e-3 * max(1.0, float(np.abs(b).max())))
