"""The CPU backend's XLA path on the corpus kernels on tiles (``xla_corpus_tile_kernels.py``): layout,
attention and matmul, memory (block pointers, descriptors, atomics), loops and grids.

Each test runs its kernel through ``triton_call`` on the CPU with the default path, checks that
the kernel was translated (``xla_corpus_support.run_xla``) and checks the numbers against NumPy.
Rows and elements, and the export of two corpus kernels: ``test_xla_corpus_rows.py``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import triton
import xla_corpus_tile_kernels as K
from helpers import requires_backend
from xla_corpus_support import call, rng, run_xla, sds, softmax_ref, xla_path_fixture

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
_xla_path = xla_path_fixture()


# ----------------------------------------------------------------------------- layout


def test_transpose_tiles_over_a_two_dimensional_grid(caplog):
    x = rng(11).standard_normal((70, 45)).astype(np.float32)
    got = run_xla(lambda a: call(K.transpose_kernel, a, 70, 45, out=sds((45, 70), jnp.float32),
                                 grid=(triton.cdiv(70, 32), triton.cdiv(45, 16)), BM=32, BN=16), x, caplog=caplog)
    np.testing.assert_array_equal(got, x.T)


def test_split_join_reshape_permute_on_complex_pairs(caplog):
    r = rng(12)
    n = 300
    a, b = r.standard_normal((n, 2)).astype(np.float32), r.standard_normal((n, 2)).astype(np.float32)
    outs = (sds((n, 2), jnp.float32), sds((n, 2), jnp.float32))
    prod, swapped = run_xla(lambda p, q: call(K.complex_mul_kernel, p, q, n, out=outs, grid=(triton.cdiv(n, 64),),
                                              BLOCK=64), a, b, caplog=caplog)
    ca, cb = a[:, 0] + 1j * a[:, 1], b[:, 0] + 1j * b[:, 1]
    np.testing.assert_allclose(prod[:, 0] + 1j * prod[:, 1], ca * cb, rtol=1e-5, atol=1e-6)
    padded = np.zeros((triton.cdiv(n, 64) * 64, 2), np.float32)
    padded[:n] = a
    ref = padded.reshape(-1, 4, 2).transpose(0, 2, 1).reshape(-1, 2)[:n]
    np.testing.assert_array_equal(swapped, ref)


# ----------------------------------------------------------------------------- attention and matmul


def attention_ref(q, k, v, scale, causal):
    s = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    return np.einsum("bqk,bkd->bqd", softmax_ref(s), v.astype(np.float64))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_forward(causal, caplog):
    r = rng(14)
    bh, seq, head = 3, 100, 32
    q, k, v = (r.standard_normal((bh, seq, head)).astype(np.float32) for _ in range(3))
    scale = head ** -0.5

    def fn(q, k, v):
        return call(K.flash_attention_fwd_kernel, q, k, v, seq, scale, out=sds(q.shape, q.dtype),
                    grid=(triton.cdiv(seq, 32), bh), HEAD=head, BM=32, BN=16, CAUSAL=causal)

    got = run_xla(fn, q, k, v, caplog=caplog)
    np.testing.assert_allclose(got, attention_ref(q, k, v, scale, causal), rtol=1e-4, atol=1e-5)


def test_grouped_fp16_matmul_with_masked_tails_and_activation(caplog):
    r = rng(15)
    m, n, k = 100, 72, 90
    a = r.standard_normal((m, k)).astype(np.float16)
    b = r.standard_normal((k, n)).astype(np.float16)
    grid = (triton.cdiv(m, 32) * triton.cdiv(n, 32),)

    def fn(a, b):
        return call(K.grouped_matmul_kernel, a, b, m, n, k, k, 1, n, 1, n, 1, out=sds((m, n), jnp.float16),
                    grid=grid, BM=32, BN=32, BK=32, GROUP_M=2, ACTIVATION="leaky_relu")

    got = run_xla(fn, a, b, caplog=caplog).astype(np.float32)
    acc = a.astype(np.float32) @ b.astype(np.float32)
    ref = np.where(acc >= 0, acc, np.float32(0.01) * acc).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)


# ----------------------------------------------------------------------------- memory


@pytest.mark.skipif(tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 9),
                    reason=f"Triton {triton.__version__} removed tl.make_block_ptr (tox -e triton36 runs it)")
def test_block_pointer_copy_with_advance_and_boundary_check(caplog):
    x = rng(16).standard_normal((37, 50)).astype(np.float32)
    got = run_xla(lambda a: call(K.block_ptr_copy_kernel, a, 37, 50, out=sds(a.shape, a.dtype),
                                 grid=(triton.cdiv(37, 8),), BM=8, BN=16), x, caplog=caplog)
    np.testing.assert_array_equal(got, x + 1)


def test_tensor_descriptor_tiles_over_a_two_dimensional_grid(caplog):
    x = rng(17).standard_normal((37, 50)).astype(np.float32)
    got = run_xla(lambda a: call(K.descriptor_tiles_kernel, a, 37, 50, out=sds(a.shape, a.dtype),
                                 grid=(triton.cdiv(37, 8), triton.cdiv(50, 16)), BM=8, BN=16), x, caplog=caplog)
    # XLA contracts x * 3 - 1 into one fma, as Triton does on a GPU (enable_fp_fusion): within 1 ulp
    np.testing.assert_allclose(got, x * 3 - 1, rtol=0, atol=float(np.spacing(np.float32(16))))


def test_histogram_with_colliding_atomic_add_and_atomic_max(caplog):
    x = rng(18).standard_normal(5000).astype(np.float32) * 2
    bins, lo, width = 16, -4.0, 0.5

    def fn(a):
        return call(K.histogram_kernel, a, a.size, bins, lo, width,
                    out=(sds((bins,), jnp.int32), sds((bins,), jnp.float32)),
                    grid=(triton.cdiv(a.size, 1024),), BLOCK=1024, zeroed_outputs=(0, 1))

    counts, top = run_xla(fn, x, caplog=caplog)
    which = np.clip(((x - np.float32(lo)) / np.float32(width)).astype(np.int32), 0, bins - 1)
    np.testing.assert_array_equal(counts, np.bincount(which, minlength=bins))
    assert counts.sum() == x.size
    ref_top = np.zeros(bins, np.float32)  # the output starts zeroed: empty bins and all-negative bins stay 0
    np.maximum.at(ref_top, which, x)
    np.testing.assert_array_equal(top, ref_top)


def test_column_sums_meet_through_atomic_add(caplog):
    x = rng(19).standard_normal((300, 90)).astype(np.float32)

    def fn(a):
        return call(K.column_sum_atomic_kernel, a, 300, 90, out=sds((90,), jnp.float32),
                    grid=(triton.cdiv(300, 64), triton.cdiv(90, 32)), ROWS=64, BLOCK=32, zeroed_outputs=(0,))

    got = run_xla(fn, x, caplog=caplog)
    np.testing.assert_allclose(got, x.sum(axis=0), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- loops and grids


def collatz_steps(v: int) -> int:
    steps = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        steps += 1
    return steps


def test_static_range_horner_and_data_dependent_while(caplog):
    x = np.linspace(-2, 2, 1000).astype(np.float32)
    starts = np.array([1, 2, 3, 6, 7, 27, 97, 1], np.int32)

    def fn(a, s):
        return call(K.poly_collatz_kernel, a, s, a.size, out=(sds(a.shape, a.dtype), sds((8,), jnp.int32)),
                    grid=(8,), BLOCK=128, C0=1.0, C1=-2.0, C2=0.5, C3=0.25)

    poly, steps = run_xla(fn, x, starts, caplog=caplog)
    np.testing.assert_allclose(poly, ((0.25 * x + 0.5) * x - 2.0) * x + 1.0, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(steps, [collatz_steps(int(v)) for v in starts])


def test_three_dimensional_grid_int64_offsets_and_num_programs(caplog):
    batch, height, width = 3, 5, 70
    x = rng(20).standard_normal((batch, height, width)).astype(np.float32)
    grid = (triton.cdiv(width, 32), height, batch)
    programs = grid[0] * grid[1] * grid[2]

    def fn(a):
        return call(K.grid3d_kernel, a, height * width, width, height, width,
                    out=(sds(a.shape, a.dtype), sds((programs,), jnp.int32)), grid=grid, BLOCK=32)

    out, info = run_xla(fn, x, caplog=caplog)
    scale = (np.arange(batch)[:, None] * height + np.arange(height)[None, :] + 1).astype(np.float32)
    np.testing.assert_array_equal(out, x * scale[:, :, None])
    np.testing.assert_array_equal(info, programs * 1000 + np.arange(programs))


def test_row_chunks_with_a_dynamic_loop_bound(caplog):
    x = rng(21).standard_normal((50, 40)).astype(np.float32)
    got = run_xla(lambda a: call(K.strided_rows_kernel, a, 50, 40, out=sds((7, 40), jnp.float32), grid=(7,),
                                 ROWS_PER_PROGRAM=8, BLOCK=64), x, caplog=caplog)
    ref = np.stack([x[i * 8:(i + 1) * 8].max(axis=0) for i in range(7)])
    np.testing.assert_array_equal(got, ref)
