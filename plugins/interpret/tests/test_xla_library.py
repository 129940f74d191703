"""Kernels of real libraries (Liger-Kernel, flash-linear-attention, FlagGems) on the CPU's XLA path.

Each kernel is loaded from the installed library's source without importing torch (``tritonplug.kernels_of``),
called through ``triton_call`` under ``jax.jit``, checked to have been translated (no fallback log line, no
host call in the lowered program) and compared with NumPy.
"""

from __future__ import annotations

import importlib.util
import logging
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from helpers import requires_backend

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret")]
HOST_CALL = "tritonplug_host_kernel"
FALLBACK = "runs in Triton's interpreter"
LIGER = "liger_kernel.ops."


@pytest.fixture(autouse=True)
def _xla_path(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")


class _Kernels:
    """A library module's jitted functions by name, autotune/heuristics wrappers removed (the tests pass
    every meta-parameter)."""

    def __init__(self, module: str) -> None:
        if importlib.util.find_spec(module.partition(".")[0]) is None:
            pytest.skip(f"{module} is not installed")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # FlagGems' @libentry() needs torch: dropped, the kernels do not
            self.module = tritonplug.kernels_of(module)

    def __getitem__(self, name: str):
        kernel = getattr(self.module, name)
        while not isinstance(kernel, triton.runtime.jit.JITFunction):
            kernel = kernel.fn
        return kernel


load = _Kernels


def launch(kernel, grid, args, written, caplog, **meta):
    """Run ``kernel`` with ``args`` (its non-constexpr parameters in order, outputs included as arrays);
    returns the arrays at the indices ``written`` after the kernel, checking that it took the XLA path."""
    arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    out_type = [jax.ShapeDtypeStruct(args[i].shape, args[i].dtype) for i in written]

    def fn(*operands):
        it = iter(operands)
        bound = [next(it) if isinstance(a, np.ndarray) else a for a in args]
        refs = {i: jax.new_ref(bound[i]) for i in written}
        tritonplug.triton_call(*[refs.get(i, a) for i, a in enumerate(bound)], kernel=kernel, out_type=(),
                               grid=grid, **meta)
        return [refs[i][...] for i in written]

    operands = [jnp.asarray(args[i]) for i in arrays]
    with caplog.at_level(logging.WARNING, logger="tritonplug.interpret"):
        text = jax.jit(fn).lower(*operands).as_text()
    fallbacks = [r.getMessage() for r in caplog.records if FALLBACK in r.getMessage()]
    assert not fallbacks, fallbacks
    assert out_type and HOST_CALL not in text, "the kernel was not translated to XLA"
    return [np.asarray(x) for x in jax.jit(fn)(*operands)]


def normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ----------------------------------------------------------------------------- Liger-Kernel


def test_liger_cross_entropy_with_an_ignored_row_returns_early(caplog):
    """An ignored target returns from the middle of the kernel: a function of several blocks."""
    ns = load(LIGER + "cross_entropy")
    n, v = 6, 100
    x = normal(n, v)
    y = np.random.default_rng(1).integers(0, v, n).astype(np.int32)
    y[2] = -100
    zeros = np.zeros(n, np.float32)
    dx, loss = launch(ns["liger_cross_entropy_kernel"], n,
                      [x, v, y, 1, np.zeros(1, np.float32), zeros, zeros.copy(), 1, zeros.copy(), 1,
                       np.zeros(n, np.int64), 1, v, 5.0, 5.0, 1.0, -100], [0, 5], caplog, softcap=1.0,
                      lse_square_scale=0.0, label_smoothing=0.0, reduction="mean", RETURN_Z_LOSS=False,
                      RETURN_TOKEN_ACCURACY=False, RETURN_PREDICTED_TOKENS=False, BLOCK_SIZE=32,
                      HAS_WEIGHT=False, HAS_SOFTCAPPING=False, HAS_GRADIENTS=True)
    kept = y != -100
    target = np.where(kept, y, 0)
    lse = np.log(np.exp(x).sum(1))
    np.testing.assert_allclose(loss, np.where(kept, lse - x[np.arange(n), target], 0) / 5, rtol=1e-5, atol=1e-6)
    grad = (softmax(x) - np.eye(v)[target]) / 5
    np.testing.assert_allclose(dx, np.where(kept[:, None], grad, 0), rtol=1e-4, atol=1e-6)


def test_liger_rms_norm_and_layer_norm(caplog):
    x, w, b = normal(5, 70), normal(70, seed=1), normal(70, seed=2)
    rows = np.zeros(5, np.float32)
    y, rstd = launch(load(LIGER + "rms_norm")["_rms_norm_forward_kernel"], 5,
                     [np.zeros_like(x), 70, x, 70, w, 1, rows, 1, 70, 1e-6, 0.0], [0, 6], caplog,
                     casting_mode=0, elementwise_affine=True, BLOCK_SIZE=128)
    want = 1 / np.sqrt((x * x).mean(1) + 1e-6)
    np.testing.assert_allclose(rstd, want, rtol=1e-5)
    np.testing.assert_allclose(y, x * want[:, None] * w, rtol=1e-5, atol=1e-6)
    y, mean, rstd = launch(load(LIGER + "layer_norm")["_layer_norm_forward_kernel"], 5,
                           [np.zeros_like(x), 70, x, 70, w, 1, b, 1, rows, 1, rows.copy(), 1, 70, 1e-5],
                           [0, 8, 10], caplog, BLOCK_SIZE=128)
    want = 1 / np.sqrt(x.var(1) + 1e-5)
    np.testing.assert_allclose(mean, x.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, (x - x.mean(1, keepdims=True)) * want[:, None] * w + b, rtol=1e-4, atol=1e-5)


def test_liger_swiglu_geglu_and_softmax(caplog):
    a, b = normal(4, 50), normal(4, 50, seed=1)
    (c,) = launch(load(LIGER + "swiglu")["_swiglu_forward_kernel"], 4, [a, b, np.zeros_like(a), 50, 1.0], [2],
                  caplog, n_cols=50, BLOCK_SIZE=64)
    np.testing.assert_allclose(c, a / (1 + np.exp(-a)) * b, rtol=1e-5, atol=1e-6)
    (c,) = launch(load(LIGER + "geglu")["_geglu_tanh_forward_kernel"], 4, [a, b, np.zeros_like(a), 50], [2],
                  caplog, n_cols=50, BLOCK_SIZE=64)
    gelu = 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))
    np.testing.assert_allclose(c, gelu * b, rtol=1e-5, atol=1e-6)
    x = normal(6, 100)
    (y,) = launch(load(LIGER + "softmax")["_softmax_single_block_forward_kernel"], 6,
                  [np.zeros_like(x), 100, x, 100, 100], [0], caplog, BLOCK_SIZE=128)
    np.testing.assert_allclose(y, softmax(x), rtol=1e-5, atol=1e-7)


