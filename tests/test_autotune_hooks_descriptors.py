"""Autotune hooks that set a tensor descriptor's ``block_shape`` (Triton's TMA tutorials, Liger's fused MLP): on
the CPU (interpret backend) against NumPy. A hook may set the block the call's ``TensorDescriptor`` already has;
another block, chosen per configuration, is refused at the call naming the hook, the descriptor and both blocks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend

import tritonplug
from tritonplug.calls.autotune_hooks import HookRefused

pytestmark = requires_backend("interpret")
M = 64


def set_block(nargs):
    """As Triton's persistent-matmul tutorial does: the descriptor's block from the configuration's block size."""
    nargs["x_desc"].block_shape = [nargs["BLOCK"], nargs["BLOCK"]]


def doubler(*blocks: int, hook=set_block):
    @triton.jit
    def double_tiles(x_desc, y_ptr, M, BLOCK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        tile = x_desc.load([pm * BLOCK, pn * BLOCK])
        rows, cols = pm * BLOCK + tl.arange(0, BLOCK), pn * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + rows[:, None] * M + cols[None, :], tile * 2)

    configs = [triton.Config({"BLOCK": b}, pre_hook=hook) for b in blocks]
    return triton.autotune(configs=configs, key=["M"])(double_tiles)


def call(kernel, block):
    x = jnp.asarray(np.arange(M * M, dtype=np.float32).reshape(M, M))
    desc = tritonplug.TensorDescriptor.from_array(x, [block, block])
    y = tritonplug.triton_call(desc, M=M, kernel=kernel, out_type=jax.ShapeDtypeStruct((M, M), jnp.float32),
                               grid=lambda meta: (M // meta["BLOCK"], M // meta["BLOCK"]))
    return np.asarray(x), np.asarray(y)


@pytest.mark.parametrize("block", [16, 32])
def test_a_hook_setting_the_descriptor_s_own_block_runs(block):
    x, y = call(doubler(block), block)
    np.testing.assert_array_equal(y, 2 * x)


def test_a_block_chosen_per_configuration_is_refused_naming_hook_descriptor_and_blocks():
    with pytest.raises(HookRefused, match=r"pre_hook set_block .* of kernel 'double_tiles' sets 'x_desc'\.block_shape "
                                          r"= \[32, 32\], but the call's TensorDescriptor has block_shape \[16, 16\]"):
        call(doubler(16, 32), 16)


def test_reading_a_descriptor_s_array_in_a_hook_is_refused():
    def reads_base(nargs):
        nargs["x_desc"].base.zero_()

    with pytest.raises(HookRefused, match=r"reads 'x_desc'\.base"):
        call(doubler(16, hook=reads_base), 16)
