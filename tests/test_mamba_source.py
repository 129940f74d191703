"""``examples/ports/mamba_source.py``'s wider tuning (``widened``, ``launchable``, ``CONFIGS``): the same kernel over
mamba-ssm's configurations followed by more, the first unchanged, each zeroing hook kept; mamba-ssm's source must
be importable for the kernels' cases."""

from __future__ import annotations

import importlib.machinery

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import tritonplug

has_mamba = importlib.machinery.PathFinder.find_spec("mamba_ssm") is not None
needs_mamba = pytest.mark.skipif(not has_mamba, reason="mamba-ssm's source is not on sys.path "
                                 "(examples/fetch_kernel_sources.py)")


def _signature(config) -> tuple:
    return tuple(sorted(config.kwargs.items())), config.num_warps, config.num_stages


@needs_mamba
def test_widened_keeps_mamba_ssms_list_first_then_every_shape_at_each_warps_and_stages_once():
    from ports import mamba_source

    kernel = mamba_source.kernels("ssd_chunk_scan")._chunk_scan_bwd_dc_kernel
    wide = mamba_source.widened(kernel)
    assert wide.fn is kernel.fn and list(wide.keys) == list(kernel.keys)
    before = [_signature(c) for c in kernel.configs]
    after = [_signature(c) for c in wide.configs]
    assert after[:len(before)] == before
    assert len(after) == len(set(after))
    shapes = {shape for shape, _, _ in before}
    expected = {(shape, w, s) for shape in shapes for w in mamba_source.WARPS for s in mamba_source.STAGES}
    assert set(after) == expected | set(before)
    hooks = {tuple(sorted(c.kwargs.items())): c.pre_hook for c in kernel.configs}
    assert all(c.pre_hook is hooks[tuple(sorted(c.kwargs.items()))] for c in wide.configs)
    assert all(c.pre_hook is not None for c in wide.configs)  # the kernel's init_to_zero, on every configuration


@needs_mamba
def test_launchable_widens_only_the_kernels_asked_and_only_under_wide(monkeypatch):
    from ports import mamba_source

    kernel = mamba_source.kernels("ssd_chunk_scan")._chunk_scan_bwd_dcb_kernel
    count = len(kernel.configs)
    monkeypatch.setattr(mamba_source, "CONFIGS", "mamba")
    assert len(mamba_source.launchable(kernel, wide=True).kernel.configs) == count
    monkeypatch.setattr(mamba_source, "CONFIGS", "wide")
    assert len(mamba_source.launchable(kernel).kernel.configs) == count
    assert len(mamba_source.launchable(kernel, wide=True).kernel.configs) > count
    monkeypatch.setattr(mamba_source, "CONFIGS", "widest")
    with pytest.raises(ValueError, match="CONFIGS is 'widest'"):
        mamba_source.launchable(kernel)


@triton.jit
def _scale(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3.0, mask=offs < n)


def test_widened_refuses_an_autotuner_whose_hooks_it_would_drop():
    from ports import mamba_source

    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"], reset_to_zero=["out_ptr"])(_scale)
    with pytest.raises(ValueError, match="_scale.*reset_to_zero"):
        mamba_source.widened(tuned)


def test_a_widened_kernel_computes_what_the_kernel_does():
    from ports import mamba_source

    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])(_scale)
    wide = mamba_source.widened(tuned)
    assert len(wide.configs) == 2 * len(mamba_source.WARPS) * len(mamba_source.STAGES)
    x = np.arange(300, dtype=np.float32)
    out = tritonplug.triton_call(jnp.asarray(x), 300, kernel=wide, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                 grid=lambda meta: (triton.cdiv(300, meta["BLOCK"]),))
    np.testing.assert_array_equal(np.asarray(out), x * 3.0)
