"""A function of several blocks (``cf.br``/``cf.cond_br``) as one block of structured ops.

Triton prints an early ``return`` inside an ``if`` (Liger's cross entropy, attention kernels that
skip an empty tile) as a conditional branch to blocks that each end in ``tt.return``. When the
blocks form no loop, each branch is the chain of blocks it reaches: ``cf.cond_br`` becomes an op
with two regions (run as ``scf.if``: ``lax.cond``, or both sides masked under ``vmap``) and ``cf.br``
an op that binds the target block's arguments. A block two branches reach is copied into both, so
the copies are bounded: a graph that would grow past :data:`MAX_COPIES` times its size is refused.
"""

from __future__ import annotations

import itertools

from tritonplug_interpret.xla.ir import Block, Op
from tritonplug_interpret.xla.syntax import TtirSyntaxError

#: How many times its size a function's blocks may grow when merged blocks are copied into each branch.
MAX_COPIES = 4
_fresh = itertools.count()


def structured(name: str, blocks: list[Block], n_results: int) -> Block:
    """One block equivalent to the function body ``blocks`` (the entry block first)."""
    by_label = {b.label: b for b in blocks[1:]}
    budget = [MAX_COPIES * sum(len(b.ops) for b in blocks) + 64]

    def goto(successor: tuple[str, tuple[str, ...]], path: tuple[str, ...]) -> list[Op]:
        label, values = successor
        target = by_label.get(label)
        if target is None:
            raise TtirSyntaxError(f"function {name}: branch to an unknown block {label}")
        if label in path:
            raise TtirSyntaxError(f"function {name}: its blocks form a loop (through {label})")
        if len(values) != len(target.args):
            raise TtirSyntaxError(f"function {name}: {label} takes {len(target.args)} arguments, got {len(values)}")
        bind = [Op("cf.br", [n for n, _ in target.args], "", list(values), {}, "")] if values else []
        return bind + emit(target, path + (label,))

    def emit(block: Block, path: tuple[str, ...]) -> list[Op]:
        budget[0] -= len(block.ops)
        if budget[0] < 0:
            raise TtirSyntaxError(f"function {name}: its blocks merge too often to be copied into each branch")
        *body, last = block.ops or [Op("tt.return", [], "", [], {}, "")]
        if last.name == "cf.br":
            if len(last.successors) != 1:
                raise TtirSyntaxError(f"function {name}: cannot read the branch {last.header!r}")
            return body + goto(last.successors[0], path)
        if last.name != "cf.cond_br":
            return [*body, last]
        if len(last.successors) != 2 or not last.words[0].startswith("%"):
            raise TtirSyntaxError(f"function {name}: cannot read the branch {last.header!r}")
        cond = last.words[0]
        results = [f"%cfg{next(_fresh)}.{i}" for i in range(n_results)]
        branch = Op("cf.cond_br", results, cond, [cond], {}, "",
                    [[Block([], goto(t, path))] for t in last.successors])
        tail = [Op("tt.return", [], " ".join(results), results, {}, "")]
        return [*body, branch, *tail]

    return Block(list(blocks[0].args), emit(blocks[0], (blocks[0].label or "^bb0",)))
