"""The XLA path's fast stores keep their masks: a masked-off lane leaves the buffer's old value.

A top-level store whose programs' 2-D tiles cover the whole buffer is a transposition and one ``select``
(``xla/tiles.py``); a 1-D store whose programs' blocks follow each other is a grid-wide slice (``xla/windows.py``).
Each is checked here where its mask is not all true inside the buffer: the region the kernel writes (39 x 51 of a
64 x 64 buffer; 3000 of 4096 elements) is not a multiple of the tile or the block, and the buffer comes in
as a ref (``jax.new_ref``) filled with a value the kernel never writes. A store that ignored its mask would
write the masked-off lanes (2,107 of the 4,096 elements of the tiled case). Each test also checks that the store
really took its fast path (the translator's plan), so that it tests that path and not the general scatter.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
OLD = -7.0  # the value the aliased buffer holds before the call; the kernel writes 2 x + 1 >= 1 only


@triton.jit
def _masked_tile_kernel(x_ptr, out_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    offs = rows[:, None] * stride + cols[None, :]
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.abs(x) * 2 + 1, mask=mask)


@triton.jit
def _masked_block_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.abs(x) * 2 + 1, mask=mask)


@pytest.fixture
def plans(monkeypatch):
    """The plans the translator makes during the test (translated afresh: no kernel cached from another test)."""
    from tritonplug_interpret import paths
    from tritonplug_interpret.recent import Recent
    from tritonplug_interpret.xla import plan

    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")
    monkeypatch.setattr(paths, "_KERNELS", Recent(64))
    made = []
    make = plan.make

    def spy(*args, **kwargs):
        made.append(make(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(plan, "make", spy)
    return made


def _run(fn, *args):
    text = jax.jit(fn).lower(*args).as_text()
    assert "tritonplug_host_kernel" not in text, "the kernel was not translated to XLA"
    return np.asarray(jax.jit(fn)(*args))


def _expected(x, inside):
    return np.where(inside, np.abs(x) * 2 + 1, np.float32(OLD)).astype(np.float32)


def test_a_tiled_store_keeps_its_mask_where_the_written_region_is_not_whole_tiles(plans):
    size, m, n, block = 64, 39, 51, 16
    x = np.random.default_rng(37).standard_normal((size, size)).astype(np.float32)
    old = np.full((size, size), OLD, np.float32)

    def fn(a, b):
        out = jax.new_ref(b)
        tritonplug.triton_call(a, out, m, n, size, kernel=_masked_tile_kernel, out_type=(),
                               grid=(size // block, size // block), BM=block, BN=block)
        return out[...]

    got = _run(fn, x, old)
    assert any(p.tilings for p in plans), "the store was not planned as a tiling"
    rows, cols = np.indices((size, size))
    inside = (rows < m) & (cols < n)
    assert int((~inside).sum()) == 2107
    np.testing.assert_array_equal(got, _expected(x, inside))


def test_a_windowed_store_keeps_its_mask_where_the_written_length_is_not_whole_blocks(plans):
    size, n, block = 4096, 3000, 128
    x = np.random.default_rng(38).standard_normal(size).astype(np.float32)
    old = np.full(size, OLD, np.float32)

    def fn(a, b):
        out = jax.new_ref(b)
        tritonplug.triton_call(a, out, n, kernel=_masked_block_kernel, out_type=(), grid=(size // block,), BLOCK=block)
        return out[...]

    got = _run(fn, x, old)
    assert any(op.name == "tt.store" for p in plans for op in p.windows), "the store was not planned as a window"
    np.testing.assert_array_equal(got, _expected(x, np.arange(size) < n))
