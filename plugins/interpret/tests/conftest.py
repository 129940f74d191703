"""Session setup for the interpret plugin's tests, from the conformance kit (``tritonplug.testing``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))  # plugin_test_support (this repo's)

from tritonplug.testing import configure_environment, private_cache_fixture  # noqa: E402

configure_environment()
_private_cache = private_cache_fixture()
