"""On a GPU: each corpus kernel launched by Triton itself on torch tensors and by tritonplug on JAX arrays
(the same kernel object, the same inputs), compared buffer by buffer. Skips with the reason when torch or a
GPU is not visible. Run: ``pytest -m cuda tests/corpus/test_cuda.py`` (``tox -e cuda`` includes it)."""

from __future__ import annotations

import pytest

import tritonplug
from corpus import catalog, driver, torch_driver

ENTRIES = catalog.entries()
pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("shape", ("library", "out_type"))
@pytest.mark.parametrize("launch", ENTRIES, ids=[e.id for e in ENTRIES])
def test_same_buffers_as_triton(launch, shape):
    reason = torch_driver.unavailable()
    if reason:
        pytest.skip(reason)
    reason = catalog.missing(launch)
    if reason:
        pytest.skip(reason)
    if launch.triton_error:
        with pytest.raises(Exception, match=launch.triton_error):
            torch_driver.run_triton(launch)
        with pytest.raises(tritonplug.KernelSourceError, match=launch.triton_error):
            driver.run(launch, shape)
        return
    want = torch_driver.run_triton(launch)
    torch_driver.compare(launch, driver.run(launch, shape), want)
