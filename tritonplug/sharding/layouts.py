"""The layouts a bound rule allows on a mesh: each way its shardable factors can be split over disjoint mesh axes.

A partitioned call in a jit over automatic axes is partitioned by XLA after tracing, in a Python callback whose
errors XLA wraps (``INTERNAL: custom_partitioner``). The mesh is known at the call (the operands' types name it),
so the function is traced at the call on every shard's shapes a layout of the rule gives there
(:func:`check_shards`): a mistake that only a shard's shapes reveal is raised then, naming the function and the
shard's shapes. ``tritonplug.check_rule`` runs a call under each layout too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax

from tritonplug.calls.sharding_rules import BoundRule, contiguous

Layout = dict[str, tuple[str, ...]]  # each split factor's mesh axes

#: At most this many distinct sets of shard shapes are traced at a call (the fewest splits first).
MAX_TRACED = 16


def layouts(bound: BoundRule, mesh_shape: Mapping[str, int]) -> Iterator[Layout]:
    """Every layout: each shardable factor whole or split over mesh axes (in the mesh's order) that divide its
    size, no axis used twice, a compound's minor factor split only where the factors before it are in pieces of
    one element. The unsplit layout comes first, then those splitting fewer factors."""
    factors = [f for f in dict.fromkeys(f for g in bound.operands + bound.results for f in g) if bound.shardable(f)]
    axes = [a for a in mesh_shape if mesh_shape[a] > 1]
    choices = []
    for factor in factors:
        subsets = [s for k in range(1, len(axes) + 1) for s in itertools.combinations(axes, k)
                   if bound.sizes[factor] % math.prod(mesh_shape[a] for a in s) == 0]
        choices.append([(), *subsets])
    found = []
    for pick in itertools.product(*choices):
        used = [a for s in pick for a in s]
        if len(used) != len(set(used)):
            continue
        layout = {f: s for f, s in zip(factors, pick, strict=True) if s}
        if contiguous(bound, dict(layout), mesh_shape) == layout:
            found.append(layout)
    yield from sorted(found, key=len)


def shard_shapes(shapes: Sequence[Any], dims: Sequence[Any], layout: Layout,
                 mesh_shape: Mapping[str, int]) -> list[jax.ShapeDtypeStruct]:
    """Each array's shape on one device under ``layout`` (``dims``: the arrays' groups)."""
    def pieces(dim: tuple[str, ...]) -> int:
        return math.prod(mesh_shape[a] for f in dim for a in layout.get(f, ()))
    return [jax.ShapeDtypeStruct(tuple(d // pieces(dim) for d, dim in zip(s.shape, g, strict=True)), s.dtype)
            for s, g in zip(shapes, dims, strict=True)]


def distinct_shard_shapes(bound: BoundRule, shapes: Sequence[Any],
                          mesh_shape: Mapping[str, int]) -> list[tuple[Layout, list[jax.ShapeDtypeStruct]]]:
    """One layout for each distinct set of shard shapes the rule allows on the mesh (the unsplit one left out),
    at most :data:`MAX_TRACED`."""
    seen: set[tuple] = set()
    out = []
    for layout in layouts(bound, mesh_shape):
        local = shard_shapes(shapes, bound.operand_dims, layout, mesh_shape)
        key = tuple(s.shape for s in local)
        if not layout or key in seen:
            continue
        seen.add(key)
        out.append((layout, local))
        if len(out) == MAX_TRACED:
            break
    return out
