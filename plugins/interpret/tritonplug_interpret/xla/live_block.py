"""A lane-wise kernel's block cut to its live lanes, before anything is traced.

A row narrower than its power-of-two block (SwiGLU's 5632 columns in a block of 8192; RoPE's 12 heads in a block
of 16) is computed, lane for lane, on the whole block: the padded lanes are loaded as ``other``, carried through
every op and masked off at the store. Translated as written, each load is the row padded to the block (a pad and
a select) and each store a slice of it, which XLA keeps between fusions where it does not fuse across them
(XLA:CPU wrote the padded inputs to memory; on the H200 SwiGLU's forward inlined ran 1.10-1.12x XLA's op, cut
1.02-1.04x: docs/benchmarks.md). Where no lane's value can reach another lane, the padded lanes change nothing
that is stored: the kernel computes the same on a block of only the lanes some access may touch.

A lane is known by its index along a dimension of a given size: every ``tt.make_range(0, B)`` numbers lanes
``0 .. B-1`` and lane-wise ops, splats, ``expand_dims`` and broadcasts keep each lane's index along each dimension
of size ``B``. :func:`cut` returns the function with each such size ``B`` cut to ``N < B`` (every ``tensor<…Bx…>``
dimension and every ``tt.make_range(0, B)``), where:

* every op that takes or makes a tensor is lane-wise (:data:`LANE_WISE`: arithmetic, math, splats, pointer
  offsets, ``expand_dims``, broadcasts, loads and stores; no reduction, scan, reshape, permutation, dot, gather or
  atomic), each constant a splat, and every ``tt.make_range`` starts at 0;
* every tensor load and store whose block has a dimension of size ``B`` carries a mask whose live lanes along
  that dimension are below ``N`` in every program (:mod:`.mask_rules`' limits; ``N`` the largest): no lane at or
  past ``N`` along any dimension of size ``B`` touches memory, so cutting them changes no access, checked mode's
  included. A size no access spans, or one some access spans without such a bound, is kept.

Lane ``i < N`` of every value is what it was: its inputs are lanes of the same indices, none of them cut.
"""

from __future__ import annotations

import re

from tritonplug_interpret.xla.lane_rules import access_shape
from tritonplug_interpret.xla.lanes import Found
from tritonplug_interpret.xla.ttir import Block, Function, Op, walk

__all__ = ["LANE_WISE", "cut"]

#: Ops (besides every ``arith.*`` and ``math.*`` op) whose result lane depends on their operands' lanes of the same
#: indices only (a size-1 dimension broadcast), or that take tensors lane by lane (loads, stores).
LANE_WISE = frozenset({
    "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.make_range", "tt.addptr", "tt.load", "tt.store", "tt.bitcast",
    "tt.fp_to_fp", "tt.precise_sqrt", "tt.precise_divf", "tt.mulhiui", "tt.clampf", "tt.extern_elementwise",
    "tt.int_to_ptr", "tt.ptr_to_int",
})
_ACCESSES = ("tt.load", "tt.store")
_TENSOR_DIMS = re.compile(r"tensor<((?:\d+x)+)")


def cut(fn: Function, found: Found) -> Function | None:
    """``fn`` with each block size cut to its live lanes, or None where it is not lane-wise or no size can be."""
    if not _lane_wise(fn):
        return None
    live: dict[int, int] = {}     # size -> the most lanes any access leaves live along a dimension of that size
    kept: set[int] = set()        # sizes some access spans without a bound
    for op in walk(fn.body):
        if op.name in _ACCESSES:  # (a scalar access spans no dimension; a size-1 one is never cut)
            limits = found.limits.get(op)
            for d, size in enumerate(access_shape(op) or ()):
                bound = None if limits is None else limits[d]
                if bound is None:
                    kept.add(size)
                else:
                    live[size] = max(live.get(size, 0), bound)
    cuts = {size: n for size, n in live.items() if size not in kept and 0 < n < size}
    if not cuts:
        return None
    return Function(fn.name, fn.args, _rewritten(fn.body, cuts), fn.public, fn.n_results)


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


def _rewritten(block: Block, cuts: dict[int, int]) -> Block:
    def dims(m: re.Match) -> str:
        return "tensor<" + "".join(f"{cuts.get(int(d), int(d))}x" for d in m.group(1).split("x")[:-1])

    def swap(text: str) -> str:
        return _TENSOR_DIMS.sub(dims, text)

    ops = []
    for op in block.ops:
        attrs = {k: swap(v) for k, v in op.attrs.items()}
        end = op.int_attr("end") if op.name == "tt.make_range" else None
        if end in cuts:
            attrs["end"] = f"{cuts[end]} : i32"
        ops.append(Op(op.name, op.results, swap(op.header), op.operands, attrs, swap(op.type_text),
                      [[_rewritten(b, cuts) for b in region] for region in op.regions], op.callee))
    return Block([(name, swap(t)) for name, t in block.args], ops, block.label)
