"""The one check of whether a kernel's translation can fuse with its neighbours: its gathers, scatters, while loops.

A translation made of slices, reshapes, selects, elementwise ops and reductions is what XLA fuses into the
surrounding program; a gather, a scatter or a while loop is where fusion stops (and on a GPU each is a kernel of
its own). ``inline="auto"`` inlines only a translation holding none (:func:`translation_ops`); the tests and
``bench/fusion.py`` read the same counts (``tritonplug.inspection.paths``, :func:`unfusible_ops`).

The count is taken on the translation's jaxpr, sub-jaxprs (``cond`` branches, ``scan`` and ``while`` bodies,
``pjit``) included: what the translator emits, before XLA's simplifier (which may turn a gather into a slice, never
the other way round), so a zero here is a zero in the compiled HLO.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax

from tritonplug.records import JaxKernel

#: The ops counted, by the name they are reported under.
UNFUSIBLE = ("gather", "scatter", "while")


def unfusible_ops(fn: Callable[..., Any], *args: Any) -> dict[str, int]:
    """How many gathers, scatters (of any kind: ``scatter-add``...) and while loops ``fn``'s jaxpr at ``args``
    (arrays or ``jax.ShapeDtypeStruct``s) holds, sub-jaxprs included."""
    closed = jax.make_jaxpr(fn)(*args)
    counts = Counter(_kind(name) for name in _primitive_names(closed.jaxpr))
    return {kind: counts.get(kind, 0) for kind in UNFUSIBLE}


def translation_ops(kernel: JaxKernel) -> dict[str, int]:
    """:func:`unfusible_ops` of a translated kernel at its launch's buffer shapes."""
    launch = kernel.launch
    operands = [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in launch.operands]
    results = [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in launch.results]
    return unfusible_ops(lambda ops, res: kernel.fn(list(ops), list(res)), operands, results)


_WORDS = {"gather": ("gather", "gathers"), "scatter": ("scatter", "scatters"),
          "while": ("while loop", "while loops")}


def describe(counts: Mapping[str, int]) -> str:
    """``"2 gathers, 1 while loop"``, or ``""`` when there are none."""
    return ", ".join(f"{n} {_WORDS[kind][n > 1]}" for kind, n in counts.items() if n)


def _kind(name: str) -> str:
    if name == "gather":
        return "gather"
    if name.startswith("scatter"):
        return "scatter"
    if name == "while":
        return "while"
    return ""


def _primitive_names(jaxpr: Any) -> Iterator[str]:
    for eqn in jaxpr.eqns:
        yield eqn.primitive.name
        for value in eqn.params.values():
            for sub in _jaxprs_in(value):
                yield from _primitive_names(sub)


def _jaxprs_in(value: Any) -> Iterator[Any]:
    """The jaxprs a primitive's parameter holds: a jaxpr, a closed one, or a tuple of them (``cond``'s branches)."""
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _jaxprs_in(item)
    elif hasattr(value, "eqns"):
        yield value
    elif hasattr(getattr(value, "jaxpr", None), "eqns"):
        yield value.jaxpr
