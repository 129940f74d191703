"""A Mamba-2 language model in the Llama example's family: its embeddings, final RMSNorm, output projection,
next-token loss, layer rematerialisation and trainer (``examples/llama``, reused, not copied), with a Mamba-2
mixer (``block.py``) in place of attention and the MLP: each layer is ``x + mixer(RMSNorm(x))``, stacked and run
by ``jax.lax.scan`` over a ``jax.checkpoint``-ed layer, fp32 master weights cast to the compute dtype per step."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from examples.llama import model as llama
from examples.llama.data import BOS
from examples.llama.ops import Ops
from examples.llama.step import PARAM_SPECS as LLAMA_SPECS

from . import block
from .config import Mamba2Config

CHOICES = block.CHOICES

#: On a mesh the batch is split over ``data`` and every weight replicated (data parallel).
PARAM_SPECS = {**{k: LLAMA_SPECS[k] for k in ("embed", "lm_head", "final_norm")},
               **{k: P(*(None,) * (3 if k in ("w_in", "conv_w", "w_out") else 2))
                  for k in ("mixer_norm", "w_in", "conv_w", "conv_b", "dt_bias", "A_log", "D", "gate_norm",
                            "w_out")}}


@dataclasses.dataclass(frozen=True)
class Mamba2Ops:
    """One model's op choice: the SSD's (``jax`` or ``tritonplug``, :data:`block.SSD`) and the Llama ops' for the
    RMSNorms and the loss (XLA's by default: the SSD choice is what is compared)."""

    ssd: str
    dense: Ops = dataclasses.field(default_factory=lambda: Ops.of("jax"))

    def __post_init__(self):
        if self.ssd not in CHOICES:
            raise ValueError(f"--ops: {self.ssd!r}; expected one of {CHOICES} or 'compare'")

    @property
    def choice(self) -> dict[str, str]:
        return {"ssd": self.ssd, **self.dense.choice}

    def label(self) -> str:
        dense = self.dense.label()
        return self.ssd if dense == "jax" else f"{self.ssd}+{dense}"


def init(cfg: Mamba2Config, key: jax.Array) -> dict:
    """The Llama model's embeddings, final norm and output projection; Mamba-2 mixers for its layers."""
    outer_key, key = jax.random.split(key)
    params = llama.init(cfg.replace(layers=1, ffn=0), outer_key)  # one throwaway attention layer, replaced
    params["layers"] = block.init_layers(cfg, key)
    return params


def hidden_states(params: dict, tokens: jax.Array, cfg: Mamba2Config, ops: Mamba2Ops, constrain=None) -> jax.Array:
    """The final normalised hidden states, ``(batch, seq, hidden)`` in the compute dtype; with ``cfg.documents``
    each document (from a ``BOS`` token on) mixed as if alone."""
    constrain = constrain or (lambda x: x)
    dt = cfg.compute_dtype
    ssd, rms_norm = block.SSD[ops.ssd], ops.dense.rms_norm
    x = constrain(params["embed"].astype(dt)[tokens])
    seq_idx = jnp.cumsum(tokens == BOS, axis=1, dtype=jnp.int32) if cfg.documents else None  # packed documents

    def layer(x, p):
        p = {k: v if k in block.FP32_PARAMS else v.astype(dt) for k, v in p.items()}
        mixed = block.mixer(rms_norm(x, p["mixer_norm"], cfg.eps), p, cfg, ssd, rms_norm, seq_idx=seq_idx)
        return constrain(x + mixed), None

    x, _ = jax.lax.scan(llama.remat(layer, cfg), x, params["layers"])
    return rms_norm(x, params["final_norm"].astype(dt), cfg.eps)


def loss(params: dict, tokens: jax.Array, targets: jax.Array, cfg: Mamba2Config, ops: Mamba2Ops,
         constrain=None) -> jax.Array:
    """Mean next-token cross entropy (fp32) of ``tokens`` → ``targets``, both ``(batch, seq)`` int32."""
    h = hidden_states(params, tokens, cfg, ops, constrain)
    head = params["embed"] if cfg.tied else params["lm_head"]
    return ops.dense.loss(h.reshape(-1, cfg.hidden), head.astype(jnp.dtype(cfg.compute_dtype)), targets.reshape(-1))
