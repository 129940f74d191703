"""How a kernel's source uses its parameters, read with ``ast`` (cached per kernel): which parameters it computes
with as one value, and which reductions it makes.

Triton binds a tuple argument to a tuple parameter (the kernel indexes it: ``strides[0]``), so a tuple is refused
only where the source shows the parameter used as one value (``offs < n``, ``x_ptr + offs``) and never in a way a
tuple allows (indexed, unpacked, iterated, passed on to another function, renamed). The reductions
(``tl.sum``...) let the refusal of an unpartitioned call say which factors the kernel may need whole.
"""

from __future__ import annotations

import ast
import functools
import textwrap
from typing import Any

#: Calls through which a value stays one value (Python's own, on a scalar parameter).
_SCALAR_FUNCTIONS = frozenset({"range", "min", "max", "abs", "int", "float", "bool"})
#: ``tl.*`` (or method) names that reduce a tensor along an axis.
_REDUCTIONS = frozenset({"sum", "max", "min", "reduce", "argmax", "argmin", "xor_sum", "cumsum", "cumprod",
                         "associative_scan", "dot", "dot_scaled"})


def _tree(facts: Any) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(facts.fn.src))
    except (AttributeError, TypeError, SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=256)
def one_value_params(facts: Any) -> dict[str, str]:
    """The non-constexpr parameters the kernel uses only as one value, each with one expression that does."""
    tree = _tree(facts)
    if tree is None:
        return {}
    params = {p.name for p in facts.params if not p.is_constexpr}
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: dict[str, str] = {}
    other: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name) or node.id not in params:
            continue
        if not isinstance(node.ctx, ast.Load):
            other.add(node.id)  # rebound: what it holds later is not the argument
            continue
        parent = parents.get(node)
        if parent is not None and _one_value_use(node, parent):
            found.setdefault(node.id, ast.unparse(parent))
        else:
            other.add(node.id)
    return {name: use for name, use in found.items() if name not in other}


def _one_value_use(node: ast.Name, parent: ast.AST | None) -> bool:
    """Whether ``parent`` uses ``node`` as one value: arithmetic, a comparison, an attribute, or an argument of a
    ``tl.*`` function or of Python's own ``range``/``min``/...; a tuple fits none of them."""
    if isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp)):
        return True
    if isinstance(parent, ast.AugAssign):
        return parent.value is node
    if isinstance(parent, ast.Attribute):
        return True
    if isinstance(parent, ast.Subscript):  # an index, never the indexed value
        return parent.slice is node
    if isinstance(parent, ast.Call) and node in parent.args:
        func = parent.func
        return isinstance(func, ast.Attribute) or (isinstance(func, ast.Name) and func.id in _SCALAR_FUNCTIONS)
    return False


def refuse_tuple(facts: Any, name: str, value: tuple) -> None:
    """A ``TypeError`` naming parameter ``name`` if the kernel uses it as one value and the call gave a tuple."""
    use = one_value_params(facts).get(name)
    if use is None:
        return
    raise TypeError(f"argument {name!r} of kernel {facts.name!r} is one value (the kernel computes `{use}`), but "
                    f"a tuple was passed: {value!r:.80}; pass one number, such as x.shape[0], x.size or x.stride(0) "
                    f"(a tuple binds to a parameter the kernel indexes, unpacks or iterates)")


@functools.lru_cache(maxsize=256)
def reductions(facts: Any) -> tuple[str, ...]:
    """The reductions the kernel's source calls (``tl.sum``, ``tl.max``, ``tl.dot``, ...), by name."""
    tree = _tree(facts)
    if tree is None:
        return ()
    return tuple(sorted({node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
                         and isinstance(node.func, ast.Attribute) and node.func.attr in _REDUCTIONS}))
