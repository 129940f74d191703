"""Scalar arguments checked against the kernel's annotations (``n: tl.int32``).

Triton compiles an annotated parameter with the annotated type whatever the call passes, so a value
that does not fit (``2**40`` for ``n: tl.int32``) is truncated on a GPU; tritonplug types unannotated
scalars by their value. A value the annotation cannot hold is refused at the call, naming the parameter.
"""

from __future__ import annotations

from typing import Any

from tritonplug.adapters.triton_compat import KernelFacts
from tritonplug.calls.call import BoundArgs, ScalarArg

#: Inclusive integer ranges of Triton's integer types.
_INT_RANGES = {f"i{b}": (-(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in (8, 16, 32, 64)}
_INT_RANGES.update({f"u{b}": (0, 2**b - 1) for b in (8, 16, 32, 64)})
_INT_RANGES["i1"] = _INT_RANGES["u1"] = (0, 1)


def check(facts: KernelFacts, bound: BoundArgs) -> None:
    """Refuse a scalar argument its parameter's annotation cannot hold."""
    annotated = {p.name: p.annotation for p in facts.params if p.annotation and not p.is_constexpr}
    if not annotated:
        return
    for name, node in zip(bound.names, bound.nodes, strict=True):
        annotation = annotated.get(name)
        if annotation is not None and isinstance(node, ScalarArg):
            error, problem = _problem(annotation, node.value)
            if problem:
                raise error(f"argument {name!r} of kernel {facts.name!r} is annotated {annotation}, but {problem}")


def _problem(annotation: str, value: Any) -> tuple[type[Exception], str]:
    if annotation.startswith("*"):
        return TypeError, f"a scalar was passed ({value!r}); pass an array for it"
    if annotation in _INT_RANGES:
        if isinstance(value, float):
            return TypeError, f"a float was passed ({value!r}); pass an integer"
        low, high = _INT_RANGES[annotation]
        if not low <= int(value) <= high:
            return ValueError, f"{value} does not fit in it (range {low} to {high}); annotate a wider type"
    return ValueError, ""
