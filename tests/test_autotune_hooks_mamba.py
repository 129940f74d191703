"""mamba-ssm's SSD backward kernel ``_chunk_cumsum_bwd_kernel``, whose every autotune config carries
``pre_hook=init_to_zero(["dA_ptr", "ddt_bias_ptr"])`` and ``tl.atomic_add``s into those buffers: loaded with
``kernels_of`` (without torch), launched as its torch launcher launches it, on the CPU, against NumPy.

mamba-ssm's build wants torch, so no pip install brings it: ``examples/fetch_kernel_sources.py`` unpacks its
pinned source (tox's corpus env runs it and this file); this runs wherever that source is importable."""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton

import tritonplug

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mamba_ssm") is None,
                                reason="mamba-ssm's source is not importable here (examples/fetch_kernel_sources.py)")

B, SEQLEN, H, CHUNK, DT_MIN, DT_MAX = 2, 100, 5, 32, 0.0, 1.5
NCHUNKS = -(-SEQLEN // CHUNK)


def strides(*shape):
    return [int(np.prod(shape[i + 1:])) for i in range(len(shape))]


def reference(ddA, ddt_out, dt, A, dt_bias, softplus):
    """``_chunk_cumsum_bwd`` in NumPy: (ddt, dA, ddt_bias)."""
    pre = dt + dt_bias
    d = np.where(pre <= 20, np.log1p(np.exp(pre)), pre) if softplus else pre
    clamped = (d < DT_MIN) | (d > DT_MAX)
    d = np.clip(d, DT_MIN, DT_MAX)
    by_time = lambda a: a.transpose(0, 2, 3, 1).reshape(B, -1, H)[:, :SEQLEN]  # noqa: E731
    ddt = np.where(clamped, 0, by_time(ddA) * A + by_time(ddt_out))
    if softplus:
        ddt = np.where(pre <= 20, ddt / (1 + np.exp(-pre)), ddt)
    return ddt, (by_time(ddA) * d).sum((0, 1)), ddt.sum((0, 1))


@pytest.mark.parametrize("softplus", [False, True])
def test_chunk_cumsum_bwd_zeroes_its_accumulators_as_its_pre_hook_says(softplus, monkeypatch):
    monkeypatch.setenv("MAMBA_DETERMINISTIC", "0")  # else mamba-ssm asks torch which configs to use
    kernel = tritonplug.kernels_of("mamba_ssm.ops.triton.ssd_chunk_state")._chunk_cumsum_bwd_kernel
    assert all(config.pre_hook is not None for config in kernel.configs)
    rng = np.random.default_rng(0)
    ddA, ddt_out = (rng.standard_normal((B, H, NCHUNKS, CHUNK), np.float32) for _ in range(2))
    dt = rng.standard_normal((B, SEQLEN, H), np.float32)
    A, dt_bias = -np.abs(rng.standard_normal(H, np.float32)), rng.standard_normal(H, np.float32)
    ddt = tritonplug.empty(B, SEQLEN, H, dtype=jnp.float32)
    dA = jax.new_ref(jnp.full(H, 1000.0, jnp.float32))  # updated in place from garbage: the hook must zero it
    ddt_bias = jax.new_ref(jnp.full(H, -55.0, jnp.float32))
    s4, s3 = strides(B, H, NCHUNKS, CHUNK), strides(B, SEQLEN, H)
    tritonplug.launch(kernel)[lambda m: (B, NCHUNKS, triton.cdiv(H, m["BLOCK_SIZE_H"]))](
        *map(jnp.asarray, (ddA, ddt_out, dt, A, dt_bias)), ddt, dA, ddt_bias, B, SEQLEN, H, CHUNK, DT_MIN, DT_MAX,
        s4[0], s4[2], s4[1], s4[3], s4[0], s4[2], s4[1], s4[3], *s3, 1, 1, *s3, 0, 0, 1, 0, 0, 1, softplus,
        HAS_DT_BIAS=True, BLOCK_SIZE_CHUNK=triton.next_power_of_2(CHUNK), DETERMINISTIC_REDUCTION=False)
    want = reference(ddA, ddt_out, dt, A, dt_bias, softplus)
    for name, got, expected in zip(("ddt", "dA", "ddt_bias"), (ddt[...], dA[...], ddt_bias[...]), want, strict=True):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=2e-4, atol=2e-4, err_msg=name)
