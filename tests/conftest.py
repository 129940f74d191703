"""Shared fixtures: which backends are installed, which devices are visible, a private cache."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("TRITONPLUG_INTERPRET_CHECK", "1")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # several pytest-xdist workers share one GPU
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def installed_backends() -> set[str]:
    return {ep.name for ep in importlib.metadata.entry_points(group="tritonplug.backends")}


def gpu_platforms() -> list[str]:
    import jax

    found = []
    for platform in ("cuda", "rocm"):
        try:
            if jax.devices(platform):
                found.append(platform)
        except RuntimeError:
            pass
    return found


def requires_backend(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(name not in installed_backends(),
                              reason=f"the tritonplug-{name} plugin is not installed in this environment "
                                     f"(its tests run in `tox -e {'cpu' if name == 'interpret' else name}`)")


def for_backend(name: str):
    """Mark a test as exercising backend ``name`` (tox selects by marker) and skip it where not installed."""
    def apply(test):
        return getattr(pytest.mark, name)(requires_backend(name)(test))
    return apply


requires_cuda_device = pytest.mark.skipif(
    "cuda" not in os.environ.get("TRITONPLUG_TEST_PLATFORMS", "cuda") or not any(p == "cuda" for p in gpu_platforms()),
    reason="no CUDA device is visible")


def execution_platforms() -> list:
    """Platforms numeric tests run on: the interpreter on CPU, and each visible GPU."""
    params = [pytest.param("cpu", marks=requires_backend("interpret"))]
    params.append(pytest.param("cuda", marks=[pytest.mark.cuda, requires_backend("cuda"), requires_cuda_device]))
    return params


@pytest.fixture(params=execution_platforms())
def device(request):
    """A jax.Device of each execution platform; tests put their data on it."""
    import jax

    return jax.devices(request.param)[0]


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests compile into a cache directory of their own, shared by pytest-xdist workers."""
    if "TRITONPLUG_CACHE_DIR" not in os.environ:
        root = tmp_path_factory.getbasetemp()
        shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
        os.environ["TRITONPLUG_CACHE_DIR"] = str(shared / "tritonplug-cache")
    yield
