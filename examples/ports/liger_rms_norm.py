# Launchers ported from Liger-Kernel 0.8.5: BSD-2-Clause, Copyright 2024 LinkedIn Corporation, All Rights Reserved.
# Its conditions, and the licence's full text and disclaimer: THIRD_PARTY_NOTICES.md.
"""Liger-Kernel 0.8.5's RMSNorm on JAX: its forward and backward kernels, loaded from the installed
``liger_kernel.ops.rms_norm`` (never copied), launched by its launchers ported with
``tritonplug.launch``, differentiable through ``jax.custom_vjp``.

Where the launchers differ from Liger's ``rms_norm_forward`` / ``rms_norm_backward`` (JAX requires it):

* ``@tritonplug.torch_launcher`` hands the bodies torch-like handles of their arrays (``.view``,
  ``.stride``) and returns arrays; ``torch.empty`` is ``tritonplug.empty``, ``torch.float32`` ``jnp.float32``;
* ``dX = dY`` (in place) is a fresh output: XLA cannot let a kernel write a buffer it also reads through
  another parameter, so in place would first copy ``dY``; a fresh output costs nothing, and XLA reuses
  ``dY``'s memory for it when nothing else needs ``dY``;
* ``with device_context(X.device):`` is gone (JAX places the call); the SM count comes from JAX's device
  (``sm_count_of``);
* ``torch_to_triton_dtype[X.dtype]`` is the same table over JAX dtypes; ``_dW.sum(dim=0).to(W.dtype)``
  is ``jnp.sum(_dW[...], axis=0).astype(W.dtype)``;
* the backward's program count is :func:`equal_loops` of the SM count, so that every program loops over as
  many rows (with 132 SMs and 16,384 rows Liger's last program loops 9 times where the others loop 125): the
  XLA path translates either count without a while loop, gathers or scatters (``inline="auto"`` may inline
  it), but an uneven count runs every program's loop as long as the longest, the extra trips masked off.

In a sharded ``jit`` each launcher runs on its device's rows (``@tritonplug.partitioned``): the rows ``r``
may be split, the normalised hidden dim ``d`` stays whole, and the backward's ``dW`` (a sum over rows) is
added over the row shards. The rules name the launchers' own (rows, hidden) view, so the op flattens ``X``'s
leading axes first (a reshape that keeps them split).

Differing lines (``tests/test_ports.py`` counts them, comments and blank lines aside): the forward
launcher changes or adds 5 of Liger's 67 lines and drops 4; the backward changes or adds 7 of 91 and drops 12
(the torch SM-count branches, ``with device_context``); each adds its ``@tritonplug.partitioned`` rule.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import tritonplug

_lib = tritonplug.kernels_of("liger_kernel.ops.rms_norm")
_utils = tritonplug.kernels_of("liger_kernel.ops.utils")
calculate_settings, set_large_grf_mode = _utils.calculate_settings, _utils.set_large_grf_mode
# inline="auto": launched, or inlined as XLA ops where tritonplug.tune measured that faster (docs/using.md)
_rms_norm_forward_kernel = tritonplug.launch(tritonplug.set_inline(_lib._rms_norm_forward_kernel, "auto"))
_rms_norm_backward_kernel = tritonplug.launch(tritonplug.set_inline(_lib._rms_norm_backward_kernel, "auto"))
_block_rms_norm_forward_kernel = tritonplug.launch(tritonplug.set_inline(_lib._block_rms_norm_forward_kernel, "auto"))
_block_rms_norm_backward_kernel = tritonplug.launch(tritonplug.set_inline(_lib._block_rms_norm_backward_kernel, "auto"))
_str_to_casting_mode = _lib._str_to_casting_mode
_CASTING_MODE_LLAMA, _CASTING_MODE_GEMMA = _lib._CASTING_MODE_LLAMA, _lib._CASTING_MODE_GEMMA
torch_to_triton_dtype = {np.dtype(jnp.float32): tl.float32, np.dtype(jnp.float16): tl.float16,
                         np.dtype(jnp.bfloat16): tl.bfloat16}


@tritonplug.partitioned("r d, d -> r d, r d, r", need_replication=("d",))
@tritonplug.torch_launcher
def rms_norm_forward(X, W, eps, offset, casting_mode, row_mode):
    if not isinstance(casting_mode, int):
        assert casting_mode in _str_to_casting_mode, f"Invalid casting mode: {casting_mode}"
        casting_mode = _str_to_casting_mode[casting_mode]
    else:
        assert casting_mode in _str_to_casting_mode.values(), f"Invalid casting mode: {casting_mode}"

    shape = X.shape
    dim = shape[-1]
    X = X.view(-1, dim)
    n_rows, n_cols = X.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)

    Y = tritonplug.empty((n_rows, n_cols), dtype=X.dtype, device=X.device)
    # RSTD is to cache rstd for each row
    # RSTD is always computed/stored in fp32 if we are using Llama or Gemma casting mode
    rstd_dtype = jnp.float32 if casting_mode in (_CASTING_MODE_LLAMA.value, _CASTING_MODE_GEMMA.value) else X.dtype
    RSTD = tritonplug.empty(n_rows, dtype=rstd_dtype, device=X.device)

    if W is not None:
        # Check constraints.
        assert X.shape[1] == W.shape[0], (
            "Incompatible hidden size dimension between tensor1.shape[1] and tensor2.shape[0]"
        )
        elementwise_affine = True
    else:
        elementwise_affine = False

    kernel_args = {}
    if X.device.type == "xpu":
        set_large_grf_mode(kernel_args)
    if BLOCK_SIZE > 256 or n_rows < 4096 * 8 or row_mode:
        _rms_norm_forward_kernel[(n_rows,)](
            Y,
            Y.stride(0),
            X,
            X.stride(0),
            W,
            W.stride(0) if elementwise_affine else 0,
            RSTD,
            RSTD.stride(0),
            n_cols,
            eps,
            offset,
            casting_mode,
            elementwise_affine=elementwise_affine,
            BLOCK_SIZE=BLOCK_SIZE,
            num_warps=num_warps,
            **kernel_args,  # XPU-specific optimization
        )
    else:
        BLOCK_ROW = 16
        kernel_args["BLOCK_ROW"] = BLOCK_ROW
        _block_rms_norm_forward_kernel[(triton.cdiv(n_rows, BLOCK_ROW),)](
            Y,
            Y.stride(0),
            X,
            X.stride(0),
            W,
            W.stride(0) if elementwise_affine else 0,
            RSTD,
            RSTD.stride(0),
            n_rows,
            n_cols,
            eps,
            offset,
            casting_mode,
            elementwise_affine=elementwise_affine,
            BLOCK_SIZE=BLOCK_SIZE,
            num_warps=num_warps,
            **kernel_args,  # XPU-specific optimization
        )
    return Y.view(*shape), X, RSTD, BLOCK_SIZE, num_warps, casting_mode


def sm_count_of(X) -> int:
    """Liger's program count: the SM count of a CUDA device (JAX's ``core_count``), else 1."""
    return getattr(jax.devices()[0], "core_count", 1) if X.device.type == "cuda" else 1


def equal_loops(n_rows: int, programs: int) -> int:
    """The backward's program count: the largest count up to ``programs`` (Liger's: one per SM) that divides
    ``n_rows``, so each program's loop over its rows runs equally often, when there is one of at least half of
    ``programs``; else ``programs`` (fewer programs would leave SMs idle for a translation that may not pay)."""
    for count in range(min(programs, n_rows), max(programs // 2, 1) - 1, -1):
        if n_rows % count == 0:
            return count
    return programs


@tritonplug.partitioned("r d, r d, d, r -> r d, d", need_replication=("d",), reduction_factors=("r",))
@tritonplug.torch_launcher
def rms_norm_backward(dY, X, W, RSTD, offset, casting_mode, BLOCK_SIZE, num_warps, in_place, row_mode, needs_dw=None):
    shape = dY.shape
    dim = shape[-1]
    dY = dY.view(-1, dim)
    n_rows, n_cols = dY.shape

    sm_count = equal_loops(n_rows, sm_count_of(X))

    if W is not None:
        elementwise_affine = True
        compute_dw = elementwise_affine if needs_dw is None else (elementwise_affine and needs_dw)
        # fp32 for numerical stability especially.
        _dW = tritonplug.empty((sm_count, n_cols), dtype=jnp.float32, device=W.device) if compute_dw else None
    else:
        elementwise_affine = False
        compute_dw = False
        _dW = None

    if n_cols > BLOCK_SIZE:
        raise RuntimeError("This layer norm doesn't support feature dim >= 64KB.")
    rows_per_program = math.ceil(n_rows / sm_count)
    grid = (sm_count,)

    if in_place is True:
        dX = tritonplug.empty_like(dY)  # JAX: writing over dY, which the kernel also reads, would copy it
    else:
        dX = tritonplug.zeros_like(dY)

    kernel_args = {}
    if X.device.type == "xpu":
        set_large_grf_mode(kernel_args)
    if BLOCK_SIZE > 256 or n_rows < 4096 * 8 or row_mode:
        _rms_norm_backward_kernel[grid](
            dY,
            dY.stride(0),
            dX,
            dX.stride(0),
            X,
            X.stride(0),
            torch_to_triton_dtype[X.dtype],
            W,
            W.stride(0) if elementwise_affine else 0,
            RSTD,
            RSTD.stride(0),
            _dW,
            _dW.stride(0) if compute_dw else 0,
            n_rows,
            n_cols,
            offset,
            rows_per_program,
            casting_mode,
            elementwise_affine=elementwise_affine,
            BLOCK_SIZE=BLOCK_SIZE,
            COMPUTE_DW=compute_dw,
            num_warps=num_warps,
            **kernel_args,  # XPU-specific optimization
        )
    else:
        BLOCK_ROW = 16
        kernel_args["BLOCK_ROW"] = BLOCK_ROW
        _block_rms_norm_backward_kernel[grid](
            dY,
            dY.stride(0),
            dX,
            dX.stride(0),
            X,
            X.stride(0),
            torch_to_triton_dtype[X.dtype],
            W,
            W.stride(0) if elementwise_affine else 0,
            RSTD,
            RSTD.stride(0),
            _dW,
            _dW.stride(0) if compute_dw else 0,
            n_rows,
            n_cols,
            offset,
            casting_mode,
            elementwise_affine=elementwise_affine,
            BLOCK_SIZE=BLOCK_SIZE,
            COMPUTE_DW=compute_dw,
            num_warps=num_warps,
            **kernel_args,  # XPU-specific optimization
        )
    dX = dX.view(*shape)

    if compute_dw:
        dW = jnp.sum(_dW[...], axis=0).astype(W.dtype)
    else:
        dW = None

    return dX, dW


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5, 6))
def liger_rms_norm(X, W, eps=1e-6, offset=0.0, casting_mode="llama", in_place=True, row_mode=None):
    """``LigerRMSNormFunction.apply`` on JAX arrays: ``X / rms(X) * (offset + W)`` over the last axis."""
    return rms_norm_forward(_rows(X), W, eps, offset, casting_mode, row_mode)[0].reshape(X.shape)


def _rows(X):
    """X as the launchers' (rows, hidden) view: leading axes merged, which keeps them split in a sharded jit."""
    return X.reshape(-1, X.shape[-1])


