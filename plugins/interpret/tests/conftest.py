"""Session setup for the interpret plugin's tests, from the conformance kit (``tritonplug.testing``).

The plugin owns its tests: its hooks, the interpreter path, and the TTIR → XLA translator (``test_xla_*.py`` with
their kernels, ``xla_*kernels.py``). The host's ``tests/`` use the plugin only through the host
(``tests/test_structure.py`` holds them to it). This repository's ``tests/`` (shared helpers such as
``helpers.py``, ``plugin_test_support.py``) and ``examples/`` (kernels some tests reuse) are on ``sys.path``.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests"))

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from tritonplug.testing import configure_environment, private_cache_fixture  # noqa: E402

configure_environment()
_private_cache = private_cache_fixture()


@pytest.fixture
def fresh_xla_path(monkeypatch):
    """The XLA path for the CPU backend, and every kernel translated afresh (none reused from another test): for
    tests that use it with ``pytest.mark.usefixtures``."""
    from tritonplug_interpret import paths
    from tritonplug_interpret.recent import Recent

    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")
    monkeypatch.setattr(paths, "_KERNELS", Recent(64))

# As tests/conftest.py: the same examples on every run; HYPOTHESIS_PROFILE=explore draws new ones.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
