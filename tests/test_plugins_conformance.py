"""Outside plugins, installed with pip, run the conformance kit as a third party would (``tox -e plugins``):
the example backend (CPU, through Triton's interpreter) and the accelerator backend (oneapi and tpu, lowered)."""

import pytest
from helpers import installed_backends, requires_backend

pytestmark = [pytest.mark.plugins, requires_backend("example"), requires_backend("accelerator")]


def _checks(name):
    if name not in installed_backends():
        return []
    from tritonplug.testing import conformance_checks

    return conformance_checks(name)


@pytest.mark.parametrize("check", _checks("example") + _checks("accelerator"))
def test_outside_backend_conforms(check, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu:example")
    check()
