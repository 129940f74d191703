"""The code's shape, read from the source with ``ast`` (nothing is imported or run).

* no import cycle among the host's modules, imports inside functions included;
* ``jax._src`` only in the ``*_compat.py`` adapters (ruff's TID251 says the same, this holds without ruff);
* no module over 400 lines in the host, the plugins (their tests included), ``tests/`` and ``examples/``
  (``bench/`` is not held to it: ``bench/gpu.py`` is one script of about 1,000 lines);
* a plugin imports from the host only the plugin API: ``tritonplug.hookspecs``, ``tritonplug.records``,
  ``tritonplug.plugin_kit``, and ``tritonplug.cache_hookspecs`` if it is a cache plugin;
* no module of the host or of a plugin but ``tritonplug/settings.py`` reads a ``TRITONPLUG_*`` variable from the
  environment (programs that set one, tests and workers' environments, may).
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
PLUGIN_API = frozenset({"tritonplug.hookspecs", "tritonplug.records", "tritonplug.plugin_kit"})
CACHE_PLUGIN_API = frozenset({"tritonplug.cache_hookspecs", "tritonplug.cache_records"})

# What today's tree still fails, and the item of issue 15 that fixes it.


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
    return {f"tritonplug.{path.stem}": path for path in sorted(HOST.glob("*.py")) if path.stem != "__init__"}


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
    assert "tritonplug.lowering" in host_import_graph()["tritonplug.primitive"]


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
              "def f():\n    import tritonplug.host\n")
    assert host_modules_imported(ast.parse(source)) == {
        "tritonplug.records", "tritonplug.hookspecs", "tritonplug.api", "tritonplug", "tritonplug.host"}


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


SETTINGS_MODULE = HOST / "settings.py"


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` or a bare ``environ`` (``from os import environ``)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "environ")


def _is_getenv(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "getenv" and isinstance(node.value, ast.Name)
            and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "getenv")


def _mentions_prefix(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("TRITONPLUG_")
               for n in ast.walk(node))


def _iterated(node: ast.AST) -> ast.AST:
    """What a loop runs over: ``os.environ`` for ``os.environ.items()`` (``keys``, ``values``) too."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
        return node.func.value
    return node


def environment_reads(tree: ast.Module) -> list[int]:
    """Lines that may read a ``TRITONPLUG_*`` variable: ``os.environ.get(K)``, ``os.getenv(K)``, ``os.environ[K]``
    (not as an assignment's target), ``K in os.environ``, where ``K`` is a string starting ``TRITONPLUG_``, a
    module-level name bound to one, or anything but a string constant (``os.environ.get(name)`` in a helper);
    and a loop or comprehension over ``os.environ`` that names the prefix or filters on no string constant."""
    strings = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
               and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
               for t in node.targets if isinstance(t, ast.Name)}

    def is_key(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Name) and node.id in strings:
            return strings[node.id].startswith("TRITONPLUG_")
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value.startswith("TRITONPLUG_")
        return node is not None

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and is_key(node.args[0]) and (
                _is_getenv(node.func) or (isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                                          and _is_environ(node.func.value))):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value) \
                and is_key(node.slice):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and is_key(node.left) and any(
                isinstance(op, (ast.In, ast.NotIn)) and _is_environ(c)
                for op, c in zip(node.ops, node.comparators, strict=True)):
            lines.append(node.lineno)
        elif isinstance(node, (ast.For, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            loops = [node] if isinstance(node, ast.For) else node.generators
            filters_on_a_constant = any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                                        for n in ast.walk(node))
            if any(_is_environ(_iterated(loop.iter)) for loop in loops) and (
                    _mentions_prefix(node) or not filters_on_a_constant):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_the_environment_read_finder_sees_every_form():
    source = ("import os\nfrom os import environ, getenv\nVAR = 'TRITONPLUG_X'\n"
              "a = os.environ.get('TRITONPLUG_A', '1')\nb = os.getenv(VAR)\nc = environ['TRITONPLUG_C']\n"
              "d = 'TRITONPLUG_D' not in os.environ\ne = {k: v for k, v in os.environ.items() if "
              "k.startswith('TRITONPLUG_')}\nf = getenv('TRITONPLUG_F')\n"
              "os.environ['TRITONPLUG_SET'] = '1'\nos.environ.setdefault('TRITONPLUG_DEFAULT', '1')\n"
              "g = os.environ.get('TRITON_CACHE_DIR')\nh = dict(os.environ)\n"
              "i = [k for k in os.environ if k.startswith('TRITON_')]\nOTHER = 'PYTEST_XDIST_WORKER'\n"
              "j = os.environ.get(OTHER)\ndef read(name):\n    return os.environ.get(name)\n"
              "k = [k for k in os.environ if k.startswith(PREFIX)]\n")
    assert environment_reads(ast.parse(source)) == [4, 5, 6, 7, 8, 9, 18, 19]


def environment_readers() -> list[Path]:
    """The host's modules but the settings module, and every plugin's own modules."""
    return [*(p for p in python_files(HOST) if p != SETTINGS_MODULE),
            *(p for d in plugin_directories() for p in plugin_sources(d))]


def test_only_the_settings_module_reads_tritonplug_variables():
    assert SETTINGS_MODULE.is_file() and environment_reads(parse(SETTINGS_MODULE)), "the finder sees settings.py's"
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in environment_readers()
                 for line in environment_reads(parse(path))]
    assert not offenders, (f"TRITONPLUG_* variables read outside tritonplug/settings.py (declare a setting there; "
                           f"plugins reach it through tritonplug.plugin_kit): {offenders}")
