"""Hosts of a fleet: subprocesses running tests/fleet_child.py, each with a cache directory of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

CHILD = Path(__file__).resolve().parents[3] / "tests" / "fleet_child.py"


def host_env(url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONPLUG_REMOTE")}
    env["TRITONPLUG_CACHE_DIR"] = tempfile.mkdtemp(prefix="tritonplug-host-")
    env["TRITONPLUG_COMPILE_WORKERS"] = env.get("TRITONPLUG_COMPILE_WORKERS", "2")
    if url is not None:
        env["TRITONPLUG_REMOTE_CACHE"] = url
    env.update(extra)
    return env


def start_host(url: str | None, configs: int, salt: int, args: Sequence[str] = (), **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(CHILD), str(configs), str(salt), *args], env=host_env(url, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def result(process: subprocess.Popen, timeout: float = 240) -> dict:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"host failed ({process.returncode}):\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])


def run_host(url: str | None, configs: int, salt: int, **env: str) -> dict:
    return result(start_host(url, configs, salt, **env))


def remote_warnings(report: dict) -> list[str]:
    return [w for w in report["warnings"] if "remote kernel cache" in w]
