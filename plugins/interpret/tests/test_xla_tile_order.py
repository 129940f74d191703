"""A store whose blocks tile the whole buffer (:mod:`tritonplug_interpret.xla.tiles`) in whatever order the
programs take the tiles: along the rows of tiles, down their columns, or swizzled (a matmul's grouped order).

The first two put the blocks in place by reshapes and a transposition; only a swizzled order needs a gather of
whole blocks. Each case runs translated by the XLA path against NumPy (the output buffer holds :data:`OLD`
where a mask leaves lanes off) and counts the gathers and scatters of the compiled program.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from xla_hlo_support import count_unfusible

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret"), pytest.mark.usefixtures("fresh_xla_path")]
OLD = -7.0


@triton.jit
def _tile_kernel(x_ptr, out_ptr, n_cols, TILES_M: tl.constexpr, TILES_N: tl.constexpr, ORDER: tl.constexpr,
                 GROUP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Program ``pid`` writes tile ``(tm, tn)``: ``ORDER`` 0 along the rows of tiles, 1 down the columns, 2 in
    groups of ``GROUP`` rows of tiles (Triton's matmul tutorial's swizzle); the lanes at column ``n_cols - 1`` are
    masked off."""
    pid = tl.program_id(0)
    if ORDER == 0:
        tm, tn = pid // TILES_N, pid % TILES_N
    elif ORDER == 1:
        tm, tn = pid % TILES_M, pid // TILES_M
    else:
        group = pid // (GROUP * TILES_N)
        first = group * GROUP
        size = min(TILES_M - first, GROUP)
        tm = first + (pid % (GROUP * TILES_N)) % size
        tn = (pid % (GROUP * TILES_N)) // size
    rows = tm * BM + tl.arange(0, BM)
    cols = tn * BN + tl.arange(0, BN)
    offs = rows[:, None] * (TILES_N * BN) + cols[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x * 2.0 + 1.0, mask=(cols < n_cols - 1)[None, :])


def _fn(tiles_m: int, tiles_n: int, order: int, block: int = 8):
    def fn(x, out):
        ref = jax.new_ref(out)
        tritonplug.triton_call(x, ref, tiles_n * block, kernel=_tile_kernel, out_type=(), grid=(tiles_m * tiles_n,),
                               TILES_M=tiles_m, TILES_N=tiles_n, ORDER=order, GROUP=2, BM=block, BN=block)
        return ref[...]
    return fn


@pytest.mark.parametrize("order", [0, 1, 2])
@pytest.mark.parametrize("tiles_m, tiles_n", [(3, 4), (4, 3), (1, 5), (5, 1)])
def test_tiles_in_any_program_order(order, tiles_m, tiles_n):
    block = 8
    shape = (tiles_m * block, tiles_n * block)
    x = np.random.default_rng(tiles_m * 10 + tiles_n).standard_normal(shape).astype(np.float32)
    old = np.full(shape, OLD, np.float32)
    got = np.asarray(jax.jit(_fn(tiles_m, tiles_n, order))(x, old))
    want = x * np.float32(2) + np.float32(1)
    want[:, -1] = OLD
    np.testing.assert_array_equal(got, want)
    counts = count_unfusible(_fn(tiles_m, tiles_n, order), x, old)
    swizzled = order == 2 and tiles_m > 2 and tiles_n > 1   # else the grouped order is one of the other two
    assert counts == {"gather": counts["gather"] if swizzled else 0, "scatter": 0, "while": 0}
    assert counts["gather"] > 0 or not swizzled     # whole blocks put in order (no scatter of every element)