def _fwd(X, W, eps, offset, casting_mode, in_place, row_mode):
    Y, X2, RSTD, BLOCK_SIZE, num_warps, mode = rms_norm_forward(_rows(X), W, eps, offset, casting_mode, row_mode)
    return Y.reshape(X.shape), (X2, W, RSTD, BLOCK_SIZE, num_warps, mode)


def _bwd(eps, offset, casting_mode, in_place, row_mode, res, dY):
    X, W, RSTD, BLOCK_SIZE, num_warps, mode = res
    dX, dW = rms_norm_backward(_rows(dY), X, W, RSTD, offset, mode, BLOCK_SIZE, num_warps, in_place, row_mode)
    return dX.reshape(dY.shape), dW


liger_rms_norm.defvjp(_fwd, _bwd)


def rms_norm_reference(X, W, eps=1e-6, offset=0.0):
    x = X.astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    return ((x * rstd).astype(X.dtype) * (offset + W)).astype(X.dtype)


def main(rows: int = 64, cols: int = 96) -> None:
    kx, kw, kd = jax.random.split(jax.random.key(0), 3)
    X = jax.random.normal(kx, (2, rows // 2, cols), jnp.float32)
    W = 1.0 + 0.1 * jax.random.normal(kw, (cols,), jnp.float32)
    dY = jax.random.normal(kd, X.shape, jnp.float32)
    for offset in (0.0, 1.0):
        y = jax.jit(liger_rms_norm, static_argnums=(2, 3))(X, W, 1e-6, offset)
        np.testing.assert_allclose(y, rms_norm_reference(X, W, 1e-6, offset), rtol=1e-5, atol=1e-5)
        loss = lambda fn, offset=offset: lambda X, W: jnp.sum(fn(X, W, 1e-6, offset) * dY)  # noqa: E731
        got = jax.jit(jax.grad(loss(liger_rms_norm), argnums=(0, 1)))(X, W)
        want = jax.grad(loss(rms_norm_reference), argnums=(0, 1))(X, W)
        for name, g, w in zip(("dX", "dW"), got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)
    print(f"Liger RMSNorm {X.shape}: y, dX and dW match jax.grad of the jnp reference")


if __name__ == "__main__":
    main()
