"""The code's shape, read from the source with ``ast`` (nothing is imported or run).

* no import cycle among the host's modules, imports inside functions included; each subpackage imports only the
  floors below it (``FLOORS``);
* ``jax._src`` only in the ``*_compat.py`` adapters (ruff's TID251 says the same, this holds without ruff);
* no module over 400 lines in the host, the plugins (their tests included), ``tests/`` and ``examples/``
  (``bench/`` is not held to it: ``bench/gpu.py`` is one script of about 1,000 lines);
* a plugin imports from the host only the plugin API: ``tritonplug.hookspecs``, ``tritonplug.records``,
  ``tritonplug.plugin_kit``, and ``tritonplug.cache_hookspecs`` if it is a cache plugin;
* no module of the host or of a plugin but ``tritonplug/settings.py`` reads a ``TRITONPLUG_*`` variable from the
  environment (``tests/test_structure_settings.py``);
* no import cycle among a plugin's own modules;
* the interpret plugin owns its translator's tests: no module of ``tests/`` imports ``tritonplug_interpret.xla``
  (they live in ``plugins/interpret/tests``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "tritonplug"
MAX_LINES = 400
SKIPPED_DIRS = {".venv", ".tox", "__pycache__", "build", "dist", ".git", "results"}


def _declared(name: str) -> frozenset[str]:
    """A tuple of module names assigned in ``tritonplug/__init__.py``, read without importing it."""
    for node in parse(HOST / "__init__.py").body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return frozenset(ast.literal_eval(node.value))
    raise AssertionError(f"tritonplug/__init__.py declares no {name}")


def python_files(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*.py")):
        parts = path.relative_to(directory).parts
        if not any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in parts):
            yield path


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


PLUGIN_API = _declared("PLUGIN_API")
CACHE_PLUGIN_API = _declared("CACHE_PLUGIN_API")
PUBLIC_MODULES = _declared("PUBLIC_MODULES")


def runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, at any depth (function bodies included), except under ``if TYPE_CHECKING:``,
    which never runs."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for orelse in child.orelse:
                yield orelse
                yield from runtime_nodes(orelse)
            continue
        yield child
        yield from runtime_nodes(child)


def imported_names(tree: ast.AST, module: str, is_package: bool = False) -> set[str]:
    """Dotted names a module imports: ``import a.b`` gives ``a.b``; ``from a import b`` gives
    ``a`` and ``a.b`` (``b`` may be a module or a name in ``a``). Relative imports are resolved."""
    names: set[str] = set()
    for node in runtime_nodes(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                package = package if is_package else package[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def host_modules() -> dict[str, Path]:
    """Every host module by dotted name, in subpackages too; ``__init__`` files are left out (a subpackage's
    holds only its docstring: ``test_subpackage_inits_import_nothing``)."""
    return {".".join(("tritonplug", *path.relative_to(HOST).with_suffix("").parts)): path
            for path in python_files(HOST) if path.name != "__init__.py"}


def package_of(module: str) -> str:
    """``tritonplug.compile.frontend`` → ``tritonplug.compile``; a top-level module is its own package."""
    parts = module.split(".")
    return ".".join(parts[:2])


def host_import_graph() -> dict[str, set[str]]:
    """Module → the host modules it imports. Edges into the ``tritonplug`` package itself are left
    out: every submodule import runs ``tritonplug/__init__.py`` first, which is not a cycle of ours."""
    modules = host_modules()
    return {name: {n for n in imported_names(parse(path), name) if n in modules and n != name}
            for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm; returns the components that are cycles (more than one module, or a self-loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                cycles.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


#: The host's subpackages, bottom up: each imports only those before it (``tritonplug/__init__.py`` says the same).
FLOORS = ("adapters", "calls", "eager", "cache", "compile", "tuning", "process", "lowering", "porting", "sharding",
          "cli")


def test_each_subpackage_imports_only_the_floors_below_it():
    floor = {f"tritonplug.{name}": i for i, name in enumerate(FLOORS)}
    packages = {package_of(module) for module in host_modules() if module.count(".") == 2}
    assert packages == set(floor), f"give each subpackage its floor in FLOORS: {sorted(packages ^ set(floor))}"
    offenders = [f"{module} imports {name}" for module, imports in host_import_graph().items()
                 if package_of(module) in floor for name in sorted(imports)
                 if floor.get(package_of(name), -1) > floor[package_of(module)]]
    assert not offenders, f"imports from a floor above: {offenders}"


def test_no_import_cycle_among_host_packages():
    """The subpackages are floors too (``FLOORS``); the top-level modules join them without a cycle."""
    graph: dict[str, set[str]] = {}
    for module, imports in host_import_graph().items():
        graph.setdefault(package_of(module), set()).update(
            package_of(i) for i in imports if package_of(i) != package_of(module))
    cycles = strongly_connected(graph)
    assert not cycles, f"import cycles among the host's packages: {[sorted(c) for c in cycles]}"


def test_subpackage_inits_import_nothing():
    """Importing ``tritonplug.compile.worker_main`` must not drag in JAX: package ``__init__`` files are
    docstrings only."""
    for init in HOST.glob("*/__init__.py"):
        body = parse(init).body
        assert all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body), init


def test_the_top_level_is_the_public_surface():
    """A module directly under ``tritonplug/`` is public API (the user's or the plugins'), declared in
    ``tritonplug/__init__.py``; everything internal lives in a subpackage."""
    top = {f"tritonplug.{p.stem}" for p in HOST.glob("*.py") if p.stem not in {"__init__", "__main__"}}
    declared = PUBLIC_MODULES | PLUGIN_API | CACHE_PLUGIN_API
    assert top == declared, f"undeclared: {sorted(top - declared)}; declared but missing: {sorted(declared - top)}"


def test_the_cycle_finder_finds_cycles_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": set(), "f": {"f"}}
    assert sorted(map(sorted, strongly_connected(graph))) == [["a", "b", "c"], ["f"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_imports_are_read_at_every_depth_and_relative_ones_resolved():
    source = ("import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import never.imported\n"
              "def f():\n    from tritonplug import records as r\n    from .sibling import x\n")
    names = imported_names(ast.parse(source), "tritonplug.some_module")
    assert {"os", "tritonplug", "tritonplug.records", "tritonplug.sibling", "tritonplug.sibling.x"} <= names
    assert "never.imported" not in names


def test_the_host_graph_sees_function_level_imports():
    # primitive imports lowering inside its lowering rule only: that edge must be in the graph
    assert "tritonplug.lowering.pipeline" in host_import_graph()["tritonplug.lowering.primitive"]


def test_no_import_cycle_among_host_modules():
    cycles = strongly_connected(host_import_graph())
    assert not cycles, f"import cycles among the host's modules: {[sorted(c) for c in cycles]}"


def _jax_internal_uses(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hit = any(a.name == "jax._src" or a.name.startswith("jax._src.") for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            hit = module == "jax._src" or module.startswith("jax._src.") or (
                module == "jax" and any(a.name == "_src" for a in node.names))
        elif isinstance(node, ast.Attribute):
            hit = node.attr == "_src" and isinstance(node.value, ast.Name) and node.value.id == "jax"
        else:
            continue
        if hit:
            lines.append(node.lineno)
    return lines


def test_the_jax_internals_finder_sees_every_form():
    source = ("import jax._src.core\nfrom jax._src import dispatch\nfrom jax import _src\nimport jax\n"
              "x = jax._src.lib\nfrom jax.extend import core\n")
    assert _jax_internal_uses(ast.parse(source)) == [1, 2, 3, 5]


def test_jax_internals_only_in_compat_modules():
    offenders = []
    for top in ("tritonplug", "plugins", "tests", "bench", "examples"):
        for path in python_files(ROOT / top):
            if path.name.endswith("_compat.py"):
                continue
            offenders += [f"{path.relative_to(ROOT)}:{line}" for line in _jax_internal_uses(parse(path))]
    assert not offenders, f"jax._src outside the *_compat.py adapters: {offenders}"


def plugin_directories() -> list[Path]:
    """Every plugin distribution in the repository: ``plugins/*`` and the test fixtures ``tests/plugins/*``."""
    return [d for parent in (ROOT / "plugins", ROOT / "tests" / "plugins") if parent.is_dir()
            for d in sorted(parent.iterdir()) if (d / "pyproject.toml").is_file()]


def plugin_sources(plugin: Path) -> list[Path]:
    """A plugin's own modules; its tests (``plugins/<name>/tests``) use the host like any user."""
    return [p for p in python_files(plugin) if "tests" not in p.relative_to(plugin).parts]


#: Trees held to ``MAX_LINES`` besides the host and the bundled plugins: the tests (the test plugin
#: distributions under ``tests/plugins`` included) and the examples.
SIZED_TREES = ("tests", "examples")


def sized_modules() -> list[str]:
    """Every module held to ``MAX_LINES``: the host's, each bundled plugin's (its tests included), and
    those of ``SIZED_TREES``."""
    paths = [*python_files(HOST), *(p for d in plugin_directories() if d.parent.name == "plugins"
                                    for p in python_files(d)),
             *(p for tree in SIZED_TREES for p in python_files(ROOT / tree))]
    return [str(p.relative_to(ROOT)) for p in paths]


def test_the_size_check_covers_the_host_the_plugins_their_tests_the_tests_and_the_examples():
    sized = set(sized_modules())
    for module in ("tritonplug/__init__.py", "plugins/interpret/tritonplug_interpret/plugin.py",
                   "plugins/interpret/tests/conftest.py", "tests/conftest.py", "tests/test_structure.py",
                   "tests/plugins/example_backend/tritonplug_example/plugin.py", "examples/add.py"):
        assert module in sized, f"{module} is not held to {MAX_LINES} lines"


@pytest.mark.parametrize("path", sized_modules())
def test_module_is_at_most_400_lines(path):
    lines = len((ROOT / path).read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path} has {lines} lines (at most {MAX_LINES}): split it by responsibility"


def _is_cache_plugin(plugin: Path) -> bool:
    groups = re.findall(r'entry-points\."([^"]+)"', (plugin / "pyproject.toml").read_text(encoding="utf-8"))
    return any("cache" in group for group in groups)


def host_modules_imported(tree: ast.AST) -> set[str]:
    """The host modules a plugin module imports: ``from tritonplug import records`` and
    ``from tritonplug.records import X`` give ``tritonplug.records``; ``import tritonplug`` gives
    ``tritonplug`` (the whole host). A plugin's relative imports stay in its own package."""
    found: set[str] = set()
    for node in runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tritonplug")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module == "tritonplug":
                found.update(f"tritonplug.{a.name}" for a in node.names)
            elif node.module.startswith("tritonplug."):
                found.add(node.module)
    return found


def test_the_plugin_import_reader_names_host_modules():
    source = ("from tritonplug import records, hookspecs as h\nfrom tritonplug.api import triton_call\n"
              "import tritonplug\nimport tritonplug_cuda.compat\nfrom . import compat\n"
              "def f():\n    import tritonplug.compile.backends\n")
    assert host_modules_imported(ast.parse(source)) == {
        "tritonplug.records", "tritonplug.hookspecs", "tritonplug.api", "tritonplug", "tritonplug.compile.backends"}


@pytest.mark.parametrize("plugin", [str(d.relative_to(ROOT)) for d in plugin_directories()])
def test_plugin_imports_only_the_plugin_api(plugin):
    directory = ROOT / plugin
    allowed = PLUGIN_API | (CACHE_PLUGIN_API if _is_cache_plugin(directory) else frozenset())
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in plugin_sources(directory)
                 for name in sorted(host_modules_imported(parse(path))) if name not in allowed]
    assert not offenders, f"plugin imports host modules outside the plugin API {sorted(allowed)}: {offenders}"


def test_the_plugin_check_covers_the_shipped_plugins():
    names = {d.name for d in plugin_directories()}
    assert {"cuda", "rocm", "interpret", "example_backend"} <= names



def plugin_import_graph(plugin: Path) -> dict[str, set[str]]:
    """A plugin's modules (its tests left out) → those of its modules each imports, at any depth; ``__init__``
    files are left out as the host's are (importing a submodule runs its package's ``__init__`` first)."""
    modules = {".".join(p.relative_to(plugin).with_suffix("").parts): p for p in plugin_sources(plugin)
               if p.name != "__init__.py"}
    return {name: {n for n in imported_names(parse(path), name) if n in modules and n != name}
            for name, path in modules.items()}


def test_the_plugin_graph_sees_function_level_imports():
    graph = plugin_import_graph(ROOT / "plugins" / "interpret")
    assert "tritonplug_interpret.runner" in graph["tritonplug_interpret.plugin"]  # imported inside make_kernel
    assert "tritonplug_interpret.xla.ir" in graph["tritonplug_interpret.xla.cfg"]


@pytest.mark.parametrize("plugin", [str(d.relative_to(ROOT)) for d in plugin_directories()])
def test_no_import_cycle_among_a_plugins_modules(plugin):
    cycles = strongly_connected(plugin_import_graph(ROOT / plugin))
    assert not cycles, f"import cycles among {plugin}'s modules: {[sorted(c) for c in cycles]}"


def test_the_host_tests_leave_the_translator_to_its_plugin():
    """The translator's tests live with it (``plugins/interpret/tests``): a test of ``tests/`` (its plugin fixture
    distributions aside) may use the interpret backend through the host, never ``tritonplug_interpret.xla``."""
    host_tests = [p for p in python_files(ROOT / "tests") if "plugins" not in p.relative_to(ROOT / "tests").parts]
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in host_tests
                 for name in sorted(imported_names(parse(path), "tests." + path.stem))
                 if name == "tritonplug_interpret.xla" or name.startswith("tritonplug_interpret.xla.")]
    assert not offenders, f"move these tests to plugins/interpret/tests: {offenders}"
    assert not list((ROOT / "tests").glob("test_xla_*.py")) and not list((ROOT / "tests").glob("xla_*.py"))
