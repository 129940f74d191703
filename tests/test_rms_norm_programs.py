"""The RMSNorm port's backward program count (``examples/ports/liger_rms_norm.py: equal_loops``): Liger launches
one program per SM, each looping over its share of the rows; the port takes a count that divides the rows, so
every program loops equally often, which the XLA path translates without a while loop, gathers or scatters (the
condition for ``inline="auto"`` to try inlining it). On the CPU with a GPU's SM count (132, an H200's), against
NumPy, and the translation counted."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from helpers import requires_backend
from hypothesis import given
from hypothesis import strategies as st

import tritonplug

ports = pytest.importorskip("ports.liger_rms_norm", reason="liger-kernel is not installed (tox's cpu env installs it)")
pytestmark = requires_backend("interpret")


@given(n_rows=st.integers(1, 70_000), programs=st.integers(1, 200))
def test_the_count_divides_the_rows_where_one_of_at_least_half_the_programs_does(n_rows, programs):
    count = ports.equal_loops(n_rows, programs)
    dividing = [c for c in range(max(programs // 2, 1), min(programs, n_rows) + 1) if n_rows % c == 0]
    assert count == (max(dividing) if dividing else programs)


@tritonplug.torch_launcher
def backward_in(dY, X, W, RSTD, programs):
    """Liger's row backward kernel launched as the port launches it (``casting_mode`` llama, an affine weight),
    over ``programs`` programs: dX and the per-program dW partials."""
    n_rows, n_cols = dY.shape
    dX = tritonplug.empty_like(dY)
    dW = tritonplug.empty((programs, n_cols), dtype=jnp.float32)
    ports._rms_norm_backward_kernel[(programs,)](
        dY, dY.stride(0), dX, dX.stride(0), X, X.stride(0), ports.torch_to_triton_dtype[X.dtype], W, W.stride(0),
        RSTD, RSTD.stride(0), dW, dW.stride(0), n_rows, n_cols, 0.0, math.ceil(n_rows / programs),
        ports._str_to_casting_mode["llama"], elementwise_affine=True, BLOCK_SIZE=triton.next_power_of_2(n_cols),
        COMPUTE_DW=True, num_warps=4)
    return dX, dW


@pytest.fixture
def inlined():
    """The kernel inlined (as ``"auto"`` would inline it), so its lowering checks the translation (``paths()``)."""
    tritonplug.set_inline(ports._lib._rms_norm_backward_kernel, True)
    yield
    tritonplug.set_inline(ports._lib._rms_norm_backward_kernel, "auto")  # the port's own default


def _backward(rows: int, hidden: int, programs: int) -> tuple[dict, list]:
    """The backward at ``rows × hidden`` over ``programs`` programs: its translation's unfusible ops, and dX and
    dW (its partials summed) with NumPy's."""
    rng = np.random.default_rng(0)
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((rows, hidden), (hidden,), (rows, hidden)))
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=1) + 1e-6)

    def run(dy, x, w, rstd):
        dX, dW = backward_in(dy, x, w, rstd, programs)
        return dX, jnp.sum(dW, axis=0)

    args = [jnp.asarray(a) for a in (dy, x, w, rstd)]
    before = len(tritonplug.inspection.paths())
    got = jax.jit(run)(*args)
    (taken,) = tritonplug.inspection.paths()[before:]
    assert taken.path == "inlined" and taken.unfusible is not None, taken
    xhat = x * rstd[:, None]
    g = dy * w
    want_dx = rstd[:, None] * (g - xhat * np.mean(g * xhat, axis=1, keepdims=True))
    return taken.unfusible, [(np.asarray(got[0]), want_dx), (np.asarray(got[1]), np.sum(dy * xhat, axis=0))]


@pytest.mark.parametrize("rows", [16384, 1000])  # 1000: 125 programs of 8 rows, not a power of two
def test_programs_looping_equally_often_translate_without_loops(rows, inlined):
    counts, grads = _backward(rows, 64, ports.equal_loops(rows, 132))  # 132: an H200's SM count
    assert not any(counts.values()), counts
    for got, want in grads:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_liger_s_own_count_translates_without_a_loop_too(inlined):
    """132 programs over 16,384 rows (Liger's count), the last looping 9 times and not 125: once a while loop with
    gathers and scatters, now the trips of the longest, each predicated on the program's own bound
    (``plugins/interpret/tests/test_xla_uneven_loops.py``). The port keeps its dividing count: no trip wasted."""
    counts, grads = _backward(16384, 64, 132)
    assert counts == {"gather": 0, "scatter": 0, "while": 0}, counts
    for got, want in grads:  # right either way
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
