"""The conformance kit's checks (``tritonplug.testing``) for the CPU backend: every kernel run and compared with
NumPy."""

import pytest

from tritonplug.testing import conformance_checks


@pytest.mark.parametrize("check", conformance_checks("interpret"))
def test_interpret_backend_conforms(check):
    check()
