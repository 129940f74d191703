"""Tiles with few columns (128 x 16, as in the masked steps of Triton's attention backward) are computed on their
transposes on the XLA path, which XLA:CPU compiles faster; the numbers must be the same to the bit.

Checked against the same kernel translated without the rule (bit for bit) and against NumPy, for a kernel whose
elementwise work (exp2, a causal mask, a cast to fp16 and back) runs on narrow tiles, and for the same kernel on
wider, square and very narrow tiles, which are not transposed.
"""

from __future__ import annotations

import re

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
def _masked_exp_kernel(x_ptr, lse_ptr, out_ptr, n_cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * COLS + tl.arange(0, COLS)
    offs = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs)
    p = tl.math.exp2(x - tl.load(lse_ptr + cols)[None, :])
    p = tl.where(cols[None, :] <= rows[:, None], p, 0.0)
    tl.store(out_ptr + offs, (p * (x - 0.5)).to(tl.float16).to(tl.float32))


def _call(x, lse, rows, cols):
    return tritonplug.triton_call(x, lse, n_cols=x.shape[1], kernel=_masked_exp_kernel,
                                  out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(x.shape[0] // rows, x.shape[1] // cols), ROWS=rows, COLS=cols)


def _reference(x, lse):
    r, c = np.indices(x.shape)
    p = np.exp2(x - lse[None, :]).astype(np.float32)
    p = np.where(c <= r, p, np.float32(0))
    return (p * (x - np.float32(0.5))).astype(np.float16).astype(np.float32)


def _flips(text: str, rows: int, cols: int) -> int:
    """How many transposes swap a (batched) rows x cols tile's two dimensions."""
    return len(re.findall(rf"stablehlo.transpose %\S+, dims = \[0, 2, 1\] : \(tensor<\d+x{rows}x{cols}x", text))


@pytest.mark.parametrize(("rows", "cols", "transposed"), [(128, 16, True), (64, 16, True), (16, 128, False),
                                                          (128, 2, False), (32, 32, False)])
def test_narrow_tiles_are_computed_across_and_exactly(monkeypatch, rows, cols, transposed):
    from tritonplug_interpret import paths
    from tritonplug_interpret.recent import Recent
    from tritonplug_interpret.xla import elementwise

    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")
    rng = np.random.default_rng(rows * 1000 + cols)
    x = rng.normal(size=(256, 128)).astype(np.float32)
    lse = rng.normal(size=128).astype(np.float32)
    texts, results = [], []
    for narrow in (range(0), elementwise.NARROW_COLUMNS):     # the rule off, then on (translated afresh each time)
        monkeypatch.setattr(elementwise, "NARROW_COLUMNS", narrow)
        monkeypatch.setattr(paths, "_KERNELS", Recent(64))
        fn = jax.jit(lambda a, b: _call(a, b, rows, cols))
        texts.append(fn.lower(x, lse).as_text())
        assert "tritonplug_host_kernel" not in texts[-1], "the kernel was not translated to XLA"
        results.append(np.asarray(fn(x, lse)))
        # XLA's exp2 and NumPy's may differ in the last bit, which the cast to fp16 can round either way
        np.testing.assert_allclose(results[-1], _reference(x, lse), rtol=2e-3, atol=1e-6)
    np.testing.assert_array_equal(results[1], results[0])     # computed across or not: the same bits
    off, on = (_flips(t, rows, cols) for t in texts)
    assert (on > off) == transposed, (off, on)


def test_across_keeps_scalars_and_the_result_bits():
    from tritonplug_interpret.xla.elementwise import across

    rng = np.random.default_rng(3)
    a = jnp.asarray(rng.normal(size=(128, 16)).astype(np.float32))
    b = jnp.asarray(rng.normal(size=(128, 16)).astype(np.float32))
    for fn, args in [(jnp.add, (a, b)), (jnp.multiply, (a, jnp.float32(3))), (jnp.exp2, (a,)),
                     (lambda c, x, y: jnp.where(c, x, y), (a > 0, a, b))]:
        got = across(fn)(*args)
        assert got.shape == (128, 16)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(fn(*args)))
