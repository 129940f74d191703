"""The cache's fault suite, with real processes: the CLI on damaged and read-only caches, full disks, killed
writers and saboteurs running beside writers. Each case: the process survives, the cache ends within its bound,
and the next put and get work."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cache_helpers import (
    entry_bytes,
    entry_path,
    hammer,
    is_consistent,
    key,
    lock_path,
    make_binary,
    make_read_only,
    make_writable,
    plant,
    put_on_a_full_disk,
    put_until_killed,
    sabotage,
    use_read_only_cache,
)

from tritonplug.cache.disk import DiskCache

SPAWN = multiprocessing.get_context("spawn")
TESTS = Path(__file__).parent
SCRIPT = shutil.which("tritonplug", path=os.path.dirname(sys.executable))


def cli(*args: str, cache_dir: Path, obey_file_modes: bool = False) -> subprocess.CompletedProcess:
    """The tritonplug command in a child; with ``obey_file_modes`` a child that dropped its capabilities
    first (so a 0500 cache is read-only even for root) and then runs the command's ``main``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONPLUG_")}
    env.update(JAX_PLATFORMS="cpu", TRITONPLUG_CACHE_DIR=str(cache_dir))
    if obey_file_modes:
        code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); from cache_helpers import obey_file_modes; "
                "obey_file_modes(); from tritonplug.cli.main import main; sys.exit(main(sys.argv[1:]))")
        command = [sys.executable, "-c", code]
    else:
        assert SCRIPT is not None, "the tritonplug console script is not installed beside this Python"
        command = [SCRIPT]
    return subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=120)


def filled(directory: Path, count: int = 4, size: int = 1000) -> DiskCache:
    cache = DiskCache(directory)
    for tag in range(count):
        with cache.key_lock(key(tag)):
            cache.put(key(tag), make_binary(tag, size))
    return cache


def temp_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.tmp"))


def assert_usable(directory: Path, max_bytes: int = 1 << 30) -> None:
    cache = DiskCache(directory, max_bytes)
    assert cache.put(key("usable"), make_binary(77, 500)) is True
    assert cache.get(key("usable")) == make_binary(77, 500)


# --- the command line -----------------------------------------------------------------------------

@pytest.mark.parametrize("action", [["clear"], ["prune", "--max-bytes", "0"], ["prune"]],
                         ids=["clear", "prune-to-0", "prune-nothing-to-evict"])
@pytest.mark.parametrize("lock_file", ["present", "absent"])
def test_cli_on_a_read_only_cache_reports_and_exits_1_without_a_traceback(tmp_path: Path, action: list[str],
                                                                          lock_file: str) -> None:
    directory = tmp_path / "cache"
    filled(directory)
    if lock_file == "absent":
        (directory / "lock").unlink()
    make_read_only(directory)
    try:
        text = cli("cache", *action, cache_dir=directory, obey_file_modes=True)
        as_json = cli("cache", *action, "--json", cache_dir=directory, obey_file_modes=True)
        stats = cli("cache", "stats", "--json", cache_dir=directory, obey_file_modes=True)
    finally:
        make_writable(directory)
    verb = action[0]
    for done in (text, as_json):
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout
        assert f"{verb} the kernel cache at {directory}" in done.stderr
        assert "read-only" in done.stderr, done.stderr
    report = json.loads(as_json.stdout)
    assert report["entries"] == 4 and f"{verb} the kernel cache" in report["error"]
    assert stats.returncode == 0 and json.loads(stats.stdout)["entries"] == 4
    assert DiskCache(directory).stats().entries == 4, "nothing was lost"
    assert DiskCache(directory).clear() == 4


