"""What ``kernels_of`` reads from a library module's source without running it: the module's file,
its top-level statements cut into units (one per import alias, one per other statement), the names
each unit binds and the module-level names it reads, and which units define Triton kernels.

Nothing here imports or executes the library; ``kernel_source`` executes the units it selects.
"""

from __future__ import annotations
import __future__

import ast
import importlib.machinery
import symtable
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: Decorators (and call wrappers) that make a function a Triton kernel or helper, when their name
#: comes from a ``triton`` module: ``triton.jit``, ``triton.autotune``, ``triton.heuristics``, ``gluon.jit``.
TRITON_DECORATORS = frozenset({"jit", "autotune", "heuristics"})


@dataclass(frozen=True)
class ModuleFile:
    """Where a module's source lives, found without importing its packages."""

    name: str
    path: Path | None  # None: a namespace package (no ``__init__.py``)
    is_package: bool
    search_locations: tuple[str, ...]


def find_module_file(name: str) -> ModuleFile:
    """Locate ``name``'s source with the path finder alone: ``importlib.util.find_spec`` would import
    (run) every parent package, and a library's ``__init__.py`` is usually where ``import torch`` is."""
    parts = name.split(".")
    spec = _find_spec(parts[0], list(sys.path))
    for depth in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            break
        spec = _find_spec(".".join(parts[:depth + 1]), list(spec.submodule_search_locations))
    if spec is None:
        raise ModuleNotFoundError(f"kernels_of: no module named {name!r} on sys.path", name=name)
    locations = tuple(spec.submodule_search_locations or ())
    if spec.origin in (None, "namespace"):
        return ModuleFile(name, None, True, locations)
    path = Path(spec.origin)
    if path.suffix != ".py":
        raise ImportError(f"kernels_of: module {name!r} has no Python source to read ({path})", name=name)
    return ModuleFile(name, path, bool(locations), locations)


def _find_spec(name: str, where: list[str]) -> importlib.machinery.ModuleSpec | None:
    """The path finder's spec of ``name`` in the directories ``where``. For a namespace package (a directory
    without ``__init__.py``: vLLM's sources copied without them) the finder builds a ``_NamespacePath``, which
    reads the parent module from ``sys.modules`` and so fails (``KeyError``) where the parent was never imported,
    as here: that spec is made from the directories themselves."""
    try:
        return importlib.machinery.PathFinder.find_spec(name, where)
    except KeyError:
        last = name.rpartition(".")[2]
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(Path(entry) / last) for entry in where
                                           if (Path(entry) / last).is_dir()]
        return spec


