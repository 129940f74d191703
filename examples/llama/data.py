"""Synthetic text that a model can learn: a fixed random Markov chain over part of the vocabulary.

The chain visits ``active`` tokens (at most 2048, drawn once, seeded), each followed by one of ``branching``
successors among them, so a fresh model starts near ``ln(vocab)``, learns within a few dozen steps that only
the active tokens occur (``ln(active)``) and then their successors (towards ``ln(branching)``): a curve that
falls at any vocabulary size, while the logits still span the whole vocabulary.
"""

from __future__ import annotations

import numpy as np

#: the token that begins each document of a packed row (``MarkovText(documents=...)``); the chain never emits it
BOS = 0


class MarkovText:
    """``documents`` (a mean length; 0: none) packs documents into each row: each begins with :data:`BOS` and the
    chain starts afresh after it; their lengths are geometric with that mean."""

    def __init__(self, vocab: int, seed: int = 0, branching: int = 4, active: int = 2048, documents: int = 0):
        rng = np.random.default_rng(seed)
        if documents:  # BOS stays out of the chain
            self.tokens = 1 + rng.choice(vocab - 1, size=min(vocab - 1, active), replace=False)
        else:
            self.tokens = rng.choice(vocab, size=min(vocab, active), replace=False)
        self.successors = rng.integers(0, len(self.tokens), size=(len(self.tokens), branching), dtype=np.int64)
        self.rng = np.random.default_rng(seed + 1)
        self.documents = documents

    def batch(self, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)``, each ``(batch, seq)`` int32: targets are the inputs shifted by one."""
        states = np.empty((batch, seq + 1), np.int64)
        states[:, 0] = self.rng.integers(0, len(self.tokens), size=batch)
        choice = self.rng.integers(0, self.successors.shape[1], size=(batch, seq))
        restart = (self.rng.random((batch, seq + 1)) < 1 / self.documents) if self.documents else None
        for t in range(seq):
            states[:, t + 1] = self.successors[states[:, t], choice[:, t]]
            if restart is not None:  # a new document: BOS, then the chain from a fresh token
                states[:, t + 1] = np.where(restart[:, t + 1], self.rng.integers(0, len(self.tokens), size=batch),
                                            states[:, t + 1])
        tokens = self.tokens[states].astype(np.int32)
        if restart is not None:
            tokens[:, 0] = BOS
            tokens[:, 1:][restart[:, 1:]] = BOS
        return tokens[:, :-1], tokens[:, 1:]
