"""Outside plugins, installed with pip, run the conformance kit as a third party would (``tox -e plugins``):
the example backend (CPU, through Triton's interpreter) and the accelerator backend (oneapi and tpu, lowered)."""

import pytest
from helpers import installed_backends

pytestmark = [pytest.mark.plugins,
              pytest.mark.skipif(not {"example", "accelerator"} <= installed_backends(),
                                 reason="the outside example plugins are installed by `tox -e plugins`")]


def _checks(name):
    if name not in installed_backends():
        return []
    from tritonplug.testing import conformance_checks

    return conformance_checks(name)


@pytest.mark.parametrize("check", _checks("example") + _checks("accelerator"))
def test_outside_backend_conforms(check, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu:example")
    check()