@dataclass
class Unit:
    """One piece of top-level code executed as a whole: an import of one name, or one statement
    (a ``def`` with its decorators, an assignment, an ``if``/``try`` block with all it binds)."""

    index: int
    node: ast.stmt
    bound: frozenset[str]
    reads: frozenset[str] = frozenset()
    import_alias: ast.alias | None = None
    is_kernel: bool = False
    state: str = "new"  # new → loading → done | failed
    kernel_defs: tuple[ast.FunctionDef, ...] = field(default=())

    @property
    def first_line(self) -> int:
        decorators = getattr(self.node, "decorator_list", [])
        return min([self.node.lineno, *(d.lineno for d in decorators)])


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _import_origins(tree: ast.Module) -> dict[str, str]:
    """Top-level name → the dotted module path it was imported as (``tl`` → ``triton.language``,
    ``jit`` from ``from triton import jit`` → ``triton.jit``), for names bound by imports."""
    origins: dict[str, str] = {}
    for node in _top_level(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.name if alias.asname else alias.name.split(".")[0]
                origins[alias.asname or bound] = bound
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                origins[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return origins


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """Statements run at import time: the module body and the bodies of its ``if``/``try``/``with``
    blocks, never function or class bodies."""
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or type(node).__name__ == "TryStar":
            for name in ("body", "orelse", "finalbody"):
                pending.extend(getattr(node, name, []))
            for handler in getattr(node, "handlers", []):
                pending.extend(handler.body)


def is_triton_decorator(node: ast.expr, origins: dict[str, str]) -> bool:
    """``@triton.jit``, ``@triton.jit(...)``, ``@triton.autotune(...)``, ``@tl_heuristics(...)`` where the head
    name was imported from a ``triton`` module."""
    while isinstance(node, ast.Call):
        node = node.func
    parts = _dotted(node)
    if not parts:
        return False
    origin = origins.get(parts[0], "").split(".") + parts[1:]
    return origin[0] == "triton" and origin[-1] in TRITON_DECORATORS


def kernel_defs(node: ast.stmt, origins: dict[str, str]) -> tuple[ast.FunctionDef, ...]:
    found = []
    for stmt in _top_level(ast.Module(body=[node], type_ignores=[])):
        if isinstance(stmt, ast.FunctionDef) and any(is_triton_decorator(d, origins) for d in stmt.decorator_list):
            found.append(stmt)
    return tuple(found)


def _wraps_kernel(node: ast.stmt, origins: dict[str, str]) -> bool:
    """``name = triton.jit(fn)`` / ``triton.autotune(...)(fn)`` at module level."""
    return (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            and is_triton_decorator(node.value.func, origins))


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _bound_names(node: ast.AST, in_comprehension: bool = False) -> set[str]:
    """Names a top-level statement binds in the module, read from the AST: CPython 3.12 inlines comprehensions
    (PEP 709), so ``symtable`` would count their loop variables (``for num_warps in ...`` inside a decorator)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name} | {n for d in node.decorator_list for n in _bound_names(d, in_comprehension)}
    if isinstance(node, ast.Lambda):
        return set()
    names: set[str] = set()
    if isinstance(node, ast.NamedExpr):
        names.add(node.target.id)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and not in_comprehension:
        names.add(node.id)
    elif isinstance(node, ast.ExceptHandler) and node.name:
        names.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        names.update(a.asname or a.name.split(".")[0] for a in node.names)
    elif type(node).__name__ in ("MatchAs", "MatchStar") and getattr(node, "name", None):
        names.add(node.name)  # type: ignore[attr-defined]
    inner = in_comprehension or isinstance(node, _COMPREHENSIONS)
    for child in ast.iter_child_nodes(node):
        names |= _bound_names(child, inner)
    return names


def _reads_of(source: str, filename: str) -> set[str]:
    """Module-level names the code reads, by CPython's own scope analysis: a name read in a function body
    counts only where it resolves to a global."""
    table = symtable.symtable(source, filename, "exec")
    reads = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    pending = list(table.get_children())
    while pending:
        child = pending.pop()
        reads.update(s.get_name() for s in child.get_symbols() if s.is_referenced() and s.is_global())
        pending.extend(child.get_children())
    return reads


@dataclass
class ModuleSource:
    """A module's source cut into units, indexed by the names they bind."""

    file: ModuleFile
    units: list[Unit]
    by_name: dict[str, list[Unit]]
    star_imports: list[Unit]
    compile_flags: int
    origins: dict[str, str]

    @property
    def kernels(self) -> list[Unit]:
        return [u for u in self.units if u.is_kernel]


def read_module(file: ModuleFile) -> ModuleSource:
    if file.path is None:
        return ModuleSource(file, [], {}, [], 0, {})
    text = file.path.read_text(encoding="utf-8")
    filename = str(file.path)
    tree = ast.parse(text, filename=filename)
    lines = text.splitlines(keepends=True)
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                 and any(a.name == "annotations" for a in n.names) for n in tree.body)
    flags = __future__.annotations.compiler_flag if future else 0
    prefix = "from __future__ import annotations\n" if future else ""
    origins = _import_origins(tree)
    units: list[Unit] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or (alias.name if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0])
                units.append(Unit(len(units), node, frozenset({name}), import_alias=alias))
            continue
        unit = Unit(len(units), node, frozenset())
        segment = "".join(lines[unit.first_line - 1:node.end_lineno])
        unit.bound = frozenset(_bound_names(node))
        unit.reads = frozenset(_reads_of(prefix + segment, filename) - unit.bound)
        unit.kernel_defs = kernel_defs(node, origins)
        unit.is_kernel = bool(unit.kernel_defs) or _wraps_kernel(node, origins)
        units.append(unit)
    by_name: dict[str, list[Unit]] = {}
    for unit in units:
        for name in unit.bound:
            by_name.setdefault(name, []).append(unit)
    stars = by_name.pop("*", [])
    return ModuleSource(file, units, by_name, stars, flags, origins)


def _outer_count(node: ast.FunctionDef, origins: dict[str, str]) -> int:
    for position, decorator in enumerate(node.decorator_list):
        if is_triton_decorator(decorator, origins):
            return position
    return 0


def strip_outer_wrappers(unit: Unit, origins: dict[str, str]) -> ast.stmt | None:
    """A copy of a kernel unit's ``def`` without the decorators above its outermost Triton decorator,
    or None when there are none (only a plain top-level ``def`` is stripped)."""
    node = unit.node
    if not isinstance(node, ast.FunctionDef):
        return None
    count = _outer_count(node, origins)
    if count == 0:
        return None
    stripped = ast.FunctionDef(name=node.name, args=node.args, body=node.body,
                               decorator_list=node.decorator_list[count:], returns=node.returns,
                               type_comment=node.type_comment, **_type_params(node))
    return ast.copy_location(stripped, node)


def _type_params(node: ast.FunctionDef) -> dict:
    return {"type_params": node.type_params} if hasattr(node, "type_params") else {}
