"""Which programs of the grid compute equal values: a partition of the programs per SSA value.

In parallel mode every program runs the same TTIR on the same (unchanging) buffers, so a value
is the same in two programs whenever everything it is computed from is: its operands, and for
``tt.get_program_id`` the program id itself. This module keeps, for each value, a *label* per
program (an int64 array over the flattened grid; equal labels: provably equal values). Labels
are seeded from :mod:`.lanes`, which knows integer values per program exactly (``pid // 8``
puts programs 0 and 1 in one class, where a structural rule could not), and combined
structurally everywhere else. Loads are pure here (a function of pointer, mask and other),
atomics are not.

The use: a ``tt.dot`` whose operands take few distinct values over the grid (each A tile of a
matmul is loaded by every program of its row of tiles) is computed as one GEMM of the distinct
tiles (:mod:`.gemm`). A label that is unknown is the finest partition (every program its own class).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

#: Ops whose results may differ between programs with equal operands.
IMPURE = frozenset({"tt.atomic_rmw", "tt.atomic_cas"})
#: Grids larger than this are not analysed (the analysis sorts a label array per value).
MAX_PROGRAMS = 1 << 14
#: Rounds of refining a loop's iter_arg labels before giving up on the loop (then nothing is shared).
ROUNDS = 4


def _canonical(labels: np.ndarray) -> np.ndarray:
    return np.unique(labels, return_inverse=True)[1].reshape(-1).astype(np.int64)


def count(labels: np.ndarray) -> int:
    """How many classes ``labels`` has."""
    return int(labels.max()) + 1 if labels.size else 0


class Labels:
    """Labels of the values seen so far, and of every ``tt.dot``'s two operands."""

    def __init__(self, programs: int, enabled: bool = True) -> None:
        self.programs = programs
        self.enabled = enabled and 1 < programs <= MAX_PROGRAMS   # disabled: every call is a no-op
        self.of: dict[str, np.ndarray] = {}
        self.dots: dict[object, tuple[np.ndarray, np.ndarray]] = {}   # tt.dot op → its operands' labels
        self.sound = True       # False once a loop's labels did not settle: no label may be trusted

    def unknown(self) -> np.ndarray:
        return np.arange(self.programs, dtype=np.int64)

    def get(self, name: str) -> np.ndarray:
        return self.of.get(name, self.unknown())

    def combine(self, parts: Iterable[np.ndarray]) -> np.ndarray:
        """The coarsest partition finer than every one of ``parts`` (all programs alike if none)."""
        rows, finest = [], None
        for p in parts:
            top = count(p)
            if top == self.programs:
                finest = p
            elif top > 1:
                rows.append(p)
        if finest is not None:
            return finest
        if len(rows) <= 1:
            return rows[0] if rows else np.zeros(self.programs, np.int64)
        return _canonical(np.unique(np.stack(rows, axis=1), axis=0, return_inverse=True)[1])

    def of_value(self, value: np.ndarray) -> np.ndarray:
        """Labels of a per-program integer (0-d: the same in every program)."""
        return _canonical(np.broadcast_to(np.asarray(value, np.int64), (self.programs,)))

    def set_uniform(self, names: Iterable[str]) -> None:
        for name in names if self.enabled else ():
            self.of[name] = np.zeros(self.programs, np.int64)

    def set_unknown(self, names: Iterable[str]) -> None:
        for name in names if self.enabled else ():
            self.of[name] = self.unknown()

    def after(self, op, value: np.ndarray | None, origin: str | None) -> None:
        """Label ``op``'s results: from ``value`` (its exact per-program integer base, relative to the
        loop value ``origin`` if given) when known, else from its operands."""
        if not self.enabled:
            return
        if op.regions or op.name in IMPURE:
            self.set_unknown(op.results)
            return
        if value is not None and len(op.results) == 1:
            parts = [self.of_value(value)] + ([self.get(origin)] if origin is not None else [])
            self.of[op.results[0]] = self.combine(parts)
        else:
            label = self.combine(self.get(n) for n in op.operands)
            for name in op.results:
                self.of[name] = label
        if op.name == "tt.dot" and len(op.operands) >= 2:
            self.dots[op] = (self.get(op.operands[0]), self.get(op.operands[1]))

    def refine(self, pairs: Iterable[tuple[str, str | None]]) -> bool:
        """Refine each loop value's labels by those of what the loop body yields for it; True if any changed."""
        changed = False
        if not self.enabled:
            return changed
        for name, yielded in pairs:
            old = self.get(name)
            new = self.combine([old, self.get(yielded) if yielded is not None else self.unknown()])
            if count(new) > count(old):
                self.of[name] = new
                changed = True
        return changed
