"""Model and training sizes, by name (``--config``)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Config:
    """One model and its batch. ``dtype`` is the compute dtype (params are kept in fp32 as master weights)."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    seq: int
    batch: int
    tied: bool = False
    rope_theta: float = 10000.0
    eps: float = 1e-5
    dtype: str = "bfloat16"
    lr: float = 3e-3
    warmup: int = 10
    #: ``full``: each layer recomputed in the backward (``jax.checkpoint``); ``dots``: its matmuls kept; ``none``
    remat: str = "full"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def compute_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    def params(self) -> int:
        """The number of parameters."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        layer = attn + 3 * self.hidden * self.ffn + 2 * self.hidden
        return self.layers * layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    def replace(self, **changes) -> Config:
        return dataclasses.replace(self, **changes)


CONFIGS = {
    # seconds on a CPU: the op choices compared step by step
    "tiny": Config(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, seq=32, batch=2, dtype="float32"),
    "tiny-bf16": Config(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, seq=32, batch=2),
    # a GPU: a few hundred million parameters
    "small": Config(vocab=32768, hidden=1024, layers=8, heads=8, kv_heads=4, ffn=2816, seq=2048, batch=8, lr=5e-4),
    # issue 29's shape: hidden 2048, 16 layers, seq 4096, vocab 128k (Llama 3's tokenizer)
    "1b": Config(vocab=128256, hidden=2048, layers=16, heads=16, kv_heads=8, ffn=5632, seq=4096, batch=4, lr=3e-4),
}
