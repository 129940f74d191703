"""MoE model sizes, by name (``--config``): the Llama example's decoder with a Mixture-of-Experts MLP."""

from __future__ import annotations

import dataclasses

from examples.llama.config import Config


@dataclasses.dataclass(frozen=True)
class MoEConfig(Config):
    """A :class:`~examples.llama.config.Config` whose MLP is ``experts`` SwiGLU experts of width ``expert_ffn``,
    each token routed to ``top_k`` of them (``ffn`` is unused).

    ``capacity_factor`` sizes the ``jax-dense`` choice's per-expert buffers (GShard): an expert takes at most
    ``capacity_factor * tokens * top_k / experts`` tokens and drops the rest; ``experts / top_k`` never drops.
    ``dispatch_group``: tokens per GShard group (its one-hot tensors grow with the square of a group's tokens).
    ``aux_loss`` weighs the load-balancing loss (Switch Transformer's ``experts * sum(fraction * probability)``).
    """

    experts: int = 8
    top_k: int = 2
    expert_ffn: int = 128
    capacity_factor: float = 1.25
    dispatch_group: int = 1024
    aux_loss: float = 0.01

    def params(self) -> int:
        """The Llama model's without its dense MLP, plus each layer's router and experts."""
        experts = 3 * self.hidden * self.expert_ffn * self.experts + self.hidden * self.experts
        return Config.params(self.replace(ffn=0)) + self.layers * experts

    def active_params(self) -> int:
        """Parameters a token passes through (its ``top_k`` experts of ``experts``)."""
        expert = 3 * self.hidden * self.expert_ffn
        return self.params() - self.layers * expert * (self.experts - self.top_k)


_TINY = dict(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, ffn=0, seq=32, batch=2, experts=8, top_k=2,
             expert_ffn=64, capacity_factor=4.0)

CONFIGS = {
    # seconds on a CPU: the op choices compared step by step (capacity never drops a token, so all agree)
    "tiny": MoEConfig(**_TINY, dtype="float32"),
    "tiny-bf16": MoEConfig(**_TINY),
    # a GPU: Qwen3-30B-A3B's expert shape (hidden 2048, 128 experts of 768, top-8), 64 experts, 4 layers
    "qwen3-64e": MoEConfig(vocab=32768, hidden=2048, layers=4, heads=32, kv_heads=4, ffn=0, seq=2048, batch=8,
                           experts=64, top_k=8, expert_ffn=768, lr=3e-4),
    "qwen3-128e": MoEConfig(vocab=32768, hidden=2048, layers=4, heads=32, kv_heads=4, ffn=0, seq=2048, batch=8,
                            experts=128, top_k=8, expert_ffn=768, lr=3e-4),
    # Mixtral 8x7B's expert shape (hidden 4096, 8 experts of 14336, top-2), 2 layers
    "mixtral-8e": MoEConfig(vocab=32000, hidden=4096, layers=2, heads=32, kv_heads=8, ffn=0, seq=2048, batch=4,
                            experts=8, top_k=2, expert_ffn=14336, lr=3e-4),
}
