"""The XLA path translates a kernel once per (TTIR, launch, checked mode) in a process.

The trial that decides between the XLA path and the interpreter traces the whole grid; the lowering reuses that
trace, and lowering the same call again (another ``jax.jit`` of the same function, a retrace) reuses the
translation. What changes the kernel (its shapes, checked mode) gets a translation of its own.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]


@triton.jit
def _shifted_square_kernel(x_ptr, n, out_ptr, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (x + SHIFT) * (x + SHIFT), mask=mask)


def _shifted_square(x):
    return tritonplug.triton_call(x, x.size, kernel=_shifted_square_kernel,
                                  out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(triton.cdiv(x.size, 128),), SHIFT=3, BLOCK=128)


@pytest.fixture
def traces(monkeypatch):
    """How many times a translation traced its grid (the translator's work), counted around the real method."""
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")
    from tritonplug_interpret.xla import driver

    count = {"n": 0}
    real = driver.Translation._run

    def counted(self, operands, results):
        count["n"] += 1
        return real(self, operands, results)

    monkeypatch.setattr(driver.Translation, "_run", counted)
    return count


def test_lowering_the_same_call_again_reuses_the_translation(traces, monkeypatch):
    x = np.linspace(-2, 2, 1000, dtype=np.float32)
    want = (x + 3) ** 2
    for _ in range(3):     # three jit objects, three lowerings of the same call
        got = jax.jit(lambda a: _shifted_square(a))(x)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    assert traces["n"] == 1, f"the grid was traced {traces['n']} times for one kernel and launch"

    y = np.linspace(0, 1, 777, dtype=np.float32)      # other shapes: another launch, another translation
    np.testing.assert_allclose(np.asarray(jax.jit(_shifted_square)(y)), (y + 3) ** 2, rtol=1e-6)
    assert traces["n"] == 2

    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")   # checked mode is part of what the kernel does
    np.testing.assert_allclose(np.asarray(jax.jit(lambda a: _shifted_square(a))(x)), want, rtol=1e-6)
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "1")
    np.testing.assert_allclose(np.asarray(jax.jit(lambda a: _shifted_square(a))(x)), want, rtol=1e-6)
    assert traces["n"] in (3, 4), traces   # one new translation for the mode this run did not use before


def test_a_reused_translation_is_right_under_vmap(traces):
    x = jnp.linspace(-1, 1, 300, dtype=jnp.float32)
    first = jax.jit(_shifted_square)(x)
    batched = jax.jit(jax.vmap(_shifted_square))(jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(np.asarray(batched[0]), np.asarray(first), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(batched[1]), np.asarray((2 * x + 3) ** 2), rtol=1e-6)


@triton.jit
def _fill_kernel(out_ptr, value, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], tl.float32) + value)


def test_scalars_equal_but_not_identical_get_translations_of_their_own(traces):
    """Scalars are baked into a translation: -0.0 and 0.0 compare equal but are different kernels."""
    def fill(value):
        out = jax.ShapeDtypeStruct((16,), jnp.float32)
        return tritonplug.triton_call(value=value, kernel=_fill_kernel, out_type=out, grid=(1,), BLOCK=16)

    negative = np.asarray(jax.jit(lambda: fill(-0.0))())
    positive = np.asarray(jax.jit(lambda: fill(0.0))())
    assert np.all(np.signbit(negative)) and not np.any(np.signbit(positive))
    assert traces["n"] == 2
