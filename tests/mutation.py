"""Mutation testing (``tox -e mutation``, outside the envlist, never gating): cosmic-ray over the modules where a
bug means a wrong number, each module's mutants run against the tests that matter for it.

    python tests/mutation.py [MODULE ...] [--jobs N] [--fresh] [--report]

Each module (``MODULES``: its files and its tests) gets a copy of the repository under ``.mutation/NAME/tree``
(cosmic-ray mutates the files in place: the checkout is never touched) and a session database
``.mutation/NAME.sqlite``; ``cosmic-ray exec`` resumes a session that was stopped, ``--fresh`` starts it again.
Before the mutants the module's tests run once unmutated: they must pass, and their time sets the timeout (a
mutant that runs four times as long, at least 60 s, is counted killed: a loop that no longer ends). The operators
are one replacement per site (``EXCLUDED``: ``+`` becomes ``-``, not ten other operators). The score per module is
killed (timeouts included) / (mutants run - incompetent ones, which do not import); each survivor's diff is
written to ``.mutation/NAME.survivors.txt``, and each must be killed by a test or explained in
``docs/development.md``. ``--report`` prints the scores of the sessions there are without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".mutation"
XLA = "plugins/interpret/tritonplug_interpret/xla"
XLA_TESTS = "plugins/interpret/tests"

#: name → (the files mutated, the tests run against each mutant)
MODULES: dict[str, tuple[list[str], list[str]]] = {
    "binding": (["tritonplug/calls/binding.py"],
                ["tests/test_binding_properties.py", "tests/test_surface_arguments.py", "tests/test_binding_scalars.py",
                 "tests/test_binding_edges.py", "tests/test_bad_input.py"]),
    "eager": (["tritonplug/eager/guards.py", "tritonplug/eager/keys.py", "tritonplug/eager/memo.py",
               "tritonplug/eager/runners.py"],
              ["tests/test_eager_guards.py", "tests/test_eager_keys.py", "tests/test_eager_quick_path.py",
               "tests/test_call_repeats.py", "tests/test_call_memo.py", "tests/test_eager_survivors.py"]),
    "sharding_rules": (["tritonplug/calls/sharding_rules.py"], ["tests/test_sharding_rules.py"]),
    "xla_memory": ([f"{XLA}/memory.py"], [f"{XLA_TESTS}/test_xla_masked_stores.py", f"{XLA_TESTS}/test_xla_path.py",
                                         f"{XLA_TESTS}/test_xla_windows.py",
                                         f"{XLA_TESTS}/test_xla_memory_survivors.py",
                                         f"{XLA_TESTS}/test_xla_live_bounds.py"]),
    "xla_tiles": ([f"{XLA}/tiles.py"], [f"{XLA_TESTS}/test_xla_masked_stores.py",
                                       f"{XLA_TESTS}/test_xla_tile_window_edges.py"]),
    "xla_windows": ([f"{XLA}/windows.py"], [f"{XLA_TESTS}/test_xla_masked_stores.py",
                                           f"{XLA_TESTS}/test_xla_typed_ops.py",
                                           f"{XLA_TESTS}/test_xla_tile_window_edges.py",
                                           f"{XLA_TESTS}/test_xla_window_survivors.py",
                                           f"{XLA_TESTS}/test_xla_aligned_windows.py"]),
    "disk_cache": (["tritonplug/cache/disk.py", "tritonplug/cache/files.py", "tritonplug/cache/entries.py",
                    "tritonplug/cache/signing.py"],
                   ["tests/test_cache.py", "tests/test_cache_faults.py", "tests/test_cache_heal.py",
                    "tests/test_cache_signing.py", "tests/test_cache_edges.py", "tests/test_cache_edges_files.py",
                    "tests/test_cache_edges_disk.py"]),
}

#: Operators left out: of each binary, comparison and unary operator, all replacements but one.
EXCLUDED = [
    r"core/ReplaceBinaryOperator_(?!(Add_Sub|Sub_Add|Mul_Div|Div_Mul|FloorDiv_Mul|Mod_FloorDiv|Pow_Mul|BitOr_BitAnd"
    r"|BitAnd_BitOr|BitXor_BitOr|LShift_RShift|RShift_LShift)$)",
    r"core/ReplaceComparisonOperator_(?!(Eq_NotEq|NotEq_Eq|Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Is_IsNot|IsNot_Is"
    r"|In_NotIn|NotIn_In)$)",
    r"core/ReplaceUnaryOperator_(?!(Delete_Not|Delete_USub)$)",
    r"core/Variable(Replacer|Inserter)",
]


def _tool(name: str) -> str:
    """A cosmic-ray command: beside this Python, else on PATH, else in ``$COSMIC_RAY_BIN``."""
    for folder in (os.environ.get("COSMIC_RAY_BIN"), str(Path(sys.executable).parent)):
        if folder and (Path(folder) / name).exists():
            return str(Path(folder) / name)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: install cosmic-ray (tox -e mutation does) or set COSMIC_RAY_BIN")
    return found


def _copy(tree: Path) -> None:
    """The repository's files (tracked, and untracked ones git does not ignore) copied to ``tree``."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    shutil.rmtree(tree, ignore_errors=True)
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)


