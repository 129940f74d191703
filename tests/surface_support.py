"""What the jax-triton surface tests (``test_surface_*.py``) share: random data on a device, an add
call, the CUDA payload of a program lowered without a GPU, and the backend marks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import triton
from helpers import for_backend, requires_backend
from kernels import add_kernel

import tritonplug
from tritonplug.inspection import kernel_calls

cuda = for_backend("cuda")  # marked `cuda`: tox -e cuda selects them
interpret = requires_backend("interpret")
RNG = np.random.default_rng(11)


def normal(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def put(device, *arrays):
    return [jax.device_put(a, device) for a in arrays]


def add(x, y, **kw):
    return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_type=jax.typeof(x),
                                  grid=(triton.cdiv(x.size, 32),), BLOCK=32, **kw)


def cuda_payload(fn, *specs):
    text = jax.jit(fn).trace(*specs).lower(lowering_platforms=("cuda",)).as_text()
    return text, kernel_calls(text)


SPEC8 = jax.ShapeDtypeStruct((8,), jnp.float32)
