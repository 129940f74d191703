"""Session setup for the cuda plugin's tests: the environment and private cache of tests/."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))  # the shared test helper modules

from session_setup import configure_environment, use_private_cache  # noqa: E402

configure_environment()


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    use_private_cache(tmp_path_factory)
