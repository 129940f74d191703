"""Synthetic text that a model can learn: a fixed random Markov chain over the vocabulary.

Each token is followed by one of ``branching`` successors drawn once per vocabulary (seeded), so the best
possible loss is about ``ln(branching)`` while a fresh model starts near ``ln(vocab)``: a curve that falls.
"""

from __future__ import annotations

import numpy as np


class MarkovText:
    def __init__(self, vocab: int, seed: int = 0, branching: int = 4):
        rng = np.random.default_rng(seed)
        self.successors = rng.integers(0, vocab, size=(vocab, branching), dtype=np.int64)
        self.vocab = vocab
        self.rng = np.random.default_rng(seed + 1)

    def batch(self, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)``, each ``(batch, seq)`` int32: targets are the inputs shifted by one."""
        tokens = np.empty((batch, seq + 1), np.int64)
        tokens[:, 0] = self.rng.integers(0, self.vocab, size=batch)
        choice = self.rng.integers(0, self.successors.shape[1], size=(batch, seq))
        for t in range(seq):
            tokens[:, t + 1] = self.successors[tokens[:, t], choice[:, t]]
        return tokens[:, :-1].astype(np.int32), tokens[:, 1:].astype(np.int32)