def _environment(tree: Path) -> dict[str, str]:
    paths = [str(tree), str(tree / "tests"), str(tree / "plugins" / "interpret")]
    old = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths + ([old] if old else [])),
            "PYTHONDONTWRITEBYTECODE": "1"}


def _test_command(tests: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests]


def _config(name: str, files: list[str], tests: list[str], timeout: float) -> Path:
    path = OUT / f"{name}.toml"
    quoted = ", ".join(json.dumps(f) for f in files)
    path.write_text("\n".join([
        "[cosmic-ray]", f"module-path = [{quoted}]", f"timeout = {timeout:.0f}", "excluded-modules = []",
        f"test-command = {json.dumps(' '.join(_test_command(tests)))}", "",
        "[cosmic-ray.distributor]", 'name = "local"', "",
        "[cosmic-ray.filters.operators-filter]", f"exclude-operators = {json.dumps(EXCLUDED)}", ""]))
    return path


def run(name: str, fresh: bool) -> str:
    """Run (or resume) one module's session; its score line."""
    files, tests = MODULES[name]
    tree, db = OUT / name / "tree", OUT / f"{name}.sqlite"
    _copy(tree)
    env = _environment(tree)
    start = time.perf_counter()
    base = subprocess.run(_test_command(tests), cwd=tree, env=env, capture_output=True, text=True)
    if base.returncode != 0:
        return f"{name}: the tests fail unmutated:\n{base.stdout[-3000:]}"
    timeout = max(60.0, 4 * (time.perf_counter() - start))
    config = _config(name, files, tests, timeout)
    if fresh or not db.exists():
        db.unlink(missing_ok=True)
        subprocess.run([_tool("cosmic-ray"), "init", str(config), str(db)], cwd=tree, env=env, check=True)
        subprocess.run([_tool("cr-filter-operators"), str(db), str(config)], cwd=tree, env=env, check=True)
    subprocess.run([_tool("cosmic-ray"), "exec", str(config), str(db)], cwd=tree, env=env, check=True)
    return score(name) + f" ({time.perf_counter() - start:.0f} s)"


def score(name: str) -> str:
    """The session's score line; writes the survivors' diffs to ``.mutation/NAME.survivors.txt``."""
    db = OUT / f"{name}.sqlite"
    if not db.exists():
        return f"{name}: no session"
    dumped = subprocess.run([_tool("cosmic-ray"), "dump", str(db)], capture_output=True, text=True, check=True)
    counts = {"killed": 0, "timeout": 0, "survived": 0, "incompetent": 0, "pending": 0}
    survivors = []
    for line in dumped.stdout.splitlines():
        item, result = json.loads(line)
        if result is None:
            counts["pending"] += 1
        elif result["worker_outcome"] == "skipped":
            continue
        elif result["worker_outcome"] == "timeout":
            counts["timeout"] += 1
        elif result["test_outcome"] in counts:
            counts[result["test_outcome"]] += 1
            if result["test_outcome"] == "survived":
                survivors.append(result.get("diff") or json.dumps(item["mutations"]))
    (OUT / f"{name}.survivors.txt").write_text("\n".join(survivors))
    run_ = counts["killed"] + counts["timeout"] + counts["survived"]
    rate = 100 * (counts["killed"] + counts["timeout"]) / run_ if run_ else 0.0
    return (f"{name}: {rate:.1f}% killed ({counts['killed']} killed, {counts['timeout']} timed out, "
            f"{counts['survived']} survived, {counts['incompetent']} incompetent, {counts['pending']} not run)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", choices=[[], *MODULES], help="default: all of them")
    parser.add_argument("--jobs", type=int, default=1, help="modules run at once (each in its own copy)")
    parser.add_argument("--fresh", action="store_true", help="start each session again")
    parser.add_argument("--report", action="store_true", help="print the scores of the sessions there are")
    args = parser.parse_args()
    names = args.modules or list(MODULES)
    OUT.mkdir(exist_ok=True)
    (OUT / ".gitignore").write_text("*\n")
    if args.report:
        lines = [score(name) for name in names]
    else:
        with ThreadPoolExecutor(args.jobs) as pool:
            lines = list(pool.map(lambda name: run(name, args.fresh), names))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
