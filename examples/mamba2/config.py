"""Mamba-2 model sizes, by name (``--config``): the Llama example's config with a Mamba-2 mixer in each layer."""

from __future__ import annotations

import dataclasses

from examples.llama.config import Config


@dataclasses.dataclass(frozen=True)
class Mamba2Config(Config):
    """A :class:`~examples.llama.config.Config` whose layers are Mamba-2 blocks: ``heads`` SSD heads of
    ``expand * hidden / heads`` channels, a state of ``state`` per head, ``B``/``C`` shared by ``heads / groups``
    heads, the SSD in chunks of ``chunk`` steps, a causal depthwise convolution of width ``conv_width``. The initial
    step sizes ``dt`` are drawn log-uniform in ``[dt_min, dt_max]`` (Mamba-2's defaults). ``kv_heads``, ``ffn``
    and ``rope_theta`` are unused (no attention, no MLP)."""

    expand: int = 2
    state: int = 128
    groups: int = 1
    chunk: int = 256
    conv_width: int = 4
    dt_min: float = 0.001
    dt_max: float = 0.1
    #: documents packed in each row, of this mean length (0: one per row): each begins with ``data.BOS``, and the
    #: mixers restart there (``seq_idx`` from the BOS tokens)
    documents: int = 0

    def __post_init__(self):
        if self.inner % self.heads:
            raise ValueError(f"config: heads={self.heads} must divide expand * hidden = {self.inner}")
        if self.heads % self.groups:
            raise ValueError(f"config: groups={self.groups} must divide heads={self.heads}")
        if self.inner % self.groups:
            raise ValueError(f"config: groups={self.groups} must divide expand * hidden = {self.inner}")

    @property
    def inner(self) -> int:
        """The SSD's channels, ``heads * head_dim``."""
        return self.expand * self.hidden

    @property
    def head_dim(self) -> int:
        return self.inner // self.heads

    @property
    def conv_channels(self) -> int:
        """The convolution's channels: ``x``, ``B`` and ``C``."""
        return self.inner + 2 * self.groups * self.state

    @property
    def in_features(self) -> int:
        """The in-projection's outputs: ``z``, ``x``, ``B``, ``C`` and ``dt``."""
        return self.inner + self.conv_channels + self.heads

    def params(self) -> int:
        layer = (self.hidden * self.in_features + (self.conv_width + 1) * self.conv_channels + 3 * self.heads
                 + self.inner + self.inner * self.hidden + self.hidden)
        return self.layers * layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden


_TINY = dict(vocab=256, hidden=32, layers=2, heads=4, kv_heads=4, ffn=0, seq=40, batch=2, state=16, groups=2,
             chunk=16)

CONFIGS = {
    # seconds on a CPU: the op choices compared step by step (seq 40: the last of three chunks is partial)
    "tiny": Mamba2Config(**_TINY, dtype="float32"),
    "tiny-bf16": Mamba2Config(**_TINY),
    # a GPU: Mamba-2 1.3B's layer shape (d_model 2048, 64 heads of 64, state 128, chunk 256), 4 of its 48 layers
    "1.3b-4l": Mamba2Config(vocab=32768, hidden=2048, layers=4, heads=64, kv_heads=64, ffn=0, seq=8192, batch=2,
                            lr=3e-4),
}
