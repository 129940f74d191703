"""Where the host and its plugins run code from text: only in ``tritonplug/eager/`` (the generated keys and runners,
whose source is in ``linecache``, logged and inspectable) and in the modules listed below with the reason.

Read with ``ast`` (nothing is imported): every call of the builtins ``exec``, ``eval`` and ``compile`` (by name or as
an attribute, ``builtins.exec``); a method of that name (``re.compile``, ``CompileService.compile``) is not one.
"""

from __future__ import annotations

import ast

from test_structure import ROOT, parse, python_files

RUNS_TEXT = frozenset(("exec", "eval", "compile"))
#: The package whose modules may run the text they write.
GENERATING_PACKAGE = "tritonplug/eager/"
#: Other modules that run code from text, each with its reason.
ALLOWED = {
    "tritonplug/porting/kernel_source.py": "runs a torch kernel library's own top-level statements, parsed from its "
                                           "installed source and compiled under the library's file name, to define its "
                                           "Triton kernels without importing torch (kernels_of)",
}


def text_runs(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each call of ``exec``, ``eval`` or ``compile`` as a builtin."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in RUNS_TEXT:
            found.append((node.lineno, func.id))
        elif (isinstance(func, ast.Attribute) and func.attr in RUNS_TEXT and isinstance(func.value, ast.Name)
              and func.value.id in ("builtins", "__builtins__")):
            found.append((node.lineno, func.attr))
    return found


def test_the_finder_sees_builtins_and_not_methods():
    source = ("exec(code, ns)\nimport builtins\nbuiltins.eval('1')\nre.compile('x')\nself.compile(node)\n"
              "compile(src, 'f', 'exec')\nf(exec)\n")
    assert text_runs(ast.parse(source)) == [(1, "exec"), (3, "eval"), (6, "compile")]


def test_code_runs_from_text_only_where_listed():
    offenders = []
    for top in ("tritonplug", "plugins"):
        for path in python_files(ROOT / top):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith(GENERATING_PACKAGE) or name in ALLOWED or "/tests/" in name:
                continue
            offenders += [f"{name}:{line}: {what}" for line, what in text_runs(parse(path))]
    assert not offenders, f"code run from text outside {GENERATING_PACKAGE} and {sorted(ALLOWED)}: {offenders}"


def test_the_listed_modules_still_run_text():
    """An entry whose module no longer runs text is removed from ``ALLOWED``, so the list stays the truth."""
    for name in ALLOWED:
        assert text_runs(parse(ROOT / name)), f"{name} runs no text any more: remove it from ALLOWED"
    assert text_runs(parse(ROOT / GENERATING_PACKAGE / "generated.py"))
