"""What every test session needs before anything is imported or compiled: the environment the
tests expect and a private tritonplug cache directory. Each conftest (``tests/`` and each
``plugins/<name>/tests/``) calls these; test modules never import a conftest."""

from __future__ import annotations

import os

import pytest


def configure_environment() -> None:
    """Checked interpreter runs, no GPU memory preallocation, Triton's fp fusion on, compiles at lowering
    (unless set)."""
    os.environ.setdefault("TRITONPLUG_INTERPRET_CHECK", "1")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # several pytest-xdist workers share one GPU
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    # Compiles that start at trace time run on background threads; tests that count compiles expect them
    # when lowering. tests/test_startup.py turns them on where it tests them.
    os.environ.setdefault("TRITONPLUG_EARLY_COMPILE", "0")


def use_private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Point ``TRITONPLUG_CACHE_DIR`` at a directory of this run, shared by its pytest-xdist workers."""
    if "TRITONPLUG_CACHE_DIR" not in os.environ:
        root = tmp_path_factory.getbasetemp()
        shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
        os.environ["TRITONPLUG_CACHE_DIR"] = str(shared / "tritonplug-cache")
