"""Every test runs in some env of ``tox.ini``'s envlist (CI runs exactly that list): a test no env collects, or one
that only envs lacking the backend it needs collect, would never run anywhere.

A test of ``tests/`` is covered when some env has a pytest command that collects its file (paths less
``--ignore``), whose ``-m`` expression selects its markers, and whose deps install a backend for each of its
``requires_backend`` marks (``helpers.backends_required`` reads them back from the skip reasons). Tests that skip
for want of a GPU count as covered where an env with their backend collects them: CI has no GPU, a GPU machine
runs the same env. The tests are collected once, in a child pytest, in this environment, so a test whose existence
depends on the installed backends (a parameter list built from them) is seen as this environment builds it; a file
that does not collect here is still held to being run by some env. A plugin's own tests
(``plugins/<name>/tests``) are covered when an env that installs the plugin runs their file.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict

import pytest
from helpers import ROOT, backends_required, requires_backend
from tox_envs import Env, envs, parse_pytest

COLLECT = r"""
import json, sys
import pytest

class Dump:
    def __init__(self):
        self.items = []

    def pytest_collection_finish(self, session):
        self.items = [{"id": item.nodeid, "marks": sorted({m.name for m in item.iter_markers()}),
                       "reasons": [str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")]}
                      for item in session.items]

dump = Dump()
pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors", "tests"],
            plugins=[dump])
with open(sys.argv[1], "w") as f:
    json.dump(dump.items, f)
"""


def selects(expression: str | None, marks: set[str]) -> bool:
    """Whether pytest's ``-m expression`` selects a test with these markers (the grammar tox.ini uses:
    names, ``and``, ``or``, ``not``, parentheses)."""
    if expression is None:
        return True
    words = re.findall(r"[()]|[^\s()]+", expression)
    python = " ".join(w if w in ("and", "or", "not", "(", ")") else str(w in marks) for w in words)
    return bool(eval(python, {"__builtins__": {}}))  # noqa: S307 (only True, False and the operators)


def runs_in(env: Env, path: str, marks: set[str], needs: list[frozenset[str]]) -> bool:
    return (all(need & env.backends for need in needs)
            and any(run.collects(path) and selects(run.markexpr, marks) for run in env.runs))


def all_test_files() -> list[str]:
    found = [*(ROOT / "tests").rglob("test_*.py"), *(ROOT / "plugins").glob("*/tests/**/test_*.py")]
    return sorted(p.relative_to(ROOT).as_posix() for p in found)


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> list[dict]:
    """Every test of ``tests/`` collected here: node id, marker names, skip reasons."""
    out = tmp_path_factory.mktemp("collected") / "items.json"
    done = subprocess.run([sys.executable, "-c", COLLECT, str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert out.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def test_every_test_of_tests_runs_in_some_env(collected) -> None:
    assert len(collected) > 1000, "the child pytest collected almost nothing"
    missing = defaultdict(list)
    for item in collected:
        path = item["id"].split("::")[0]
        needs = [n for n in map(backends_required, item["reasons"]) if n is not None]
        if not any(runs_in(env, path, set(item["marks"]), needs) for env in envs()):
            wants = " and ".join(f"({' or '.join(sorted(n))})" if len(n) > 1 else next(iter(n)) for n in needs)
            marks = ", ".join(item["marks"]) or "none"
            missing[f"{path} (needing {wants or 'no backend'}; markers: {marks})"].append(item["id"])
    if missing:
        pytest.fail("tests that no env of tox.ini's envlist runs (add their file to the commands of an env that "
                    "installs what they need, or mark them for one that selects by marker):\n"
                    + "\n".join(f"  {key}: {len(ids)}, e.g. {ids[0]}" for key, ids in sorted(missing.items())),
                    pytrace=False)


def test_every_test_file_is_run_by_some_env() -> None:
    """Also the files that do not collect here, and each plugin's own tests by an env that installs the plugin."""
    def runs_file(env: Env, path: str) -> bool:
        plugin = re.match(r"(plugins/[^/]+)/tests/", path)
        return (plugin is None or plugin.group(1) in env.projects) and any(r.collects(path) for r in env.runs)
    missing = [path for path in all_test_files() if not any(runs_file(env, path) for env in envs())]
    assert not missing, f"test files no env of tox.ini's envlist runs: {missing}"


def test_the_reading_of_tox_ini() -> None:
    run = parse_pytest('env XLA_FLAGS= pytest -n 2 -m "not cuda and not rocm" {posargs} tests --ignore=tests/corpus '
                       "--ignore tests/test_ports.py")
    assert run is not None and run.paths == ("tests",) and run.markexpr == "not cuda and not rocm"
    assert run.collects("tests/test_cli.py") and not run.collects("tests/corpus/test_cpu.py")
    assert not run.collects("tests/test_ports.py") and run.collects("tests/test_ports_model.py")
    assert parse_pytest("python -m pip install -r requirements.txt") is None
    with pytest.raises(ValueError, match="-k"):
        parse_pytest("pytest -k numerics tests")
    assert selects("not cuda and not rocm", {"interpret"}) and not selects("not cuda and not rocm", {"cuda"})
    assert selects("cuda or (rocm and not plugins)", {"rocm"}) and not selects("cuda", set())
    by_name = {env.name: env for env in envs()}
    assert by_name["cpu"].backends == {"interpret"} and "plugins/interpret" in by_name["cpu"].projects
    assert {"cuda", "rocm", "interpret"} <= by_name["triton36"].backends
    assert all(env.runs for env in envs() if env.name != "lint"), "an env whose pytest commands were not read"


def test_a_backend_skip_says_which_backends_in_a_form_read_back() -> None:
    reason = requires_backend("interpret", "cuda").mark.kwargs["reason"]
    assert backends_required(reason) == {"interpret", "cuda"}
    assert "tox envs that install one: cpu, cpu-interpret, cuda, " in reason
    assert backends_required(requires_backend("rocm").mark.kwargs["reason"]) == {"rocm"}
    assert backends_required("no CUDA device is visible") is None
