"""The MoE example (``examples/moe``): each MoE choice's layer against the ``jax`` (``ragged_dot``) choice in value
and gradient, and ``train.py --ops compare`` giving three loss curves that agree.

Needs vLLM (``tox -e corpus`` installs it with ``--no-deps``: no torch); skipped where it is not installed.
"""

from __future__ import annotations

import importlib.machinery

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(importlib.machinery.PathFinder.find_spec("vllm") is None,
                                reason="vllm is not installed (tox -e corpus installs it)")


def _layer_inputs(dtype, experts=8, top_k=2, tokens=40, hidden=32, ffn=16):
    import jax

    from examples.moe.config import MoEConfig

    cfg = MoEConfig(vocab=1, hidden=hidden, layers=1, heads=1, kv_heads=1, ffn=0, seq=1, batch=1, experts=experts,
                    top_k=top_k, expert_ffn=ffn, capacity_factor=experts / top_k, dispatch_group=tokens)
    keys = jax.random.split(jax.random.key(3), 5)
    h = jax.random.normal(keys[0], (2, tokens // 2, hidden), dtype)
    p = {"router": jax.random.normal(keys[1], (hidden, experts), dtype),
         "w_gate_up": (jax.random.normal(keys[2], (experts, hidden, 2 * ffn)) / hidden ** 0.5).astype(dtype),
         "w_down": (jax.random.normal(keys[3], (experts, ffn, hidden)) / ffn ** 0.5).astype(dtype)}
    cot = jax.random.normal(keys[4], h.shape, dtype)
    return cfg, h, p, cot


@pytest.mark.parametrize("dtype, tol", [("float32", 2e-5), ("bfloat16", 3e-2)])
@pytest.mark.parametrize("choice", ["jax-dense", "tritonplug", "tritonplug-ep-ragged"])
def test_each_moe_choice_matches_ragged_dot_in_value_and_gradient(choice, dtype, tol):
    """Each layer choice, and the ragged expert-parallel MLP on one device (its exchange and bookkeeping run
    as on a mesh of one), against ``ragged_dot``'s."""
    import jax
    import jax.numpy as jnp

    from examples.moe.layer import moe_mlp
    from examples.moe.ragged import moe_mlp_ragged

    cfg, h, p, cot = _layer_inputs(jnp.dtype(dtype))

    def mlp(h, p, choice):
        return moe_mlp_ragged(h, p, cfg) if choice == "tritonplug-ep-ragged" else moe_mlp(h, p, cfg, choice)

    def run(h, p, choice):
        (out, aux), vjp = jax.vjp(lambda h, p: mlp(h, p, choice), h, p)
        return out, aux, vjp((cot, jnp.ones_like(aux)))

    got, want = (jax.jit(run, static_argnums=2)(h, p, c) for c in (choice, "jax"))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(b)))))
    assert float(np.max(np.abs(np.asarray(got[0], np.float32)))) > 0  # the layer computed something


def test_the_dense_choice_drops_tokens_past_its_capacity():
    """GShard's dispatch keeps at most ``capacity`` slots per expert: with one expert taking every token, a
    capacity of a quarter of the slots leaves three quarters of the tokens with a zero output."""
    import jax.numpy as jnp

    from examples.moe.layer import experts_jax_dense

    cfg, h, p, _ = _layer_inputs(jnp.float32, experts=4, top_k=1, tokens=16)
    cfg = cfg.replace(capacity_factor=1.0)  # 16 tokens x 1 slot / 4 experts: capacity 4
    flat = h.reshape(-1, cfg.hidden)
    experts = jnp.zeros((16, 1), jnp.int32)
    out = experts_jax_dense(flat, jnp.ones((16, 1)), experts, p, cfg)
    kept = np.abs(np.asarray(out)).sum(axis=1) > 0
    np.testing.assert_array_equal(kept, np.arange(16) < 4)


def test_train_compare_five_choices_agree(tmp_path):
    from examples.moe import train

    report = train.main(["--config", "tiny", "--ops", "compare", "--steps", "3", "--json", str(tmp_path / "r.json")])
    runs = report["runs"]
    assert set(runs) == {"jax", "jax-dense", "tritonplug", "tritonplug-ep", "tritonplug-ep-ragged"}
    for run in runs.values():
        assert len(run["losses"]) == 3 and all(np.isfinite(run["losses"]))
    assert report["max_loss_difference"] < 1e-3
    start = np.log(report["config"]["vocab"])
    assert abs(runs["tritonplug"]["losses"][0] - start) < 0.5  # a fresh model, near ln(vocab)


def test_moe_choice_and_ops_are_checked():
    import jax.numpy as jnp

    from examples.moe.layer import moe_mlp
    from examples.moe.model import MoEOps

    cfg, h, p, _ = _layer_inputs(jnp.float32)
    with pytest.raises(ValueError, match="`choice` must be one of"):
        moe_mlp(h, p, cfg, "xla")
    with pytest.raises(ValueError, match="--ops: 'triton'"):
        MoEOps("triton")


@pytest.mark.parametrize("rows, experts, k", [(64, 8, 2), (33, 64, 8), (5, 128, 8)])
def test_the_routers_top_k_is_lax_top_k_in_value_index_ties_and_gradient(rows, experts, k):
    """``layer.top_k`` (rounds of ``argmax``, which XLA partitions along the rows) against ``jax.lax.top_k``:
    the same values, the same indices where scores tie (the lower index first), the same gradient."""
    import jax
    import jax.numpy as jnp

    from examples.moe.layer import top_k

    x = jax.random.normal(jax.random.key(rows), (rows, experts), jnp.float32)
    x = x.at[0, : k + 1].set(1.0).at[1].set(0.5).at[2, ::2].set(-2.0)  # ties at the top, a whole row, below it
    for got, want in zip(top_k(x, k), jax.lax.top_k(x, k), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    weight = jnp.arange(1, k + 1, dtype=jnp.float32)
    grads = [jax.grad(lambda x, f=f: jnp.sum(f(x, k)[0] * weight))(x) for f in (top_k, jax.lax.top_k)]
    np.testing.assert_array_equal(*map(np.asarray, grads))
