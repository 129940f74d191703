"""Mutation testing (``tox -e mutation``, outside the envlist, never gating): cosmic-ray over the modules where a
bug means a wrong number, each module's mutants run against the tests that matter for it.

    python tests/mutation.py [MODULE ...] [--jobs N] [--shards N] [--fresh] [--report]
                             [--replay-with PYTHON [--functions F,...] [--not-functions F,...] [--tag T]]

Each module (``MODULES``: its files and its tests) gets a copy of the repository under ``.mutation/NAME/tree``
(cosmic-ray mutates the files in place: the checkout is never touched) and a session database
``.mutation/NAME.sqlite``; ``cosmic-ray exec`` resumes a session that was stopped, ``--fresh`` starts it again.
Before the mutants the module's tests run once unmutated: they must pass, and their time sets the timeout (a
mutant that runs four times as long, at least 60 s, is counted killed: a loop that no longer ends). The operators
are one replacement per site (``EXCLUDED``: ``+`` becomes ``-``, not ten other operators). The score per module is
killed (timeouts included) / (mutants run - incompetent ones, which do not import); each survivor's diff is
written to ``.mutation/NAME.survivors.txt``, and each must be killed by a test or explained in
``docs/development.md``. ``--report`` prints the scores of the sessions there are without running anything.

cosmic-ray runs one mutant at a time (it mutates its copy in place). ``--shards N`` splits a module's pending mutants
over N processes, each with its own copy and a session database ``.mutation/NAME.shardI.sqlite`` in which the
other shards' mutants are held back (marked skipped, ``HELD_BACK`` in their output); when they end, or on the
next run, each shard's results are merged into ``.mutation/NAME.sqlite``, the module's one record.

``--replay-with PYTHON`` runs nothing new through cosmic-ray: each survivor of a module's session is applied to a
copy (its diff, with ``patch``) and the module's tests run against it under another environment's Python (a
``.tox`` env's: code only another Triton or jax reaches, such as the block pointers only Triton 3.6 still
makes; ``--functions`` picks the survivors in some functions); each survivor's verdict goes to
``.mutation/NAME.replay.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
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
    "xla_live_block": ([f"{XLA}/live_block.py"], [f"{XLA_TESTS}/test_xla_live_block.py",
                                                 f"{XLA_TESTS}/test_xla_full_masks.py"]),
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


#: the output of a result that only holds a mutant back from one shard's session (never merged)
HELD_BACK = "held back: another shard runs it"
RESULT_COLUMNS = "worker_outcome, output, test_outcome, diff, job_id"


def _shard_databases(name: str) -> list[Path]:
    return sorted(OUT.glob(f"{name}.shard*.sqlite"))


def _split(db: Path, shards: int) -> list[Path]:
    """Copies of the session ``db``, one per shard, each holding back the pending mutants the others run."""
    with sqlite3.connect(db) as connection:
        pending = [row[0] for row in connection.execute(
            "SELECT job_id FROM work_items WHERE job_id NOT IN (SELECT job_id FROM work_results) ORDER BY job_id")]
    copies = []
    for index in range(shards):
        copy = OUT / f"{db.stem}.shard{index}.sqlite"
        shutil.copy2(db, copy)
        with sqlite3.connect(copy) as connection:
            connection.executemany(f"INSERT INTO work_results ({RESULT_COLUMNS}) VALUES ('SKIPPED', ?, NULL, NULL, ?)",
                                   [(HELD_BACK, job) for n, job in enumerate(pending) if n % shards != index])
        copies.append(copy)
    return copies


def _merge(name: str) -> None:
    """Every shard's results (not its held-back marks) written into the module's session; the shards removed."""
    db = OUT / f"{name}.sqlite"
    for shard in _shard_databases(name):
        with sqlite3.connect(db) as connection:
            connection.execute("ATTACH DATABASE ? AS shard", (str(shard),))
            connection.execute(f"INSERT OR REPLACE INTO work_results ({RESULT_COLUMNS}) SELECT {RESULT_COLUMNS} "
                               "FROM shard.work_results WHERE output IS NOT ?", (HELD_BACK,))
            connection.commit()
            connection.execute("DETACH DATABASE shard")
        shard.unlink()


def run(name: str, fresh: bool, shards: int = 1) -> str:
    """Run (or resume) one module's session, its pending mutants split over ``shards`` processes; its score line."""
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
        for stale in [db, *_shard_databases(name)]:
            stale.unlink(missing_ok=True)
        subprocess.run([_tool("cosmic-ray"), "init", str(config), str(db)], cwd=tree, env=env, check=True)
        subprocess.run([_tool("cr-filter-operators"), str(db), str(config)], cwd=tree, env=env, check=True)
    _merge(name)
    sessions = [(tree, db)] if shards == 1 else [(OUT / name / f"shard{index}", copy)
                                                  for index, copy in enumerate(_split(db, shards))]

    def execute(session: tuple[Path, Path]) -> None:
        where, database = session
        if where != tree:
            shutil.rmtree(where, ignore_errors=True)
            shutil.copytree(tree, where)
        subprocess.run([_tool("cosmic-ray"), "exec", str(config), str(database)], cwd=where,
                       env=_environment(where), check=True)

    try:
        with ThreadPoolExecutor(len(sessions)) as pool:
            list(pool.map(execute, sessions))
    finally:
        _merge(name)
    return score(name) + f" ({time.perf_counter() - start:.0f} s)"


