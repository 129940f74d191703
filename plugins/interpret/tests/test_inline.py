"""``triton_call(..., inline=True)``: the kernel lowered as its translation to XLA ops on every platform, by the
backend that declares ``inlines`` (this plugin), so no custom call stands between XLA and the kernel's neighbours.

Lowered for CUDA on a machine without a GPU (JAX lowers for any platform): the program holds XLA ops and no
kernel call; run on the CPU, the inlined call's numbers are NumPy's. A kernel the XLA path cannot translate whole
is refused, naming why, since no interpreter runs on a GPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from helpers import requires_backend
from kernels import scaled_add_kernel
from xla_kernels import cas_vector_kernel

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
KERNEL_CALLS = ("triton_kernel_call", "tritonplug_host_kernel")  # jaxlib's GPU kernel call, the interpreter's


def scaled_add(x, y, alpha, **options):
    return tritonplug.triton_call(x, y, x.size, alpha, kernel=scaled_add_kernel,
                                  out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(triton.cdiv(x.size, 128),), BLOCK=128, **options)


def test_an_inlined_call_lowers_for_cuda_as_xla_ops_without_a_kernel_call():
    spec = jax.ShapeDtypeStruct((1000,), jnp.float32)
    text = jax.jit(lambda x, y: scaled_add(x, y, 3.0, inline=True)).trace(spec, spec).lower(
        lowering_platforms=("cuda",)).as_text()
    assert not any(target in text for target in KERNEL_CALLS), text[:2000]
    assert "stablehlo.multiply" in text and "stablehlo.add" in text  # the kernel's arithmetic, as XLA ops


def test_an_inlined_call_computes_what_numpy_does():
    rng = np.random.default_rng(0)
    x, y = (jnp.asarray(rng.standard_normal(1000), jnp.float32) for _ in range(2))
    program = jax.jit(lambda x, y: scaled_add(x, y, -1.5, inline=True))
    assert not any(target in program.lower(x, y).as_text() for target in KERNEL_CALLS)
    np.testing.assert_allclose(np.asarray(program(x, y)), np.asarray(x) * -1.5 + np.asarray(y), rtol=1e-6, atol=1e-6)


def test_inline_refuses_a_kernel_the_translation_does_not_hold_naming_why():
    def fn():
        return tritonplug.triton_call(kernel=cas_vector_kernel, out_type=(jax.ShapeDtypeStruct((8,), jnp.int32),) * 2,
                                      grid=(1,), BLOCK=8, zeroed_outputs=(0,), inline=True)

    with pytest.raises(NotImplementedError, match=r"cas_vector_kernel.*cannot be inlined on 'cuda'.*tt\.atomic_cas"):
        jax.jit(fn).trace().lower(lowering_platforms=("cuda",))


@pytest.mark.parametrize("value", [1, "yes", 0.5])
def test_inline_takes_a_bool_or_auto_refused_at_the_call(value):
    x = jnp.ones((8,), jnp.float32)
    with pytest.raises((TypeError, ValueError), match=r"inline must be True .*, False .*, 'auto' .* or None .*got"):
        scaled_add(x, x, 1.0, inline=value)
