"""The conformance kit's checks (``tritonplug.testing``) for the CUDA backend: lowered for sm_90 without a GPU,
run and compared with NumPy where one is visible."""

import pytest

from tritonplug.testing import conformance_checks


@pytest.mark.parametrize("check", conformance_checks("cuda", target_hints={"compute_capability": 90}))
def test_cuda_backend_conforms(check):
    check()
