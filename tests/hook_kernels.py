"""Kernels with autotune hooks, for ``test_autotune_hooks.py``: each ``tl.atomic_add``s into a buffer a hook zeroes
(as mamba-ssm's SSD backward kernels do), so a result shows whether the buffer was zeroed before the launch."""

from __future__ import annotations

import functools

import numpy as np
import triton
import triton.language as tl

BINS = 4


def init_to_zero(names):
    """mamba-ssm's helper, as it is written there."""
    return lambda nargs: [nargs[name].zero_() for name in names if nargs[name] is not None]


@triton.jit
def binned_sum(x_ptr, bins_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(bins_ptr + offs % 4, tl.load(x_ptr + offs, mask=mask, other=0.0), mask=mask)


def binned(config_hook=None, **autotune):
    """``binned_sum`` under ``triton.autotune`` with one config carrying ``config_hook`` (and ``autotune``'s
    keywords: ``reset_to_zero=``, ``pre_hook=``, ``post_hook=``)."""
    return triton.autotune(configs=[triton.Config({"BLOCK": 64}, pre_hook=config_hook)], key=["n"],
                           **autotune)(binned_sum)


def reference(x: np.ndarray, start: np.ndarray) -> np.ndarray:
    """What Triton computes: ``start`` plus each element of ``x`` added into bin ``i % 4``."""
    bins = np.array(start, dtype=np.float64)
    np.add.at(bins, np.arange(x.size) % BINS, x.astype(np.float64))
    return bins.astype(np.float32)


def positional_star(*args, **kwargs):
    args[0]["bins_ptr"].fill_(0.0)


class SliceZeroer:
    """A callable object (no ``__qualname__`` of a function) writing ``x[:] = 0``."""

    def __call__(self, nargs):
        nargs["bins_ptr"][:] = 0


def keyed(nargs, name="bins_ptr"):
    nargs[name].zero_()


partial_zero = functools.partial(keyed, name="bins_ptr")


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, pre_hook=init_to_zero(["bins_ptr"])),
                          triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def two_hooks(x_ptr, bins_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(bins_ptr + offs % 4, tl.load(x_ptr + offs, mask=mask, other=0.0), mask=mask)
