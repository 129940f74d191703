"""The SSD port lowered for an H200 (sm_90) on this CPU-only machine, forward and backward, untuned: mamba-ssm's
first autotune configuration of some kernels asks for more shared memory (279,040 B) than sm_90 allows
(232,448 B), which jaxlib refused to load on an H200; now every kernel the program carries fits, the too-big
configurations skipped as Triton's autotuner skips them. mamba-ssm's source must be importable."""

from __future__ import annotations

import importlib.machinery

import jax
import jax.numpy as jnp
import pytest
from helpers import for_backend

import tritonplug
from tritonplug.inspection import kernel_calls

pytestmark = pytest.mark.skipif(importlib.machinery.PathFinder.find_spec("mamba_ssm") is None,
                                reason="mamba-ssm's source is not on sys.path (examples/fetch_kernel_sources.py)")

H200_SHARED = 232448


@for_backend("cuda")
def test_the_ssd_port_lowered_untuned_for_sm_90_carries_only_kernels_that_fit(private_cache, monkeypatch):
    from ports.mamba_ssd import mamba_chunk_scan_combined

    b, seqlen, h, p, g, n, chunk = 1, 512, 8, 64, 1, 128, 256
    s, bf, f32 = jax.ShapeDtypeStruct, jnp.bfloat16, jnp.float32
    specs = (s((b, seqlen, h, p), bf), s((b, seqlen, h), f32), s((h,), f32), s((b, seqlen, g, n), bf),
             s((b, seqlen, g, n), bf))

    def loss(x, dt, A, B, C):
        y = mamba_chunk_scan_combined(x, dt, A, B, C, chunk, dt_softplus=True)
        return y.astype(f32).sum()

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")  # the port's calls name no compute_capability
    text = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4))).trace(*specs).lower(lowering_platforms=("cuda",)).as_text()
    calls = kernel_calls(text)
    shared = {c["kernel_call"]["kernel"]["kernel_name"]: c["kernel_call"]["kernel"].get("shared_mem_bytes", 0)
              for c in calls}
    assert len(shared) >= 5 and max(shared.values()) <= H200_SHARED, shared
    skipped = {q.kernel: q.skipped for q in tritonplug.inspection.paths() if q.skipped}
    assert skipped and all("more than the 232448 B a block may use on cuda:90" in s
                           for reasons in skipped.values() for s in reasons)
