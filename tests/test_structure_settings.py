"""The code's shape, continued (``tests/test_structure.py`` holds the rest): no module of the host or of a plugin
but ``tritonplug/settings.py`` reads a ``TRITONPLUG_*`` variable from the environment, read from the source with
``ast``. Programs that set one (tests, workers' environments) may; plugins reach the settings they read through
``tritonplug.plugin_kit``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_structure import HOST, ROOT, parse, plugin_directories, plugin_sources, python_files

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
