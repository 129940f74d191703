"""``tritonplug.debug.replay``: the kernel behind an out-of-bounds access, named on the CPU."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend

import tritonplug


@triton.jit
def unmasked_copy(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))  # no mask: the last program reads past x


def copy(x):
    return tritonplug.triton_call(x, kernel=unmasked_copy, out_type=jax.ShapeDtypeStruct((128,), x.dtype),
                                  grid=(2,), BLOCK=64)


@requires_backend("interpret")
@pytest.mark.parametrize("size", [100, 128])
def test_replay_names_the_kernel_and_argument_of_an_out_of_bounds_access(size, monkeypatch):
    monkeypatch.delenv("TRITONPLUG_INTERPRET_CHECK", raising=False)
    x = np.arange(size, dtype=np.float32)
    if size == 128:  # in bounds: the result, on the CPU
        out = tritonplug.debug.replay(jax.jit(copy), x)
        np.testing.assert_array_equal(np.asarray(out), x)
        assert out.devices() == {jax.devices("cpu")[0]}
        return
    with pytest.raises(IndexError, match=r"kernel 'unmasked_copy': out-of-bounds load .* argument 'x_ptr'"):
        tritonplug.debug.replay(jax.jit(copy), jnp.asarray(x))
    assert "TRITONPLUG_INTERPRET_CHECK" not in os.environ  # restored
