"""A lane-wise kernel's block cut to its live lanes, before anything is traced.

A row narrower than its power-of-two block (SwiGLU's 5632 columns in a block of 8192) is computed, lane for
lane, on the whole block: the padded lanes are loaded as ``other``, carried through every op and masked off at
the store. Translated as written, each load is the row padded to the block (a pad and a select) and each store a
slice of it, which XLA keeps between fusions where it does not fuse across them (XLA:CPU wrote the padded inputs
to memory; on the H200 SwiGLU's forward inlined ran 1.10-1.12x XLA's op, cut 1.02-1.04x: docs/benchmarks.md).
Where no lane's value can reach another lane, the padded lanes change nothing that is stored: the kernel computes
the same on a block of only the lanes some access may touch.

:func:`cut` proves that and returns the function on the shorter block, every ``tensor<Bx…>`` type
``tensor<Nx…>`` and every ``tt.make_range(0, B)`` ``(0, N)``; lane ``i < N`` of every value is what it was.
It holds where:

* every tensor of the function is rank 1, of one size ``B`` (the block);
* every op that takes or makes a tensor is lane-wise (:data:`LANE_WISE`: arithmetic, math, splats, pointer
  offsets, loads and stores; no reduction, scan, reshape, dot, gather or atomic), each splat constant a splat;
* every ``tt.make_range`` starts at 0 (lane ``i`` holds ``i`` before and after);
* every tensor load and store carries a mask whose live lanes are below ``N < B`` in every program
  (:mod:`.mask_rules`' limits; ``N`` the largest): no lane at or past ``N`` touches memory, so cutting them
  changes no access, checked mode's included.
"""

from __future__ import annotations

import re

from tritonplug_interpret.xla.lanes import Found
from tritonplug_interpret.xla.ttir import Block, Function, Op, walk

__all__ = ["LANE_WISE", "cut"]

#: Ops (besides every ``arith.*`` and ``math.*`` op) whose result lane ``i`` depends on their operands' lane ``i``
#: only, or that take tensors lane by lane (loads, stores).
LANE_WISE = frozenset({
    "tt.splat", "tt.make_range", "tt.addptr", "tt.load", "tt.store", "tt.bitcast", "tt.fp_to_fp",
    "tt.precise_sqrt", "tt.precise_divf", "tt.mulhiui", "tt.clampf", "tt.extern_elementwise", "tt.int_to_ptr",
    "tt.ptr_to_int",
})
_ACCESSES = ("tt.load", "tt.store")
_TENSOR_DIMS = re.compile(r"tensor<((?:\d+x)+)")


def cut(fn: Function, found: Found) -> Function | None:
    """``fn`` on the block of its live lanes, or None where it is not lane-wise or every lane may be live."""
    block = _block_size(fn)
    if block is None or not _lane_wise(fn):
        return None
    # (a load or store prints its pointer's type: a tensor of pointers where it accesses a block)
    accesses = [op for op in walk(fn.body) if op.name in _ACCESSES and op.type_text.startswith("tensor<")]
    bounds = [limits[0] for op in accesses if (limits := found.limits.get(op)) and limits[0] is not None]
    if not accesses or len(bounds) < len(accesses):
        return None     # an access without a mask that bounds its lanes
    live = max(bounds)
    if not 0 < live < block:
        return None
    return Function(fn.name, fn.args, _rewritten(fn.body, block, live), fn.public, fn.n_results)


def _texts(op: Op) -> list[str]:
    return [op.header, op.type_text, *op.attrs.values(), *op.result_types]


def _block_size(fn: Function) -> int | None:
    """The one size of every tensor in ``fn`` where all are rank 1, else None."""
    sizes: set[int] = set()
    for op in walk(fn.body):
        texts = _texts(op) + [t for region in op.regions for b in region for _, t in b.args]
        for text in texts:
            found = _TENSOR_DIMS.findall(text)
            if any(dims.count("x") != 1 for dims in found):
                return None     # a tensor of rank 2 or more
            sizes.update(int(dims[:-1]) for dims in found)
    return sizes.pop() if len(sizes) == 1 else None


def _lane_wise(fn: Function) -> bool:
    # (every tensor is typed where it is made, an op's result or a block's argument; an inlined call's ``cf.br``,
    # whose results print no type, binds none: Triton passes a ``noinline`` helper scalars only, and a ``cf.br``
    # taking a tensor is not lane-wise here)
    tensors = {name for op in walk(fn.body) for name, t in zip(op.results, op.result_types, strict=False)
               if t.startswith("tensor<")}
    tensors |= {name for op in walk(fn.body) for region in op.regions for b in region
                for name, t in b.args if t.startswith("tensor<")}
    for op in walk(fn.body):
        if not (tensors.intersection(op.operands) or tensors.intersection(op.results)):
            continue
        if not (op.name.startswith(("arith.", "math.")) or op.name in LANE_WISE):
            return False
        if op.name == "arith.constant" and not _splat_constant(op):
            return False
        if op.name == "tt.make_range" and op.int_attr("start") != 0:
            return False
    return True


def _splat_constant(op: Op) -> bool:
    header = op.header.strip()
    return not header.startswith("dense<") or not header[len("dense<"):].lstrip().startswith(("[", '"'))


def _rewritten(block: Block, size: int, live: int) -> Block:
    old, new = f"tensor<{size}x", f"tensor<{live}x"

    def swap(text: str) -> str:
        return text.replace(old, new)

    ops = []
    for op in block.ops:
        attrs = {k: swap(v) for k, v in op.attrs.items()}
        if op.name == "tt.make_range":
            attrs["end"] = f"{live} : i32"
        ops.append(Op(op.name, op.results, swap(op.header), op.operands, attrs, swap(op.type_text),
                      [[_rewritten(b, size, live) for b in region] for region in op.regions], op.callee))
    return Block([(name, swap(t)) for name, t in block.args], ops, block.label)
