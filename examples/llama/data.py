"""Synthetic text that a model can learn: a fixed random Markov chain over part of the vocabulary.

The chain visits ``active`` tokens (at most 2048, drawn once, seeded), each followed by one of ``branching``
successors among them, so a fresh model starts near ``ln(vocab)``, learns within a few dozen steps that only
the active tokens occur (``ln(active)``) and then their successors (towards ``ln(branching)``): a curve that
falls at any vocabulary size, while the logits still span the whole vocabulary.
"""

from __future__ import annotations

import numpy as np


class MarkovText:
    def __init__(self, vocab: int, seed: int = 0, branching: int = 4, active: int = 2048):
        rng = np.random.default_rng(seed)
        self.tokens = rng.choice(vocab, size=min(vocab, active), replace=False)
        self.successors = rng.integers(0, len(self.tokens), size=(len(self.tokens), branching), dtype=np.int64)
        self.rng = np.random.default_rng(seed + 1)

    def batch(self, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)``, each ``(batch, seq)`` int32: targets are the inputs shifted by one."""
        states = np.empty((batch, seq + 1), np.int64)
        states[:, 0] = self.rng.integers(0, len(self.tokens), size=batch)
        choice = self.rng.integers(0, self.successors.shape[1], size=(batch, seq))
        for t in range(seq):
            states[:, t + 1] = self.successors[states[:, t], choice[:, t]]
        tokens = self.tokens[states].astype(np.int32)
        return tokens[:, :-1], tokens[:, 1:]
