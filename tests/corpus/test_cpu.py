"""Each corpus kernel through ``tritonplug.triton_call`` on the CPU (the XLA path by default), in every calling
shape of ``driver.SHAPES``, against a reference of its op. A wrong result fails; so does an error."""

from __future__ import annotations

import pytest

import tritonplug
from corpus import catalog, driver

ENTRIES = catalog.entries()


@pytest.mark.parametrize("shape", driver.SHAPES)
@pytest.mark.parametrize("launch", ENTRIES, ids=[e.id for e in ENTRIES])
def test_kernel_matches_its_reference(launch, shape):
    reason = catalog.missing(launch)
    if reason:
        pytest.skip(reason)
    if launch.gpu_only:
        pytest.skip(launch.gpu_only)
    if launch.triton_error:
        with pytest.raises(tritonplug.KernelSourceError, match=launch.triton_error) as info:
            driver.run(launch, shape)
        assert launch.module.replace(".", "/") + ".py" in str(info.value)
        return
    driver.check(launch, driver.run(launch, shape))
