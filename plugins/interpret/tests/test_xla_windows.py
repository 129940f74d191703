"""The XLA path reads block loads as windows, in loops too (issue 13: matmul within 3x of jnp).

A load whose lanes are ``base + static strides`` becomes a ``dynamic_slice`` of a view of the
buffer; under ``vmap`` the programs' slices are one gather of whole windows (one index per
program). These tests check the numbers against NumPy (edges not multiples of the block, windows
before and past the buffer, steps known only at run time), the interpreter path's agreement, checked
mode, and that the compiled program holds no element-wise gather: the regression they guard
against is a k-loop whose loads fall back to one gathered index per element.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from xla_loop_kernels import (
    accumulate_forms_kernel,
    gathered_rows_matmul_kernel,
    grouped_matmul_kernel,
    halves_matmul_kernel,
    loaded_step_kernel,
    overrun_loop_kernel,
    row_sum_kernel,
    shifted_sum_kernel,
    two_loops_kernel,
)

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
RNG = np.random.default_rng(13)
HOST_CALL = "tritonplug_host_kernel"  # the interpreter path's FFI target
_DOT = re.compile(r"= \w+\[([\d,]*)\]\{[\d,]*\} dot\(")
_GATHER = re.compile(r"= \S+ gather\(.*?slice_sizes=\{([\d,]*)\}")


@pytest.fixture(autouse=True)
def _xla_path(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")


def compiled_hlo(fn, *args) -> str:
    lowered = jax.jit(fn).lower(*args)
    assert HOST_CALL not in lowered.as_text(), "the kernel was not translated to XLA"
    return lowered.compile().as_text()


def gathered_windows(hlo: str) -> list[tuple[int, ...]]:
    """The slice sizes of every gather in compiled HLO text."""
    return [tuple(int(s) for s in m.group(1).split(",") if s) for m in _GATHER.finditer(hlo)]


def element_gathers(hlo: str) -> list[tuple[int, ...]]:
    """Gathers that fetch one element per index (what a load without a window becomes)."""
    return [sizes for sizes in gathered_windows(hlo) if all(s == 1 for s in sizes)]


def dot_shapes(hlo: str) -> list[tuple[int, ...]]:
    """The result shape of every dot in compiled HLO text."""
    return [tuple(int(s) for s in m.group(1).split(",") if s) for m in _DOT.finditer(hlo)]


def matmul(a, b, block=(32, 32, 32), group=8, transposed_b=False):
    (m, k), n = a.shape, (b.shape[0] if transposed_b else b.shape[1])
    bm, bn, bk = block
    grid = (tritonplug.cdiv(m, bm) * tritonplug.cdiv(n, bn),)
    stride_bk, stride_bn = (1, k) if transposed_b else (n, 1)
    return tritonplug.triton_call(
        a, b, m, n, k, k, 1, stride_bk, stride_bn, n, 1, kernel=grouped_matmul_kernel,
        out_type=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=grid,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group)


@pytest.mark.parametrize("m, n, k, block", [(256, 256, 256, (32, 32, 32)), (70, 45, 83, (32, 16, 16)),
                                            (33, 64, 17, (16, 32, 16))])
def test_matmul_k_loop_loads_windows_not_elements(m, n, k, block):
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    hlo = compiled_hlo(lambda x, y: matmul(x, y, block), a, b)
    assert element_gathers(hlo) == [], "a k-loop load went back to one gathered index per element"
    # windows of A and B, and whole tiles picked from a shared GEMM's operands or product (one index per tile)
    tiles = {(block[0], block[2]), (block[2], block[1]), (block[0], block[1])}
    for sizes in gathered_windows(hlo):
        assert sizes[-2:] in tiles and all(s == 1 for s in sizes[:-2]), sizes
    out = jax.jit(lambda x, y: matmul(x, y, block))(a, b)
    np.testing.assert_allclose(np.asarray(out), a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_with_column_major_b_reads_transposed_windows():
    a = RNG.standard_normal((48, 40)).astype(np.float32)
    bt = RNG.standard_normal((56, 40)).astype(np.float32)     # B stored as B^T: stride_bk = 1
    fn = lambda x, y: matmul(x, y, (16, 16, 16), group=2, transposed_b=True)  # noqa: E731
    assert element_gathers(compiled_hlo(fn, a, bt)) == []
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(a, bt)), a @ bt.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", ["xla", "interpret"])
def test_matmul_agrees_on_both_cpu_paths(path, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", path)
    a = RNG.standard_normal((50, 70)).astype(np.float32)
    b = RNG.standard_normal((70, 30)).astype(np.float32)
    out = jax.jit(lambda x, y: matmul(x, y, (16, 16, 32), group=3))(a, b)
    np.testing.assert_allclose(np.asarray(out), a @ b, rtol=1e-4, atol=1e-4)


def test_loop_advanced_1d_pointer_with_a_masked_tail():
    x = RNG.standard_normal((6, 100)).astype(np.float32)
    fn = lambda v: tritonplug.triton_call(  # noqa: E731
        v, 100, 100, kernel=row_sum_kernel, out_type=jax.ShapeDtypeStruct((6,), jnp.float32), grid=(6,), BLOCK=32)
    assert element_gathers(compiled_hlo(fn, x)) == []
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(x)), x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_windows_from_the_loop_counter_start_before_and_end_past_the_buffer():
    n = 100
    x = RNG.standard_normal(n).astype(np.float32)
    fn = lambda v: tritonplug.triton_call(  # noqa: E731
        v, n, kernel=shifted_sum_kernel, out_type=jax.ShapeDtypeStruct((n,), jnp.float32), grid=(7,), BLOCK=16)
    assert element_gathers(compiled_hlo(fn, x)) == []
    padded = np.pad(x, 1)
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(x)), padded[:-2] + padded[1:-1] + padded[2:], rtol=1e-6)


def test_two_loops_in_a_row_advance_their_pointers_by_their_own_steps():
    block, steps = 16, 3
    x = RNG.standard_normal(4 * block * steps).astype(np.float32)
    fn = lambda v: tritonplug.triton_call(  # noqa: E731
        v, steps, kernel=two_loops_kernel, out_type=jax.ShapeDtypeStruct((4 * block,), jnp.float32), grid=(4,),
        BLOCK=block)
    assert element_gathers(compiled_hlo(fn, x)) == []
    lanes = np.arange(4 * block)
    expected = x.reshape(steps, 4 * block).sum(axis=0) + 10 * (x[lanes] + x[lanes + 1] + x[lanes + 2])
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(x)), expected, rtol=1e-5, atol=1e-5)


def test_pointer_step_known_only_at_run_time():
    x = RNG.standard_normal(4 * 16 * 3).astype(np.float32)
    step = np.array([64], np.int32)
    fn = lambda v, s: tritonplug.triton_call(  # noqa: E731
        v, s, 3, kernel=loaded_step_kernel, out_type=jax.ShapeDtypeStruct((64,), jnp.float32), grid=(4,),
        BLOCK=16)
    assert element_gathers(compiled_hlo(fn, x, step)) == []
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(x, step)), x.reshape(3, 64).sum(axis=0), rtol=1e-6)


def test_checked_mode_reports_a_loop_load_past_the_end(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "1")
    x = np.ones(48, np.float32)
    fn = jax.jit(lambda v: tritonplug.triton_call(
        v, 4, kernel=overrun_loop_kernel, out_type=jax.ShapeDtypeStruct((16,), jnp.float32), grid=(1,),
        BLOCK=16))
    with pytest.raises(Exception, match=r"overrun_loop_kernel.*x_ptr.*byte offset 192"):
        np.asarray(fn(x))


def test_unchecked_loop_load_past_the_end_reads_zeros(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")
    x = np.ones(48, np.float32)
    fn = jax.jit(lambda v: tritonplug.triton_call(
        v, 4, kernel=overrun_loop_kernel, out_type=jax.ShapeDtypeStruct((16,), jnp.float32), grid=(1,),
        BLOCK=16))
    np.testing.assert_array_equal(np.asarray(fn(x)), np.full(16, 3.0, np.float32))


@pytest.mark.parametrize("check", ["0", "1"])
def test_matmul_256_is_one_gemm_of_the_distinct_tiles(check, monkeypatch):
    """64 programs share 8 A tiles and 8 B tiles per k-step, and the short static k-loop is unrolled
    with its 8 products summed as one dot over the concatenated k: the whole kernel is one
    256x256 @ 256x256 GEMM, not 8 batches of 64 32x32 dots."""
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", check)
    a = RNG.standard_normal((256, 256)).astype(np.float32)
    b = RNG.standard_normal((256, 256)).astype(np.float32)
    hlo = compiled_hlo(lambda x, y: matmul(x, y), a, b)
    assert dot_shapes(hlo) == [(256, 256)]
    assert " while(" not in hlo and " scatter(" not in hlo
    out = jax.jit(lambda x, y: matmul(x, y))(a, b)
    np.testing.assert_allclose(np.asarray(out), a @ b, rtol=1e-4, atol=1e-4)


def test_programs_sharing_pointers_but_not_masks_get_their_own_tiles():
    """The second half of the grid loads the first half's A pointers under a false mask: it shares B
    tiles only (4 distinct A tiles x 2 B tiles for 8 programs: one 128x96 @ 96x64 GEMM), and its
    products are zeros."""
    m, n, k, block = 64, 64, 96, 32
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    fn = lambda x, y: tritonplug.triton_call(  # noqa: E731
        x, y, m, n, k, kernel=halves_matmul_kernel, out_type=jax.ShapeDtypeStruct((2, m, n), jnp.float32),
        grid=(8,), BLOCK=block)
    assert dot_shapes(compiled_hlo(fn, a, b)) == [(4 * block, 2 * block)]
    out = np.asarray(jax.jit(fn)(a, b))
    np.testing.assert_allclose(out[0], a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out[1], np.zeros((m, n), np.float32))


@pytest.mark.parametrize("per_program", [False, True])
def test_tiles_chosen_by_loaded_indices_are_shared_only_by_programs_that_load_the_same_indices(per_program):
    """Loads are pure here: programs that read the same row indices read the same A tile (2 x 2 tiles,
    one GEMM). Read per program, the indices make 4 distinct A tiles: 4 x 2 pairs for 4 programs is
    more work than the batch, so each program keeps its own dot."""
    rows = RNG.integers(0, 64, 128 if per_program else 64).astype(np.int32)
    a = RNG.standard_normal((64, 64)).astype(np.float32)
    b = RNG.standard_normal((64, 64)).astype(np.float32)
    fn = lambda x, r, y: tritonplug.triton_call(  # noqa: E731
        x, r, y, 64, 64, kernel=gathered_rows_matmul_kernel, out_type=jax.ShapeDtypeStruct((64, 64), jnp.float32),
        grid=(2, 2), BLOCK=32, PER_PROGRAM=per_program)
    shapes = dot_shapes(compiled_hlo(fn, a, rows, b))
    assert shapes == ([(4, 32, 32)] if per_program else [(64, 64)]), shapes
    if per_program:
        tiles = rows.reshape(2, 2, 32)
        expected = np.block([[a[tiles[i, j]] @ b[:, 32 * j:32 * j + 32] for j in range(2)] for i in range(2)])
    else:
        expected = a[rows] @ b
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(a, rows, b)), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("form", [0, 1, 2, 3])
def test_an_unrolled_loop_sums_its_products_as_one_dot_only_when_nothing_else_reads_the_sum(form):
    m, n, k, block = 64, 32, 96, 16
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    fn = lambda x, y: tritonplug.triton_call(  # noqa: E731
        x, y, k, n, kernel=accumulate_forms_kernel, out_type=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // block, n // block), FORM=form, BLOCK=block)
    shapes = dot_shapes(compiled_hlo(fn, a, b))
    assert shapes == ([(m, n)] if form < 2 else [(m, n)] * (k // block)), shapes   # 4 x 2 tiles: shared, 8 programs
    expected = np.zeros((m, n), np.float32)
    for t in range(0, k, block):
        product = a[:, t:t + block] @ b[t:t + block]
        expected = expected * 0.5 + product if form == 2 else expected + product
    tolerance = 5e-2 if form == 3 else 1e-4  # form 3 accumulates in fp16
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(a, b)), expected, rtol=tolerance, atol=tolerance)
