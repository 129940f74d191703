"""Load the ``@triton.jit`` functions of an installed kernel library without importing its modules.

Liger-Kernel, flash-linear-attention and FlagGems import torch at module level; torch is not in the
CPU test environment. This reads a module's source, runs each top-level statement on its own
(imports and constants that fail — torch, the library's torch helpers — are skipped) and compiles
every function with the module's real file name, so Triton finds the source of each kernel and helper.
"""

from __future__ import annotations

import ast
import importlib.util
import types
from pathlib import Path
from typing import Any

import pytest


def module_path(module: str) -> str:
    """The file of an installed module, found without importing it (skips the test when not installed)."""
    top, _, rest = module.partition(".")
    spec = importlib.util.find_spec(top)   # the top package only: importing a subpackage runs its __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{top} is not installed")
    base = Path(next(iter(spec.submodule_search_locations)), *rest.split(".")) if rest else None
    for path in (base.with_suffix(".py"), base / "__init__.py") if base else ():
        if path.is_file():
            return str(path)
    pytest.skip(f"{module} is not in the installed {top}")


def _is_jit(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef) and any(
        "jit" in ast.unparse(d) or "autotune" in ast.unparse(d) or "heuristics" in ast.unparse(d)
        for d in node.decorator_list)


def load(module: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The namespace of ``module``'s jitted functions (and whatever top-level statements could run)."""
    path = module_path(module)
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    namespace: dict[str, Any] = {"__name__": module, "__file__": path}
    namespace.update(extra or {})
    _run(tree.body, path, namespace)
    return namespace


def _run(statements: list[ast.stmt], path: str, namespace: dict[str, Any]) -> None:
    for node in statements:
        if isinstance(node, ast.ClassDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.FunctionDef):
            if not _is_jit(node):
                continue
            # autotune/heuristics decorators need torch-side helpers: keep the bare jit
            node.decorator_list = [d for d in node.decorator_list if "jit" in ast.unparse(d)]
        code = compile(ast.Module([node], []), path, "exec")
        try:
            exec(code, namespace)  # noqa: S102 - the library's own source, by its real file name
        except Exception:  # noqa: BLE001 - torch-only statements: the kernels do not need them
            # a version test or try/except around imports (libdevice's tanh, rsqrt …): their statements one by one
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                _import_kernels(node, namespace)
            elif isinstance(node, ast.If):
                _run(node.body, path, namespace)
            elif isinstance(node, ast.Try):
                _run(node.body, path, namespace)
                for h in node.handlers:
                    _run(h.body, path, namespace)


_LOADED: dict[str, dict[str, Any]] = {}


def _import_kernels(node: ast.ImportFrom, namespace: dict[str, Any]) -> None:
    """``from lib.mod import helper`` that failed (``lib`` imports torch): the names ``lib.mod`` defines as
    :func:`load` reads it, or a submodule ``lib.mod.helper`` as a module."""
    for alias in node.names:
        name = alias.asname or alias.name
        try:
            namespace[name] = as_module(f"{node.module}.{alias.name}")
            continue
        except BaseException:  # noqa: BLE001 - pytest.skip when it is not a module of its own
            pass
        try:
            if node.module not in _LOADED:
                _LOADED[node.module] = {}   # a cycle sees what is loaded so far
                _LOADED[node.module] = load(node.module)
            if alias.name in _LOADED[node.module]:
                namespace[name] = _LOADED[node.module][alias.name]
        except BaseException:  # noqa: BLE001 - not a module file either
            continue


def as_module(module: str, extra: dict[str, Any] | None = None) -> types.ModuleType:
    """:func:`load` as a module object (a kernel that names ``tle.program_id`` needs ``tle`` to be a module:
    Triton copies any other global it finds into the kernel's cache key)."""
    mod = types.ModuleType(module)
    mod.__dict__.update(load(module, extra))
    return mod
