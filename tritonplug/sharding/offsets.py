"""``tritonplug.shard_offset``: inside a partitioned function, where this shard starts along a rule factor.

Every device runs the same per-shard program, so the offset is computed from the device's position on the mesh:
``jax.lax.axis_index`` of each mesh axis the factor is split over, major to minor (the order in which XLA lays
out the shards of a dimension split over several axes, ``PartitionSpec(("x", "y"))``), times the shard's size.
This module is the one place that defines it. The partitioned function's body runs under a :class:`Scope` that
says what it may be asked: the rule's factors, and, once XLA has split the call (``paths.auto``'s ``partition``,
``paths.explicit``'s ``shard_map``), each split factor's mesh axes. A body traced with whole arrays (the call's
first trace; the program on one device) gets 0, which is the offset there. Inside the user's own
``jax.shard_map`` the function's arrays are already a shard that the rule knows nothing about: the offset is
refused there (``jax.lax.axis_index`` is the way), never silently 0.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class Scope:
    """What ``shard_offset`` answers inside one run of a partitioned function's body."""

    function: str
    factors: tuple[str, ...]  # the factors the rule names (what shard_offset may be asked)
    sizes: Mapping[str, int] = field(default_factory=dict)  # each factor's whole size
    split: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # each split factor's mesh axes
    mesh: Mapping[str, int] = field(default_factory=dict)  # mesh axis → size
    manual: bool = False  # inside the user's own shard_map: refused


_local = threading.local()


def _stack() -> list[Scope]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def scoped(body: Callable[..., Any], scope: Scope) -> Callable[..., Any]:
    """``body`` run under ``scope``: the ``shard_offset`` calls it makes are answered from it."""
    def run(*arrays: Any) -> Any:
        stack = _stack()
        stack.append(scope)
        try:
            return body(*arrays)
        finally:
            stack.pop()
    return run


def named_factors(groups: Any) -> tuple[str, ...]:
    """The factors a rule names, in order of first use (``...`` and its dimensions left out)."""
    return tuple(dict.fromkeys(f for group in groups for f in group if not f.startswith("...")))


def shard_offset(factor: str) -> jax.Array:
    """This shard's start index along the rule factor ``factor``, as an int32 scalar (a traced 0-d array).

    Called inside a ``@tritonplug.partitioned`` function: the global index of the shard's first element along
    ``factor`` (``shard_offset("v") + local index`` is the global index). 0 on one device, where the rule keeps
    the factor whole and where XLA does not split it. It is a value known when the program runs, not when it is
    traced: pass it to a kernel as an array argument (a pointer the kernel loads: ``tl.load(offset_ptr)``) or
    compute with it in ``jax.numpy``; a grid (Python ints) cannot depend on it. Outside a partitioned function,
    or with a factor the rule does not name, it is refused naming the argument and the rule's factors.
    """
    stack = _stack()
    if not isinstance(factor, str):
        raise TypeError(f"shard_offset: factor is the name of a factor of the partitioned function's rule (a str "
                        f"such as 'v'), got {type(factor).__name__}: {factor!r:.100}")
    if not stack:
        raise ValueError(f"shard_offset(factor={factor!r}) is called outside a partitioned function: it answers "
                         f"only inside a function decorated with @tritonplug.partitioned(rule), where {factor!r} "
                         f"is a factor of the rule (docs/partitioned.md, 'Where a shard starts')")
    scope = stack[-1]
    if factor not in scope.factors:
        raise ValueError(f"shard_offset(factor={factor!r}) in partitioned {scope.function}: the rule names no factor "
                         f"{factor!r}; its factors are {list(scope.factors)}")
    if scope.manual:
        raise ValueError(f"shard_offset(factor={factor!r}) in partitioned {scope.function}: the function runs "
                         f"inside a jax.shard_map, where its arrays are already a shard that the rule does not "
                         f"place; compute the offset there from jax.lax.axis_index of the mesh axes you split")
    axes = scope.split.get(factor, ())
    if not axes:
        return jnp.zeros((), jnp.int32)
    pieces = math.prod(scope.mesh[a] for a in axes)
    index = jnp.zeros((), jnp.int32)
    for axis in axes:  # major to minor, as XLA lays out a dimension split over several mesh axes
        index = index * scope.mesh[axis] + jax.lax.axis_index(axis).astype(jnp.int32)
    return index * jnp.int32(scope.sizes[factor] // pieces)
