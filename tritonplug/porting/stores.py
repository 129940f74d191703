"""Which parameters a Triton kernel may store through, read from its source (for ``tritonplug.launch``)."""

from __future__ import annotations

import ast
import functools
import textwrap
from typing import Any

_STORES = frozenset({"store", "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min", "atomic_or",
                     "atomic_xchg", "atomic_xor"})


@functools.lru_cache(maxsize=256)
def stored_params(facts: Any) -> frozenset[str]:
    """Parameters the kernel may store through, read from its source: the names a ``tl.store`` /
    ``tl.atomic_*`` pointer (or an argument of a call to another ``@triton.jit`` function) is computed
    from, followed back through assignments (but not through loaded values). Over-approximate; used
    only to pick, of several parameters given one buffer, the one that is written."""
    tree = ast.parse(textwrap.dedent(facts.fn.src))
    deps: dict[str, set[str]] = {}
    sinks: set[str] = set()

    def names(node: ast.AST | None) -> set[str]:
        """Names an expression is computed from; a loaded value carries no pointer, so loads cut the chain."""
        if node is None or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                            and node.func.attr == "load"):
            return set()
        if isinstance(node, ast.Name):
            return {node.id}
        return set().union(*map(names, ast.iter_child_nodes(node)))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in names(target):
                    deps.setdefault(name, set()).update(names(node.value if not isinstance(node, ast.For)
                                                              else node.iter))
        elif isinstance(node, ast.Call):
            func = node.func
            attr = func.attr if isinstance(func, ast.Attribute) else None
            if attr in _STORES:
                sinks |= names(node.args[0] if node.args else next(
                    (k.value for k in node.keywords if k.arg == "pointer"), None))
            elif isinstance(func, ast.Name) and func.id not in ("range", "min", "max", "len", "int", "float"):
                sinks |= set().union(*map(names, node.args), *(names(k.value) for k in node.keywords))
    seen, todo = set(), list(sinks)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(deps.get(name, ()))
    return frozenset(seen & facts.param_names)
