"""The conformance kit's checks (``tritonplug.testing``) for the ROCm backend, lowered for gfx942 without a GPU."""

import pytest

from tritonplug.testing import conformance_checks


@pytest.mark.parametrize("check", conformance_checks("rocm"))
def test_rocm_backend_conforms(check, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_ROCM_ARCH", "gfx942")
    check()
