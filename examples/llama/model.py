"""A Llama-style decoder, written once: RMSNorm, RoPE, grouped-query causal attention, a SwiGLU MLP, a tied
or untied output projection and the next-token loss, each op taken from an ``Ops`` choice.

Layers are stacked (every weight has a leading ``layers`` axis) and run by ``jax.lax.scan`` over a
``jax.checkpoint``-ed layer. Params are fp32 master weights; the loss casts them to the config's compute
dtype (bf16) once per step, so activations and matmuls run in bf16 and the optimizer updates fp32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .config import Config
from .ops import Ops

LAYER_WEIGHTS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "attn_norm", "mlp_norm")


def init(cfg: Config, key: jax.Array) -> dict:
    """fp32 params: normal(0, 0.02) matrices (the residual outputs scaled by ``1/sqrt(2 * layers)``), unit norms."""
    d, hd, L = cfg.hidden, cfg.head_dim, cfg.layers
    keys = iter(jax.random.split(key, 16))

    def normal(shape, scale=0.02):
        return scale * jax.random.normal(next(keys), shape, jnp.float32)

    out_scale = 0.02 / (2 * L) ** 0.5
    params = {
        "embed": normal((cfg.vocab, d)),
        "final_norm": jnp.ones((d,), jnp.float32),
        "layers": {
            "wq": normal((L, d, cfg.heads * hd)),
            "wk": normal((L, d, cfg.kv_heads * hd)),
            "wv": normal((L, d, cfg.kv_heads * hd)),
            "wo": normal((L, cfg.heads * hd, d), out_scale),
            "w_gate": normal((L, d, cfg.ffn)),
            "w_up": normal((L, d, cfg.ffn)),
            "w_down": normal((L, cfg.ffn, d), out_scale),
            "attn_norm": jnp.ones((L, d), jnp.float32),
            "mlp_norm": jnp.ones((L, d), jnp.float32),
        },
    }
    if not cfg.tied:
        params["lm_head"] = normal((cfg.vocab, d))
    return params


def rope_tables(cfg: Config) -> tuple[jax.Array, jax.Array]:
    """``cos``/``sin`` of shape ``(seq, head_dim)``, Hugging Face's layout (the half-dims repeated)."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (jnp.arange(half, dtype=jnp.float32) / half))
    angles = jnp.arange(cfg.seq, dtype=jnp.float32)[:, None] * inv_freq[None]
    angles = jnp.concatenate([angles, angles], axis=-1)
    return jnp.cos(angles), jnp.sin(angles)


def remat(layer, cfg: Config):
    """``layer`` under the config's rematerialisation (``cfg.remat``); ``examples/mamba2`` wraps its layers too."""
    if cfg.remat == "none":
        return layer
    if cfg.remat == "dots":
        return jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    if cfg.remat == "full":
        return jax.checkpoint(layer)
    raise ValueError(f"remat: {cfg.remat!r}; expected 'full', 'dots' or 'none'")


def dense_mlp(h: jax.Array, p: dict, cfg: Config, ops: Ops) -> tuple[jax.Array, jax.Array]:
    """The SwiGLU MLP of a layer, and its auxiliary loss (none: 0). ``examples/moe`` passes a Mixture of Experts
    in its place."""
    return ops.swiglu(h @ p["w_gate"], h @ p["w_up"]) @ p["w_down"], jnp.zeros((), jnp.float32)


def hidden_states(params: dict, tokens: jax.Array, cfg: Config, ops: Ops, constrain=None) -> jax.Array:
    """The final normalised hidden states, ``(batch, seq, hidden)`` in the compute dtype. ``constrain``, when
    given, places each layer's activations (a sharded run's ``with_sharding_constraint``)."""
    return hidden_states_and_aux(params, tokens, cfg, ops, constrain)[0]


def hidden_states_and_aux(params: dict, tokens: jax.Array, cfg: Config, ops: Ops, constrain=None,
                          mlp=dense_mlp) -> tuple[jax.Array, jax.Array]:
    """:func:`hidden_states`, with each layer's MLP ``mlp(h, layer_params, cfg, ops) -> (out, aux)`` and the sum
    of the layers' auxiliary losses."""
    constrain = constrain or (lambda x: x)
    dt = cfg.compute_dtype
    b, t = tokens.shape
    cos, sin = rope_tables(cfg)
    x = constrain(params["embed"].astype(dt)[tokens])

    def layer(x, p):
        p = jax.tree.map(lambda w: w.astype(dt), p)
        h = ops.rms_norm(x, p["attn_norm"], cfg.eps)
        q = (h @ p["wq"]).reshape(b, t, cfg.heads, cfg.head_dim)
        k = (h @ p["wk"]).reshape(b, t, cfg.kv_heads, cfg.head_dim)
        v = (h @ p["wv"]).reshape(b, t, cfg.kv_heads, cfg.head_dim)
        q, k = ops.rope(q, k, cos, sin)
        a = ops.attention(q, k, v).reshape(b, t, cfg.heads * cfg.head_dim)
        x = constrain(x + a @ p["wo"])
        h = ops.rms_norm(x, p["mlp_norm"], cfg.eps)
        out, aux = mlp(h, p, cfg, ops)
        return constrain(x + out), aux

    x, aux = jax.lax.scan(remat(layer, cfg), x, params["layers"])
    return ops.rms_norm(x, params["final_norm"].astype(dt), cfg.eps), jnp.sum(aux)


def loss(params: dict, tokens: jax.Array, targets: jax.Array, cfg: Config, ops: Ops, constrain=None) -> jax.Array:
    """Mean next-token cross entropy (fp32) of ``tokens`` → ``targets``, both ``(batch, seq)`` int32."""
    h = hidden_states(params, tokens, cfg, ops, constrain)
    head = params["embed"] if cfg.tied else params["lm_head"]
    return ops.loss(h.reshape(-1, cfg.hidden), head.astype(cfg.compute_dtype), targets.reshape(-1))
