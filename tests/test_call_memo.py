"""Repeat calls reuse their memoised spec; anything that changes the binding must miss."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from helpers import requires_backend
from kernels import add_kernel, two_outputs_kernel

import tritonplug
from tritonplug.eager import keys
from tritonplug.process.state import state

pytestmark = requires_backend("interpret")


def add(x, y, **kwargs):
    return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(tritonplug.cdiv(x.size, 64),), BLOCK=64, **kwargs)


def test_identical_calls_hit_and_compute_with_the_new_arrays():
    x, y = jnp.arange(100, dtype=jnp.float32), jnp.ones(100, jnp.float32)
    np.testing.assert_allclose(np.asarray(add(x, y)), np.asarray(x + y))
    key = keys.signature(add_kernel, (x, y, x.size), {"BLOCK": 64, "grid": (2,)},
                              jax.ShapeDtypeStruct(x.shape, x.dtype))
    assert key is not None
    entries = len(state.memo.entries)
    z = x * 3
    np.testing.assert_allclose(np.asarray(add(z, y)), np.asarray(z + y))  # same signature, new data
    assert len(state.memo.entries) == entries


def test_signature_changes_miss():
    x = jnp.ones(64, jnp.float32)
    before = len(state.memo.entries)
    add(x, x)
    add(x[:32], x[:32])                      # another shape
    add(x.astype(jnp.float16), x.astype(jnp.float16))  # another dtype
    assert len(state.memo.entries) >= before + 2


def test_scalar_values_and_signs_are_part_of_the_signature():
    x = jnp.arange(8, dtype=jnp.float32)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)

    def call(scale):
        return tritonplug.triton_call(x, scale, x.size, kernel=two_outputs_kernel, out_shape=(spec, spec), grid=(1,),
                                      BLOCK=8)[1]

    np.testing.assert_array_equal(np.asarray(call(2.0)), np.asarray(x) * 2)
    np.testing.assert_array_equal(np.asarray(call(3.0)), np.asarray(x) * 3)
    assert np.signbit(np.asarray(call(-0.0))[1]) and not np.signbit(np.asarray(call(0.0))[1])


def test_refs_are_never_memoised():
    assert keys.signature(add_kernel, (jax.new_ref(jnp.ones(4)),), {}, ()) is None


_xla_compiles: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, seconds, **kw: _xla_compiles.append(name) if name == "/jax/core/compile/backend_compile_duration"
    else None)


def test_an_eager_call_and_its_repeats_compile_the_program_once():
    """The first eager call and the memoised repeats run the same jitted function, so XLA compiles once."""
    x, y = jnp.arange(117, dtype=jnp.float32), jnp.ones(117, jnp.float32)  # a shape no other test uses
    before = len(_xla_compiles)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(add(x, y)), np.asarray(x + y))
    assert len(_xla_compiles) - before == 1 + 1  # the kernel's program, and x + y's
