# Launchers ported from Liger-Kernel 0.8.5 (BSD-2-Clause, Copyright 2024 LinkedIn Corporation, All Rights
# Reserved) and flash-linear-attention (fla-core 0.6.0; MIT, Copyright (c) 2023-2026 Songlin Yang, Yu Zhang,
# Zhiyuan Li): their conditions and the licences' full texts in THIRD_PARTY_NOTICES.md.
"""Launchers of Liger-Kernel 0.8.5's row kernels that ``examples/ports/`` does not port (LayerNorm, GeGLU,
Softmax, PolyNorm) and of flash-linear-attention 0.6.0's gated RMSNorm (Mamba-2's), for counting what their
translations compile to on the CPU (``test_xla_row_kernels.py``).

Each launches the installed kernel (``tritonplug.kernels_of``, never copied) as Liger's own launcher does
(``liger_kernel.ops.layer_norm.layer_norm_forward`` …): one program per row, ``calculate_settings`` for the
block; LayerNorm's backward as Liger launches it off the GPU (``sm_count`` 1: one program that loops over
every row). Outputs are fresh arrays where Liger writes in place (GeGLU's backward). The backward launchers
take the program count Liger reads from the device (``sm_count``, 1 off the GPU) as an argument: on a GPU it
rarely divides the rows.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import triton

import tritonplug

_utils = tritonplug.kernels_of("liger_kernel.ops.utils")
_layer_norm = tritonplug.kernels_of("liger_kernel.ops.layer_norm")
_geglu = tritonplug.kernels_of("liger_kernel.ops.geglu")
_softmax = tritonplug.kernels_of("liger_kernel.ops.softmax")
_poly_norm = tritonplug.kernels_of("liger_kernel.ops.poly_norm")
_gated = tritonplug.kernels_of("fla.modules.norm.layernorm_gated")
calculate_settings = _utils.calculate_settings
_layer_norm_forward_kernel = tritonplug.launch(_layer_norm._layer_norm_forward_kernel)
_layer_norm_backward_kernel = tritonplug.launch(_layer_norm._layer_norm_backward_kernel)
_geglu_forward_kernel = tritonplug.launch(_geglu._geglu_tanh_forward_kernel)
_geglu_backward_kernel = tritonplug.launch(_geglu._geglu_tanh_backward_kernel)
_softmax_single = tritonplug.launch(_softmax._softmax_single_block_forward_kernel)
_softmax_multi = tritonplug.launch(_softmax._softmax_multi_block_forward_kernel)
_poly_norm_forward_kernel = tritonplug.launch(_poly_norm._poly_norm_forward_kernel)
_poly_norm_backward_kernel = tritonplug.launch(_poly_norm._poly_norm_backward_kernel)
_gated_forward_kernel = tritonplug.launch(_gated.layer_norm_fwd_kernel_group)
_gated_backward_kernel = tritonplug.launch(_gated.layer_norm_bwd_kernel_group)


@tritonplug.torch_launcher
def layer_norm_forward(X, W, B, eps):
    """Liger's ``layer_norm_forward``: (Y, Mean, RSTD)."""
    n_rows, n_cols = X.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    Y = tritonplug.empty((n_rows, n_cols), dtype=X.dtype)
    Mean = tritonplug.empty(n_rows, dtype=jnp.float32)
    RSTD = tritonplug.empty(n_rows, dtype=jnp.float32)
    _layer_norm_forward_kernel[(n_rows,)](
        Y, Y.stride(0), X, X.stride(0), W, W.stride(0), B, B.stride(0), Mean, Mean.stride(0), RSTD, RSTD.stride(0),
        n_cols, eps, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return Y, Mean, RSTD


@tritonplug.torch_launcher
def layer_norm_backward(dY, X, W, Mean, RSTD, sm_count=1):
    """Liger's ``layer_norm_backward`` on ``sm_count`` programs (1 off the GPU): (dX, dW, dB)."""
    n_rows, n_cols = dY.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    DX = tritonplug.empty((n_rows, n_cols), dtype=X.dtype)
    _DW = tritonplug.empty((sm_count, n_cols), dtype=jnp.float32)
    _DB = tritonplug.empty((sm_count, n_cols), dtype=jnp.float32)
    rows_per_program = math.ceil(n_rows / sm_count)
    _layer_norm_backward_kernel[(sm_count,)](
        X, X.stride(0), W, Mean, Mean.stride(0), RSTD, RSTD.stride(0), DX, DX.stride(0), _DW, _DW.stride(0),
        _DB, _DB.stride(0), dY, dY.stride(0), n_rows, n_cols, rows_per_program=rows_per_program,
        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return DX, jnp.sum(_DW[...], axis=0), jnp.sum(_DB[...], axis=0)


@tritonplug.torch_launcher
def geglu_forward(a, b):
    """Liger's ``geglu_forward``: c."""
    n_rows, n_cols = a.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    c = tritonplug.empty_like(a)
    _geglu_forward_kernel[(n_rows,)](a, b, c, c.stride(-2), n_cols=n_cols, BLOCK_SIZE=BLOCK_SIZE,
                                     num_warps=num_warps)
    return c


@tritonplug.torch_launcher(writes=("a", "b"))
def geglu_backward(a, b, dc):
    """Liger's ``geglu_backward`` (in place over ``a`` and ``b``): (da, db)."""
    n_rows, n_cols = dc.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    _geglu_backward_kernel[(n_rows,)](dc, a, b, dc.stride(-2), n_cols=n_cols, BLOCK_SIZE=BLOCK_SIZE,
                                      num_warps=num_warps)
    return a, b


def _settings(n_cols):
    """``calculate_settings`` (whose 32 warps for blocks of 32768 or more ask torch whether this is ROCm): 32."""
    return calculate_settings(n_cols) if n_cols <= 16384 else (triton.next_power_of_2(n_cols), 32)


@tritonplug.torch_launcher
def softmax_forward(x):
    """Liger's ``_softmax_forward``: one block per row up to 65536 columns (``calculate_settings``), else blocks
    along the row."""
    n_rows, n_cols = x.shape
    BLOCK_SIZE, num_warps = _settings(n_cols)
    y = tritonplug.empty_like(x)
    kernel = _softmax_single if n_cols <= BLOCK_SIZE else _softmax_multi
    kernel[(n_rows,)](y, y.stride(0), x, x.stride(0), n_cols, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return y


@tritonplug.torch_launcher
def poly_norm_forward(X, W, B, eps):
    """Liger's ``poly_norm_forward``: (Y, RSTD), RSTD ``(rows, 3)``: each row's three (x³, x², x), a per-row scalar
    three elements apart."""
    n_rows, n_cols = X.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    Y = tritonplug.empty((n_rows, n_cols), dtype=X.dtype)
    RSTD = tritonplug.empty((n_rows, 3), dtype=jnp.float32)
    _poly_norm_forward_kernel[(n_rows,)](Y, Y.stride(0), X, X.stride(0), W, B, RSTD, RSTD.stride(0), n_cols, eps,
                                         BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return Y, RSTD


@tritonplug.torch_launcher
def poly_norm_backward(dY, X, W, RSTD, sm_count=1):
    """Liger's ``poly_norm_backward`` (not in place) on ``sm_count`` programs: (dX, dW, dB), each program's partial
    sums of dW three elements apart."""
    n_rows, n_cols = dY.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    dX = tritonplug.zeros_like(dY)
    _dW = tritonplug.empty((sm_count, 3), dtype=jnp.float32)
    _dB = tritonplug.empty((sm_count,), dtype=jnp.float32)
    rows_per_program = math.ceil(n_rows / sm_count)
    _poly_norm_backward_kernel[(sm_count,)](
        dY, dY.stride(0), dX, dX.stride(0), X, X.stride(0), W, RSTD, RSTD.stride(0), _dW, _dW.stride(0), _dB,
        n_rows, n_cols, rows_per_program, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return dX, jnp.sum(_dW[...], axis=0), jnp.sum(_dB[...], axis=0, keepdims=True)


def _gated_settings(group_size):
    BD = triton.next_power_of_2(group_size)
    return BD, min(max(BD // 256, 1), 8)


@tritonplug.torch_launcher
def gated_rms_norm_forward(x, weight, z, groups, eps):
    """FLA's ``layernorm_gated.layer_norm_fwd`` as RMSNorm with the gate applied first (``norm_before_gate=False``:
    Mamba-2's): (out, rstd), rstd ``(groups * rows,)``."""
    T, D = x.shape
    BD, num_warps = _gated_settings(D // groups)
    out = tritonplug.empty_like(x)
    rstd = tritonplug.empty((groups * T,), dtype=jnp.float32)
    _gated_forward_kernel[(T, groups)](
        x=x, y=out, w=weight, b=None, g=z, mean=None, rstd=rstd, stride_x_row=x.stride(0),
        stride_y_row=out.stride(0), stride_g_row=z.stride(0), T=T, D=D // groups, eps=eps, BD=BD,
        NORM_BEFORE_GATE=False, IS_RMS_NORM=True, num_warps=num_warps)
    return out, rstd


@tritonplug.torch_launcher
def gated_rms_norm_backward(dy, x, weight, z, rstd, groups, eps, sm_count=1):
    """FLA's ``layernorm_gated.layer_norm_bwd`` for the forward above, on ``sm_count`` SMs (its ``NS`` programs per
    group each walk ``BS`` rows, the last fewer where they do not divide): (dx, dw, dz)."""
    T, D = x.shape
    BD, num_warps = _gated_settings(D // groups)
    dx, dz = tritonplug.empty_like(x), tritonplug.empty_like(z)
    NS = math.ceil(sm_count * math.ceil(4 / num_warps) / groups)
    _dw = tritonplug.empty((NS, D), dtype=jnp.float32)
    BS = math.ceil(T / NS)
    _gated_backward_kernel[(NS, groups)](
        x=x, w=weight, b=None, g=z, y=None, dy=dy, dx=dx, dw=_dw, db=None, dg=dz, mean=None, rstd=rstd,
        stride_x_row=x.stride(0), stride_g_row=z.stride(0), stride_y_row=0, stride_dy_row=dy.stride(0),
        stride_dx_row=dx.stride(0), stride_dg_row=dz.stride(0), stride_dw_row=_dw.stride(0), stride_db_row=0,
        T=T, D=D // groups, eps=eps, BS=BS, NORM_BEFORE_GATE=False, IS_RMS_NORM=True, BD=BD,
        num_warps=num_warps)
    return dx, jnp.sum(_dw[...], axis=0), dz