def test_liger_rope_in_place(caplog):
    bs, sl, nq, nk, hd = 2, 4, 4, 2, 16
    q, k, theta = normal(bs, sl, nq, hd), normal(bs, sl, nk, hd, seed=1), normal(1, sl, hd // 2, seed=2)
    cos, sin = (np.concatenate([f(theta)] * 2, -1).astype(np.float32) for f in (np.cos, np.sin))
    q2, k2 = launch(load(LIGER + "rope")["_triton_rope"], bs * sl, [q, nq * hd, k, nk * hd, cos, hd, sin, hd, sl],
                    [0, 2], caplog, bs=bs, cos_bs=1, n_qh=nq, n_kh=nk, hd=hd, pad_n_qh=nq, pad_n_kh=nk,
                    pad_hd=hd, pad_rd=hd, rd=hd, BLOCK_SIZE=16)

    def rotated(x):
        half = hd // 2
        return x * cos[:, :, None] + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin[:, :, None]

    np.testing.assert_allclose(q2, rotated(q), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(k2, rotated(k), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- flash-linear-attention


def test_fla_l2norm(caplog):
    x = normal(10, 40)
    y, rstd = launch(load("fla.modules.norm.l2norm")["l2norm_fwd_kernel"], 3,
                     [x, np.zeros_like(x), np.zeros(10, np.float32), 1e-6, 10], [1, 2], caplog,
                     D=40, BD=64, NB=1, BT=4)
    want = 1 / np.sqrt((x * x).sum(1) + 1e-6)
    np.testing.assert_allclose(rstd, want, rtol=1e-5)
    np.testing.assert_allclose(y, x * want[:, None], rtol=1e-5, atol=1e-7)


def test_fla_fused_recurrent_linear_attention(caplog):
    ns = load("fla.ops.common.fused_recurrent")
    b, t, h, d = 2, 5, 2, 16
    q, k, v = normal(b, t, h, d), normal(b, t, h, d, seed=1), normal(b, t, h, d, seed=2)
    o, ht = np.zeros_like(v), np.zeros((b, h, d, d), np.float32)
    # unused optional tensors (USE_G=False …) get q: the kernel never reads them
    o, ht = launch(ns["fused_recurrent_fwd_kernel"], b * h, [q, k, v, q, q, q, q, o, q, ht, q, 0.5, b, t],
                   [7, 9], caplog, H=h, K=d, V=d, BK=16, BV=16, REVERSE=False, USE_G=False, USE_G_GAMMA=False,
                   USE_GK=False, USE_GV=False, USE_INITIAL_STATE=False, STORE_FINAL_STATE=True, IS_VARLEN=False)
    state = np.zeros((b, h, d, d))
    want = np.zeros((b, t, h, d))
    for i in range(t):
        state = state + np.einsum("bhk,bhv->bhkv", k[:, i], v[:, i])
        want[:, i] = np.einsum("bhkv,bhk->bhv", state, q[:, i] * 0.5)
    np.testing.assert_allclose(o, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ht, state, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- FlagGems


def gems(module):
    return load("flag_gems.ops." + module)


def test_flag_gems_two_stage_sum_blockwise_scan_and_rms_norm(caplog):
    x = normal(1000)
    (mid,) = launch(gems("sum")["sum_kernel_1"], 8, [x, np.zeros(8, np.float32), 1000], [1], caplog,
                    BLOCK_SIZE=128)
    (total,) = launch(gems("sum")["sum_kernel_2"], 1, [mid, np.zeros(1, np.float32), 8], [1], caplog, BLOCK_MID=8)
    np.testing.assert_allclose(total[0], x.sum(), rtol=1e-5)
    x = normal(100)
    scan, parts = launch(gems("cumsum")["scan_part_sum_kernel"], 4, [x, np.zeros(100, np.float32),
                         np.zeros(4, np.float32), 100, 4], [1, 2], caplog, BLOCK_SIZE=32)
    blocks = np.pad(x, (0, 28)).reshape(4, 32)
    np.testing.assert_allclose(scan, np.cumsum(blocks, 1).reshape(-1)[:100], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(parts, blocks.sum(1), rtol=1e-5, atol=1e-5)
    x, w = normal(5, 70), normal(70, seed=1)
    y, inv = launch(gems("rms_norm")["rms_norm_kernel"], 5,
                    [np.zeros_like(x), np.zeros(5, np.float32), x, w, 70, 1, 70, 1, 70, 1e-6], [0, 1], caplog,
                    BLOCK_SIZE=128)
    want = 1 / np.sqrt((x * x).mean(1) + 1e-6)
    np.testing.assert_allclose(inv, want, rtol=1e-5)
    np.testing.assert_allclose(y, x * want[:, None] * w, rtol=1e-5, atol=1e-6)
