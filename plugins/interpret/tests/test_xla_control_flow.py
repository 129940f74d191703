"""The XLA path on functions of several blocks (early returns), noinline helpers (``tt.func private``),
bool buffers and host-side tensor descriptors: each translated (no fallback, no host call) and checked
against NumPy."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xla_cfg_kernels as K
from helpers import requires_backend
from tritonplug_interpret import compat
from xla_corpus_support import run_xla, xla_path_fixture

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
_xla_path = xla_path_fixture()


def sds(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


def test_early_returns(caplog):
    x = np.random.default_rng(0).standard_normal((6, 20)).astype(np.float32)
    x[1, 0], x[4, 0] = -1.0, 2.0

    def fn(x):
        return tritonplug.triton_call(x, 5, 20, kernel=K.early_exit_kernel, out_type=sds(x.shape, x.dtype),
                                      zeroed_outputs=(0,), grid=8, BLOCK=32)

    y = run_xla(fn, x, caplog=caplog)
    # the programs run side by side (vmap), each branch's stores masked: no loop over the programs
    assert "stablehlo.while" not in jax.jit(fn).lower(x).as_text()
    want = np.where(x[:, :1] < 0, 0, 2 * x)
    want[5] = 0  # row 5 >= n_rows: returned before writing (zeroed output)
    np.testing.assert_array_equal(y, want)


def test_return_from_a_nested_if_then_merge(caplog):
    x = np.repeat(np.array([-1.0, 0.5, 3.0], np.float32), 4) * np.ones(12, np.float32)

    def fn(x):
        return tritonplug.triton_call(x, kernel=K.nested_return_kernel, out_type=sds(x.shape, x.dtype), grid=3,
                                      BLOCK=4)

    y = run_xla(fn, x, caplog=caplog)
    assert "stablehlo.while" not in jax.jit(fn).lower(x).as_text()
    sums = x.reshape(3, 4).sum(1, keepdims=True)
    want = np.where(sums > 4, 4.0, np.where(sums > 0, x.reshape(3, 4) + 1, x.reshape(3, 4)))
    np.testing.assert_array_equal(y, want.reshape(-1))


def test_noinline_helpers_run_inlined(caplog):
    x = np.array([-3.0, -0.5, 0.0, 2.0, 5.0], np.float32)

    def fn(x):
        return tritonplug.triton_call(x, 1.5, kernel=K.noinline_kernel, out_type=sds(x.shape, x.dtype), grid=5)

    np.testing.assert_allclose(run_xla(fn, x, caplog=caplog), np.abs(x) * 1.5 + 2.0, rtol=1e-6)


def test_bool_buffers(caplog):
    x = np.linspace(-2, 2, 37).astype(np.float32)
    keep = np.arange(37) % 3 == 0

    def fn(x, keep):
        return tritonplug.triton_call(x, keep, 37, kernel=K.bool_kernel, grid=3, BLOCK=16,
                                      out_type=[sds(x.shape, x.dtype), sds(x.shape, jnp.bool_)])

    y, positive = run_xla(fn, x, keep, caplog=caplog)
    np.testing.assert_array_equal(y, np.where(keep, x, -x))
    np.testing.assert_array_equal(positive, x > 0)


def test_host_side_descriptors(caplog):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((40, 52)).astype(np.float32) for _ in range(2))

    def fn(a, b):
        c = jax.new_ref(jnp.zeros_like(a))
        descs = [tritonplug.TensorDescriptor.from_array(t, [16, 32]) for t in (a, b, c)]
        tritonplug.triton_call(*descs, kernel=K.descriptor_add_kernel, out_type=(), grid=(3, 2), BM=16, BN=32)
        return c[...]

    if compat.descriptor_arguments((40, 52), (52, 1), "zero", False) is None:
        # This Triton (3.6) has no host-side decomposition of descriptors: the XLA path says so and Triton's
        # interpreter runs the kernel, right.
        with caplog.at_level(logging.WARNING, logger="tritonplug.interpret"):
            got = jax.jit(fn)(a, b)
        assert "does not decompose host-side descriptors" in caplog.text
        np.testing.assert_allclose(got, a + b, rtol=1e-6)
        return
    np.testing.assert_allclose(run_xla(fn, a, b, caplog=caplog), a + b, rtol=1e-6)