def test_cli_clear_removes_damage_locks_and_dead_writers_temp_files(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    filled(directory)
    for i, kind in enumerate(["directory tree", "fifo", "socket", "dangling symlink"]):
        plant(entry_path(directory, key(f"bad-{i}")), kind)
        plant(lock_path(directory, key(f"badlock-{i}")), kind)
    orphan = entry_path(directory, key(0)).with_name(f".{key(0)}.999999999.0000.tmp")
    orphan.write_bytes(b"a dead writer's")
    assert len(list((directory / "locks").rglob("*.lock"))) == 8

    done = cli("cache", "clear", cache_dir=directory)
    assert done.returncode == 0, done.stderr
    assert "removed_entries: 4\n" in done.stdout and "entries: 0\n" in done.stdout
    leftovers = [p for p in directory.rglob("*") if not p.is_dir() or p.is_symlink()]
    assert sorted(p.name for p in leftovers) == ["lock", "size"], leftovers
    assert_usable(directory)


def test_cli_prune_with_a_directory_entry_keeps_the_bound(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    cache = filled(directory, count=10, size=10_000)
    plant(entry_path(directory, key("dir")), "directory tree")
    bound = 3 * entry_path(directory, key(0)).stat().st_size
    done = cli("cache", "prune", "--max-bytes", str(bound), "--json", cache_dir=directory)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["removed_entries"], report["entries"]) == (7, 3)
    assert entry_bytes(directory) <= bound and not entry_path(directory, key("dir")).exists()
    assert cache.stats().entries == 3
    assert_usable(directory)


def test_cli_on_an_unsafe_cache_names_the_fix(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    filled(directory)
    (directory / "locks").chmod(0o777)
    done = cli("cache", "clear", cache_dir=directory)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"cannot use the kernel cache: {directory / 'locks'}" in done.stderr
    assert f"`chmod go-w {directory / 'locks'}`" in done.stderr
    assert len(list(directory.glob("entries/*/*.bin"))) == 4, "an unsafe cache is not touched"


def test_cli_info_and_stats_report_an_unusable_cache_and_a_bad_bound(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    filled(directory)
    (directory / "entries").chmod(0o770)
    info = cli("info", "--json", cache_dir=directory)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["cache"].startswith(f"not usable: {directory / 'entries'} in the cache directory")
    (directory / "entries").chmod(0o700)
    env_bad = {**os.environ, "JAX_PLATFORMS": "cpu", "TRITONPLUG_CACHE_DIR": str(directory),
               "TRITONPLUG_CACHE_MAX_BYTES": "lots"}
    stats = subprocess.run([SCRIPT, "cache", "stats"], env=env_bad, capture_output=True, text=True, timeout=120)
    assert stats.returncode == 1 and "Traceback" not in stats.stderr
    assert "TRITONPLUG_CACHE_MAX_BYTES must be a non-negative integer, got 'lots'" in stats.stderr


# --- full disk, killed writers, several processes --------------------------------------------------

def test_a_full_disk_fails_puts_quietly_and_the_cache_recovers(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    bound = 300_000
    with SPAWN.Pool(1) as pool:
        result = pool.apply(put_on_a_full_disk, (str(directory), bound))
    assert all(result["before"]) and not any(result["during"]) and all(result["after"])
    assert result["hits_during"] == 10, "what was cached stays readable while the disk is full"
    assert len(result["warnings"]) == 1 and str(directory) in result["warnings"][0]
    assert result["got"]
    assert list(directory.rglob("*.tmp")) == [], "no half-written file left behind"
    assert entry_bytes(directory) <= bound
    assert_usable(directory, bound)


def test_a_writer_killed_mid_put_leaves_a_cache_that_heals(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    DiskCache(directory)
    process = SPAWN.Process(target=put_until_killed, args=(str(directory),))
    process.start()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:  # catch it with a temp file half written: stop it, look, go on
            if temp_files(directory):
                os.kill(process.pid, signal.SIGSTOP)
                if temp_files(directory):
                    break
                os.kill(process.pid, signal.SIGCONT)
        assert temp_files(directory), "never caught the writer mid-put"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join()
    cache = DiskCache(directory, 300_000)
    cache.prune()
    assert list(directory.rglob("*.tmp")) == [], "the killed writer's temp file is an orphan: its pid is gone"
    assert entry_bytes(directory) <= 300_000
    assert all(cache.get(key(1000 + t)) in (None, make_binary(t, 200_000)) for t in range(50))
    assert_usable(directory, 300_000)


def test_writers_beside_a_saboteur_survive_and_the_cache_stays_within_300kb(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    bound = 300_000
    DiskCache(directory, bound)
    with SPAWN.Pool(4) as pool:
        writers = [pool.apply_async(hammer, (str(directory), w, 150, bound)) for w in range(3)]
        saboteur = pool.apply_async(sabotage, (str(directory), 400))
        problems = [p for job in writers for p in job.get(timeout=300)] + saboteur.get(timeout=300)
    assert problems == []
    assert entry_bytes(directory) <= bound
    cache = DiskCache(directory, bound)
    assert cache.stats().total_bytes <= bound
    cache.prune()  # damage the saboteur left after the last scan goes now
    assert all(p.is_file() for p in directory.glob("entries/*/*.bin"))
    assert_usable(directory, bound)


def test_a_read_only_cache_serves_what_it_has_and_refuses_writes_with_one_warning(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    cache = DiskCache(directory)
    cache.put(key("old"), make_binary(1, 100))
    make_read_only(directory)
    try:
        with SPAWN.Pool(1) as pool:
            result = pool.apply(use_read_only_cache, (str(directory), key("old")))
    finally:
        make_writable(directory)
    assert result["puts"] == [False, False] and result["locked"] and result["got_existing"]
    assert len(result["warnings"]) == 1 and str(directory) in result["warnings"][0]
    assert list(directory.rglob("*.tmp")) == []
    assert_usable(directory)


# --- several processes ----------------------------------------------------------------------------

def _hammer(directory: str, worker: int, rounds: int, max_bytes: int) -> tuple[int, int, list[str]]:
    cache = DiskCache(directory, max_bytes)
    shared, own, neighbour = key("shared"), key(f"own-{worker}"), key(f"own-{(worker + 1) % 6}")
    mine = make_binary(100 + worker, 20_000)
    hits = misses = 0
    problems = []
    for i in range(rounds):
        if not cache.put(shared, make_binary(worker, 40_000 + 3_000 * worker + i)):
            problems.append(f"put of the shared key failed in round {i}")
        if not cache.put(own, mine):
            problems.append(f"put of the own key failed in round {i}")
        for k in (shared, own, neighbour):
            got = cache.get(k)
            if got is None:
                if k != neighbour:  # the neighbour may not have started yet; the others were just put
                    misses += 1
            elif not is_consistent(got) or (k == own and got != mine):
                problems.append(f"bad entry for {k[:8]} in round {i}: {got.kernel_name}")
            else:
                hits += 1
    return hits, misses, problems


@pytest.mark.parametrize("bounded", [False, True], ids=["unbounded", "evicting"])
def test_concurrent_writers_and_readers(tmp_path: Path, bounded: bool) -> None:
    directory = tmp_path / "shared-cache"
    max_bytes = 150_000 if bounded else 1 << 30
    DiskCache(directory, max_bytes)
    with SPAWN.Pool(6) as pool:
        results = pool.starmap(_hammer, [(str(directory), w, 40, max_bytes) for w in range(6)])
    problems = [p for _, _, found in results for p in found]
    assert problems == []
    assert sum(hits for hits, _, _ in results) > 0
    if not bounded:
        assert sum(misses for _, misses, _ in results) == 0, "a get after one's own put must hit"
    cache = DiskCache(directory, max_bytes)
    assert temp_files(directory) == []
    assert cache.stats().total_bytes <= max_bytes
    got = cache.get(key("shared"))
    assert (bounded and got is None) or is_consistent(got)


def _critical_section(directory: str, k: str, barrier, log_path: str, use_lock: bool) -> None:
    cache = DiskCache(directory)
    barrier.wait()
    for _ in range(3):
        with cache.key_lock(k) if use_lock else contextlib.nullcontext():
            with open(log_path, "a") as f:
                f.write(f"enter {os.getpid()}\n")
            time.sleep(0.15)
            with open(log_path, "a") as f:
                f.write(f"leave {os.getpid()}\n")


def _most_inside_at_once(log_path: Path) -> int:
    inside = most = 0
    for line in log_path.read_text().splitlines():
        inside += 1 if line.startswith("enter") else -1
        most = max(most, inside)
    return most


@pytest.mark.parametrize("use_lock", [True, False], ids=["key_lock", "control-without-lock"])
def test_key_lock_serialises_processes(tmp_path: Path, use_lock: bool) -> None:
    directory, log_path = tmp_path / "cache", tmp_path / "log"
    DiskCache(directory)
    barrier = SPAWN.Barrier(2)
    args = (str(directory), key("lock"), barrier, str(log_path), use_lock)
    procs = [SPAWN.Process(target=_critical_section, args=args) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(log_path.read_text().splitlines()) == 12
    assert _most_inside_at_once(log_path) == (1 if use_lock else 2)
