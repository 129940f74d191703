"""Autotune hooks on a GPU against Triton's own launch: each hook-carrying kernel launched by Triton on torch
tensors (Triton runs the hooks themselves) and by tritonplug on JAX arrays, eagerly and as a jitted program on a
``jax.new_ref``; the results agree (the atomic adds' order differs: to float rounding) and show the zeroing.

Runs where JAX sees a CUDA device and torch imports; the CPU counterparts are ``test_autotune_hooks.py`` and
``test_autotune_hooks_descriptors.py`` (against NumPy)."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from helpers import requires_backend, requires_cuda_device
from hook_kernels import SliceZeroer, binned, binned_sum, init_to_zero, partial_zero, positional_star, reference
from test_autotune_hooks import START, N, run_in_ref, x_values
from test_autotune_hooks_descriptors import M, doubler

import tritonplug


def _torch():
    try:
        return importlib.import_module("torch"), ""
    except ImportError as error:
        return None, f"torch cannot be imported: {error}"


torch, REASON = _torch()
pytestmark = [pytest.mark.cuda, requires_backend("cuda"), requires_cuda_device,
              pytest.mark.skipif(torch is None, reason=REASON)]

#: config hooks: Triton runs the chosen configuration's hook before every launch
CONFIG_HOOKS = {"init_to_zero": init_to_zero(["bins_ptr"]), "fill_zero_star_args": positional_star,
                "slice_assign_callable_object": SliceZeroer(), "functools_partial": partial_zero}


def grid(meta):
    return (triton.cdiv(N, meta["BLOCK"]),)


def triton_launch(kernel, x: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``kernel`` launched by Triton on torch tensors: the bins after the launch."""
    bins = torch.tensor(start, device="cuda")
    kernel[grid](torch.tensor(x, device="cuda"), bins, N)
    torch.cuda.synchronize()
    return bins.cpu().numpy()


def eager(kernel, x: np.ndarray, start: np.ndarray) -> np.ndarray:
    """tritonplug's eager call with the bins an input aliased to the output."""
    return np.asarray(tritonplug.triton_call(jnp.asarray(x), jnp.asarray(start), N, kernel=kernel, grid=grid,
                                             out_type=jax.ShapeDtypeStruct((4,), jnp.float32),
                                             input_output_aliases={1: 0}))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # input_output_aliases warns, as in jax-triton 0.4
@pytest.mark.parametrize("hook", CONFIG_HOOKS.values(), ids=CONFIG_HOOKS.keys())
def test_a_config_hook_s_zeroing_gives_triton_s_own_result(hook):
    x = x_values()
    theirs = triton_launch(binned(hook), x, START)
    np.testing.assert_allclose(theirs, reference(x, np.zeros(4)), rtol=1e-5, atol=1e-4)  # Triton zeroed START
    for ours in (eager(binned(hook), x, START), run_in_ref(binned(hook), x, START)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_reset_to_zero_gives_triton_s_first_tuned_launch():
    """Triton zeroes ``reset_to_zero``'s buffers around its timing runs, so its first launch after tuning (two
    configurations) starts from zero, as every tritonplug launch does."""
    def make():
        return triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"],
                               reset_to_zero=["bins_ptr"])(binned_sum)

    x = x_values()
    theirs = triton_launch(make(), x, START)
    np.testing.assert_allclose(theirs, reference(x, np.zeros(4)), rtol=1e-5, atol=1e-4)
    for ours in (eager(make(), x, START), run_in_ref(make(), x, START)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)


def test_without_a_hook_both_add_into_the_buffer():
    """The control: no hook, so both keep ``START`` (the tests above can fail)."""
    x = x_values()
    theirs = triton_launch(binned(), x, START)
    np.testing.assert_allclose(theirs, reference(x, START), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(run_in_ref(binned(), x, START), theirs, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("block", [16, 32])
def test_a_descriptor_hook_gives_triton_s_own_tiles(block):
    """A TMA kernel whose hook sets the descriptor's block (Triton's tutorials): Triton's launch on a torch
    tensor's host descriptor against tritonplug's on ``tritonplug.TensorDescriptor``."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = np.arange(M * M, dtype=np.float32).reshape(M, M)
    tx, ty = torch.tensor(x, device="cuda"), torch.empty((M, M), device="cuda")
    doubler(block)[lambda m: (M // m["BLOCK"], M // m["BLOCK"])](TensorDescriptor.from_tensor(tx, [block, block]),
                                                                 ty, M)
    torch.cuda.synchronize()
    desc = tritonplug.TensorDescriptor.from_array(jnp.asarray(x), [block, block])
    ours = tritonplug.triton_call(desc, M=M, kernel=doubler(block), grid=lambda m: (M // m["BLOCK"],) * 2,
                                  out_type=jax.ShapeDtypeStruct((M, M), jnp.float32))
    np.testing.assert_array_equal(np.asarray(ours), ty.cpu().numpy())
    np.testing.assert_array_equal(np.asarray(ours), 2 * x)
