"""``tt.call`` of a ``tt.func private`` (a ``@triton.jit(noinline=True)`` helper) inlined into its caller.

Triton's inliner leaves ``noinline`` helpers as private functions. Here each call site gets a copy of the
callee's (structured, see :mod:`.cfg`) body with its SSA names prefixed, so every analysis and handler sees
one function: a ``cf.br`` op binds the callee's arguments to the call's operands, and the callee's final
``tt.return`` becomes a ``cf.br`` op binding the call's results.
"""

from __future__ import annotations

import itertools

from tritonplug_interpret.xla.program import Unsupported
from tritonplug_interpret.xla.ttir import Block, Function, Op, prefixed

#: Calls nested deeper than this are refused (Triton has no recursion; this bounds a pathological module).
MAX_DEPTH = 16


def inline_calls(fn: Function) -> Function:
    """``fn`` with every ``tt.call`` replaced by the callee's body."""
    counter = itertools.count()
    return Function(fn.name, fn.args, _block(fn.body, counter, 0), fn.public, fn.n_results)


def _block(block: Block, counter, depth: int) -> Block:
    ops: list[Op] = []
    for op in block.ops:
        if op.name == "tt.call":
            ops += _expand(op, counter, depth)
        elif op.regions:
            ops.append(Op(op.name, op.results, op.header, op.operands, op.attrs, op.type_text,
                          [[_block(b, counter, depth) for b in region] for region in op.regions]))
        else:
            ops.append(op)
    return Block(block.args, ops, block.label)


def _expand(call: Op, counter, depth: int) -> list[Op]:
    callee = call.callee
    if callee is None:
        raise Unsupported("tt.call", f"cannot resolve {call.header!r}")
    if depth >= MAX_DEPTH:
        raise Unsupported("tt.call", f"calls nested deeper than {MAX_DEPTH}")
    prefix = f"inl{next(counter)}."
    rename = _renamer(prefix)
    body = _block(_copy(callee.body, rename), counter, depth + 1)
    args = [rename(name) for name, _ in callee.args]
    if len(args) != len(call.operands):
        raise Unsupported("tt.call", f"{callee.name} takes {len(args)} arguments, the call passes {len(call.operands)}")
    ops = [Op("cf.br", args, "", list(call.operands), {}, "")] if args else []
    *inner, last = body.ops or [Op("tt.return", [], "", [], {}, "")]
    if last.name != "tt.return" or len(last.operands) != len(call.results):
        raise Unsupported("tt.call", f"{callee.name} returns {len(last.operands)} values for {len(call.results)}")
    ops += inner
    if call.results:
        ops.append(Op("cf.br", list(call.results), "", list(last.operands), {}, ""))
    return ops


def _renamer(prefix: str):
    def rename(text: str) -> str:
        return prefixed(text, prefix)
    return rename


def _copy(block: Block, rename) -> Block:
    ops = [Op(op.name, [rename(r) for r in op.results], rename(op.header), [rename(o) for o in op.operands],
              dict(op.attrs), op.type_text, [[_copy(b, rename) for b in region] for region in op.regions],
              op.callee)
           for op in block.ops]
    return Block([(rename(n), t) for n, t in block.args], ops, block.label)
