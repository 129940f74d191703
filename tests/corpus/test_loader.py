"""``tritonplug.kernels_of`` on the real installed libraries, without torch (``tox -e corpus``)."""

from __future__ import annotations

import importlib.metadata
import inspect
import sys

import jax.numpy as jnp
import pytest
import triton

import tritonplug
from corpus import driver
from tritonplug.porting.kernel_source import WrapperDroppedWarning, torch_imports

PINNED = {"liger-kernel": "0.8.5", "fla-core": "0.6.0", "flag-gems": "5.0.2"}


def _needs(module: str) -> None:
    if not driver.library_installed(module):
        pytest.skip(f"{module} is not installed: `tox -e corpus` installs the pinned libraries")
    if torch_imports():
        pytest.skip("torch imports here: kernels_of imports the modules; these tests are about loading without it")


def test_the_pinned_versions_are_installed_without_torch():
    _needs("liger_kernel")
    assert {name: importlib.metadata.version(name) for name in PINNED} == PINNED
    assert "torch" not in sys.modules


def test_liger_kernels_load_from_the_library_file():
    _needs("liger_kernel")
    ops = tritonplug.kernels_of("liger_kernel.ops.rms_norm")
    kernel = ops._rms_norm_forward_kernel
    assert isinstance(kernel, triton.JITFunction)
    path = kernel.fn.__code__.co_filename
    assert path.endswith("liger_kernel/ops/rms_norm.py") and ops.__file__ == path
    source, first = inspect.getsourcelines(kernel.fn)
    assert open(path).read().splitlines()[first - 1:first + 1] == [line.rstrip("\n") for line in source[:2]]
    assert ops.calculate_settings(1000) == (1024, 4)  # a helper from liger_kernel.ops.utils, loaded on use
    with pytest.raises(tritonplug.KernelImportError, match=r"liger_kernel\.ops\.rms_norm\.torch_to_triton_dtype .*"
                                                          r"needs torch, through liger_kernel\.ops\.utils"):
        _ = ops.torch_to_triton_dtype
    assert "torch" not in sys.modules


def test_a_triton_error_in_a_library_kernel_points_at_its_file():
    _needs("liger_kernel")
    ops = tritonplug.kernels_of("liger_kernel.ops.rms_norm")
    x = jnp.ones((2, 100), jnp.float32)
    with pytest.raises(ValueError, match="BLOCK_SIZE") as info:  # BLOCK_SIZE 100: arange needs a power of 2
        tritonplug.triton_call(kernel=ops._rms_norm_forward_kernel, grid=(2,), out_type=(x, x[:, 0]),
                               Y_row_stride=100, X_ptr=x, X_row_stride=100, W_ptr=x[0], W_row_stride=1,
                               RSTD_row_stride=1, n_cols=100, eps=1e-6, offset=0.0, casting_mode=0,
                               elementwise_affine=True, BLOCK_SIZE=100)
    text = str(info.value)
    path = ops._rms_norm_forward_kernel.fn.__code__.co_filename
    line = int(text.split(f'File "{path}", line ')[1].split(")")[0])
    assert "tl.arange(0, BLOCK_SIZE)" in open(path).read().splitlines()[line - 1], text


def test_flaggems_libentry_is_dropped_and_torch_tuned_kernels_say_why():
    _needs("flag_gems")
    _forget("flag_gems.ops.rms_norm")
    with pytest.warns(WrapperDroppedWarning, match=r"without @libentry\(\)"):
        ops = tritonplug.kernels_of("flag_gems.ops.rms_norm", use_import=False)
    assert isinstance(ops.rms_norm_kernel, triton.JITFunction)
    with pytest.raises(tritonplug.KernelImportError, match=r"flag_gems\.ops\.rms_norm\.rms_norm_loop_kernel"):
        _ = ops.rms_norm_loop_kernel


def test_fla_heuristics_over_none_arguments_load():
    _needs("fla")
    ops = tritonplug.kernels_of("fla.ops.common.fused_recurrent")
    assert isinstance(ops.fused_recurrent_fwd_kernel, triton.runtime.Heuristics)
    assert set(ops.fused_recurrent_fwd_kernel.values) == {"USE_INITIAL_STATE", "STORE_FINAL_STATE", "IS_VARLEN"}


def _forget(module: str) -> None:
    """Forget a loaded module so its wrappers are dropped (and warned about) again on the next load."""
    from tritonplug.porting.kernel_source import _REGISTRY

    _REGISTRY.loaders.pop(module, None)