def _survivors(name: str, functions: set[str] | None = None, others: set[str] | None = None) -> list[str]:
    """The diffs of the mutants that survived in the module's session and its shards' (a run under way), those in
    ``functions`` (by name) where given, none in ``others``."""
    diffs = []
    for db in [OUT / f"{name}.sqlite", *_shard_databases(name)]:
        with sqlite3.connect(db) as connection:
            diffs += [diff for diff, function in connection.execute(
                "SELECT r.diff, m.definition_name FROM work_results r JOIN mutation_specs m USING (job_id) "
                "WHERE r.test_outcome = 'SURVIVED' ORDER BY job_id")
                      if (functions is None or (function or "<module>") in functions)
                      and (function or "<module>") not in (others or ())]
    return sorted(set(diffs))


def replay(name: str, python: str, functions: set[str] | None = None, others: set[str] | None = None,
           tag: str = "", tests: list[str] | None = None) -> str:
    """Each survivor (in ``functions`` where given, none in ``others``) applied to a copy and the module's tests run
    under ``python``; the verdicts' summary. ``tag`` names the copy and the verdicts' file (``NAME.replay-TAG.txt``),
    so that two replays can run at once; ``tests``, pytest node ids run instead of the module's (the only tests
    that reach the survivors' code). A survivor whose lines the code has changed since is not applied: its verdict
    says so."""
    tests = tests or MODULES[name][1]
    tree = OUT / name / f"replay{'-' * bool(tag)}{tag}"
    _copy(tree)
    env = _environment(tree)
    verdicts = []
    for diff in _survivors(name, functions, others):
        patch = diff.split("--- mutation diff ---\n", 1)[-1].rstrip("\n") + "\n"
        if subprocess.run(["patch", "-p1", "-s", "--dry-run"], input=patch, text=True, cwd=tree,
                          capture_output=True).returncode:
            verdicts.append(f"does not apply (its lines changed since the run):\n{patch}")
            continue
        subprocess.run(["patch", "-p1", "-s"], input=patch, text=True, cwd=tree, check=True)
        try:
            done = subprocess.run([python, *_test_command(tests)[1:]], cwd=tree, env=env, capture_output=True,
                                  timeout=1800)
            verdict = "survived" if done.returncode == 0 else "killed"
        except subprocess.TimeoutExpired:
            verdict = "killed (timeout)"
        finally:
            subprocess.run(["patch", "-p1", "-R", "-s"], input=patch, text=True, cwd=tree, check=True)
        verdicts.append(f"{verdict}:\n{patch}")
        (OUT / f"{name}.replay{'-' * bool(tag)}{tag}.txt").write_text("\n".join(verdicts))  # a stopped one keeps them
    killed = sum(v.startswith("killed") for v in verdicts)
    return f"{name}: {killed} of {len(verdicts)} survivors killed under {python}"


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
    parser.add_argument("--shards", type=int, default=1, help="processes each module's mutants are split over")
    parser.add_argument("--fresh", action="store_true", help="start each session again")
    parser.add_argument("--report", action="store_true", help="print the scores of the sessions there are")
    parser.add_argument("--replay-with", metavar="PYTHON", help="run each survivor's tests under this Python")
    parser.add_argument("--functions", type=lambda text: set(text.split(",")),
                        help="--replay-with: only the survivors in these functions (comma-separated names; "
                        "<module> for those outside any)")
    parser.add_argument("--not-functions", type=lambda text: set(text.split(",")),
                        help="--replay-with: none of the survivors in these functions")
    parser.add_argument("--tag", default="", help="--replay-with: names its copy and verdicts (replays at once)")
    parser.add_argument("--tests", type=lambda text: text.split(","),
                        help="--replay-with: these pytest node ids instead of the module's tests")
    args = parser.parse_args()
    names = args.modules or list(MODULES)
    OUT.mkdir(exist_ok=True)
    (OUT / ".gitignore").write_text("*\n")
    if args.report:
        lines = [score(name) for name in names]
    elif args.replay_with:
        lines = [replay(name, args.replay_with, args.functions, args.not_functions, args.tag, args.tests)
                 for name in names]
    else:
        with ThreadPoolExecutor(args.jobs) as pool:
            lines = list(pool.map(lambda name: run(name, args.fresh, args.shards), names))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
