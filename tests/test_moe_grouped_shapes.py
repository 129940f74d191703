"""``grouped_matmul`` at drawn shapes, as outside code calls it: any rows, depth, columns and group count (1 and
odd sizes included, none a multiple of a block), group sizes drawn with empty groups and a sum under the rows;
forward and both gradients against ``jax.lax.ragged_dot`` and NumPy on the CPU. ``test_moe_grouped.py`` holds
one shape and draws many group sizes; this draws the shapes (each compiles the translated kernels again, so few).

Needs vLLM 0.33.0 installed, as ``test_moe_grouped.py``."""

from __future__ import annotations

import importlib.machinery

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_moe_grouped import numpy_ragged_dot

from examples.moe.ops import grouped_matmul

pytestmark = pytest.mark.skipif(importlib.machinery.PathFinder.find_spec("vllm") is None,  # finds, never imports
                                reason="vllm is not installed (tox -e corpus installs vllm==0.33.0 with --no-deps)")


@st.composite
def problems(draw):
    """``(m, k, n, sizes)``: sizes of ``g`` groups summing to at most ``m``."""
    m, k, n, g = (draw(st.integers(1, hi)) for hi in (70, 40, 40, 6))
    cuts = sorted(draw(st.lists(st.integers(0, m), min_size=g, max_size=g)))
    return m, k, n, np.diff([0, *cuts]).astype(np.int32)


def _loss(matmul, lhs, rhs, sizes, w):
    return jnp.sum(matmul(lhs, rhs, sizes) * w)


@settings(deadline=None, max_examples=6, suppress_health_check=[HealthCheck.too_slow])
@example(problem=(1, 1, 1, np.array([1], np.int32)))
@example(problem=(33, 17, 9, np.array([0, 20, 0], np.int32)))
@given(problem=problems())
def test_forward_and_gradients_match_ragged_dot(problem):
    m, k, n, sizes = problem
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)
    lhs, rhs, w = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (len(sizes), k, n), (m, n)))
    args = (jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(sizes))
    got = np.asarray(jax.jit(grouped_matmul)(*args))
    np.testing.assert_allclose(got, numpy_ragged_dot(lhs, rhs, sizes), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, np.asarray(jax.lax.ragged_dot(*args)), rtol=1e-5, atol=1e-5)
    ours, theirs = (jax.jit(jax.grad(lambda a, b, s, w, f=f: _loss(f, a, b, s, w), argnums=(0, 1)))(*args, w)
                    for f in (grouped_matmul, jax.lax.ragged_dot))
    for name, g, want in zip(("d lhs", "d rhs"), ours, theirs, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-5, atol=1e-5, err_msg=name)
