"""Shared fixtures: the environment, a private cache, a fresh process state, and each execution device.

Helpers (installed backends, device marks) live in ``helpers.py``; test modules import them from there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests"))

from helpers import execution_platforms  # noqa: E402
from session_setup import configure_environment, use_private_cache  # noqa: E402

configure_environment()

# Property tests draw the same examples on every run (a red CI run is then a real failure, found again by the
# next run); HYPOTHESIS_PROFILE=explore draws new ones, for a non-gating search.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(params=execution_platforms())
def device(request):
    """A jax.Device of each execution platform; tests put their data on it."""
    import jax

    return jax.devices(request.param)[0]


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests compile into a cache directory of their own, shared by pytest-xdist workers."""
    use_private_cache(tmp_path_factory)
    yield


@pytest.fixture
def fresh_state():
    """tritonplug's process state (tritonplug.process.state.state) forgotten before and after the test, as a new
    process would start: compiled binaries in memory, the cache handle, memoised calls."""
    from tritonplug.process.state import state

    state.reset()
    yield state
    state.reset()


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_state):
    """A new, empty cache directory for this test, with a fresh process state."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("TRITONPLUG_CACHE_DIR", str(directory))
    fresh_state.reset()
    yield directory
    monkeypatch.undo()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``-n N``'s default distribution, with each child suite's tests on one worker (``suite_scheduling``)."""
    if config.getvalue("dist") != "load":
        return None
    from suite_scheduling import SuiteScheduling

    return SuiteScheduling(config, log)
