# Launchers ported from Liger-Kernel 0.8.5 (BSD-2-Clause, Copyright 2024 LinkedIn Corporation, All Rights
# Reserved): its conditions and the licence's full text in THIRD_PARTY_NOTICES.md.
"""Launchers of more of Liger-Kernel 0.8.5's row kernels (ReLU², the fused residual add + RMSNorm, DyT, Softmax's
backward, KL divergence), for counting what their translations compile to on the CPU
(``test_xla_more_row_kernels.py``); those of ``xla_row_launchers.py`` and ``examples/ports/`` were counted first.

Each launches the installed kernel (``tritonplug.kernels_of``, never copied) as Liger's own launcher does, on 2-D
``(rows, columns)`` inputs (Liger's ``view(-1, n_cols)`` left out); the backward launchers take the program count
Liger reads from the device (``sm_count``, ``NUM_SMS``) as an argument; KL divergence's forward returns the
kernel's output before Liger's reduction over the rows (its per-row sums, or the whole ``(rows, V)`` loss). The
fused add's casting mode is Llama's (Liger's default), its ``offset`` 0; DyT's tile ``BLOCK_N`` is its autotuner's
choice.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import triton
import triton.language as tl

import tritonplug

_utils = tritonplug.kernels_of("liger_kernel.ops.utils")
_relu_squared = tritonplug.kernels_of("liger_kernel.ops.relu_squared")
_fused_add = tritonplug.kernels_of("liger_kernel.ops.fused_add_rms_norm")
_dyt = tritonplug.kernels_of("liger_kernel.ops.dyt")
_softmax = tritonplug.kernels_of("liger_kernel.ops.softmax")
_kl_div = tritonplug.kernels_of("liger_kernel.ops.kl_div")
calculate_settings = _utils.calculate_settings
_relu_squared_forward_kernel = tritonplug.launch(_relu_squared._relu_squared_forward_kernel)
_relu_squared_backward_kernel = tritonplug.launch(_relu_squared._relu_squared_backward_kernel)
_fused_add_forward_kernel = tritonplug.launch(_fused_add._fused_add_rms_norm_forward_kernel)
_fused_add_backward_kernel = tritonplug.launch(_fused_add._fused_add_rms_norm_backward_kernel)
_dyt_fwd_kernel = tritonplug.launch(_dyt._dyt_fwd_kernel)
_dyt_bwd_kernel = tritonplug.launch(_dyt._dyt_bwd_kernel)
_softmax_backward_kernel = tritonplug.launch(_softmax._softmax_single_block_backward_kernel)
_kldiv_kernel_forward = tritonplug.launch(_kl_div._kldiv_kernel_forward)
_kldiv_kernel_backward = tritonplug.launch(_kl_div._kldiv_kernel_backward)
LLAMA = 0   # Liger's _CASTING_MODE_LLAMA


@tritonplug.torch_launcher
def relu_squared_forward(X):
    n_rows, n_cols = X.shape
    Y = tritonplug.empty_like(X)
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    _relu_squared_forward_kernel[(n_rows,)](Y, Y.stride(-2), X, X.stride(-2), n_cols=n_cols, BLOCK_SIZE=BLOCK_SIZE,
                                            num_warps=num_warps)
    return Y


@tritonplug.torch_launcher
def relu_squared_backward(X, dY):
    n_rows, n_cols = dY.shape
    dX = tritonplug.empty_like(dY)
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    _relu_squared_backward_kernel[(n_rows,)](dX, dX.stride(-2), dY, dY.stride(-2), X, X.stride(-2), n_cols=n_cols,
                                             BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return dX


@tritonplug.torch_launcher
def fused_add_rms_norm_forward(X, R, W, eps):
    """``(Y, S, RSTD)``: ``S = X + R``, ``Y`` its RMSNorm times ``W``."""
    n_rows, n_cols = X.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    Y = tritonplug.empty((n_rows, n_cols), dtype=X.dtype)
    S = tritonplug.empty((n_rows, n_cols), dtype=X.dtype)
    RSTD = tritonplug.empty(n_rows, dtype=jnp.float32)
    _fused_add_forward_kernel[(n_rows,)](Y, Y.stride(0), S, S.stride(0), X, X.stride(0), R, R.stride(0), W,
                                         W.stride(0), RSTD, RSTD.stride(0), n_cols, eps, 0.0, LLAMA,
                                         BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, num_stages=2)
    return Y, S, RSTD


@tritonplug.torch_launcher
def fused_add_rms_norm_backward(dY, dS_out, S, W, RSTD, sm_count=1):
    """``(dX, dW)``: ``dX`` (= ``dR``) the RMSNorm's gradient plus ``dS_out``; ``dW`` summed over the programs'
    partial sums."""
    n_rows, n_cols = dY.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    _dW = tritonplug.empty((sm_count, n_cols), dtype=jnp.float32)
    rows_per_program = math.ceil(n_rows / sm_count)
    dX = tritonplug.empty_like(dY)
    _fused_add_backward_kernel[(sm_count,)](dY, dY.stride(0), dS_out, dS_out.stride(0), dX, dX.stride(0), S,
                                            S.stride(0), tl.float32, W, W.stride(0), RSTD, RSTD.stride(0), _dW,
                                            _dW.stride(0), n_rows, n_cols, 0.0, rows_per_program, LLAMA,
                                            BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, num_stages=2,
                                            has_dS_out=True, COMPUTE_DW=True)
    return dX, jnp.sum(_dW[...], axis=0)


@tritonplug.torch_launcher
def dyt_forward(x, alpha, gamma, beta):
    M, N = x.shape
    y = tritonplug.empty_like(x)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), M)  # noqa: E731
    _dyt_fwd_kernel[grid](x, y, alpha, gamma, beta, True, N)
    return y


@tritonplug.torch_launcher
def dyt_backward(dy, x, alpha, gamma, sm_count=1):
    """``(dx, dalpha, dgamma, dbeta)``."""
    M, N = x.shape
    da = tritonplug.zeros(sm_count, triton.cdiv(N, 512), dtype=jnp.float32)
    dg = tritonplug.empty(sm_count, N, dtype=jnp.float32)
    db = tritonplug.empty(sm_count, N, dtype=jnp.float32)
    dx = tritonplug.empty_like(dy)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), sm_count)  # noqa: E731
    _dyt_bwd_kernel[grid](dy, dx, da, dg, db, x, alpha, gamma, True, M, N)
    return dx, jnp.sum(da[...]), jnp.sum(dg[...], axis=0), jnp.sum(db[...], axis=0)


@tritonplug.torch_launcher
def softmax_backward(dy, y):
    n_rows, n_cols = y.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    dx = tritonplug.empty_like(y)
    _softmax_backward_kernel[(n_rows,)](dy, dy.stride(0), y, y.stride(0), dx, dx.stride(0), n_cols,
                                        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return dx


#: Liger's ``MAX_FUSED_SIZE`` for KL divergence on CUDA (its module asks torch for the device to choose it)
KL_MAX_FUSED_SIZE = 65536 // 4


def _kl_block(V: int) -> int:
    """Liger's ``min(MAX_FUSED_SIZE, next_power_of_2(V))``."""
    return min(KL_MAX_FUSED_SIZE, triton.next_power_of_2(V))


@tritonplug.torch_launcher
def kldiv_forward(y_pred, y_true, reduction):
    """``(rows, V)`` losses (``reduction`` 0, Liger's "none") or ``(rows,)`` sums (1, "sum"), in fp32."""
    BT, V = y_pred.shape
    out = tritonplug.zeros((BT, V) if reduction == 0 else (BT,), dtype=jnp.float32)
    _kldiv_kernel_forward[(BT,)](y_pred, y_pred.stride(0), y_true, y_true.stride(0), out, out.stride(0), V, eps=1e-10,
                                 BLOCK_SIZE=_kl_block(V), num_warps=8, log_target=False, reduction=reduction)
    return out


@tritonplug.torch_launcher
def kldiv_backward(target):
    BT, V = target.shape
    new_grads = tritonplug.empty_like(target)
    _kldiv_kernel_backward[(BT,)](target, target.stride(0), new_grads, new_grads.stride(0), V,
                                  BLOCK_SIZE=_kl_block(V), num_warps=8, log_target=False)
    return new_grads
