"""Layer norm with Triton forward and backward kernels, differentiable through jax.custom_vjp.

A kernel is opaque to JAX, so ``jax.grad`` of a ``triton_call`` raises; the fix is to give
the call a derivative. Here the forward kernel also returns each row's mean and reciprocal
standard deviation, saved as residuals; the backward kernel turns them into ``dx`` and
per-row partial ``dw``/``db`` that a ``jnp.sum`` reduces (a GPU version would reduce
them in a second kernel or with atomics).

Runs on the CPU interpret backend when no GPU is visible.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import tritonplug

if __package__ in (None, ""):
    from _common import backend_name, on_gpu, platform
else:
    from ._common import backend_name, on_gpu, platform


@triton.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, n_cols, eps, y_ptr, mean_ptr, rstd_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centered * centered, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
    y = centered * rstd * w + b
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layer_norm_bwd_kernel(x_ptr, w_ptr, mean_ptr, rstd_ptr, dy_ptr, n_cols, dx_ptr, dw_part_ptr, db_part_ptr,
                          BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = w * dy
    c1 = tl.sum(xhat * wdy, axis=0) / n_cols
    c2 = tl.sum(wdy, axis=0) / n_cols
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_part_ptr + offs, dy * xhat, mask=mask)
    tl.store(db_part_ptr + offs, dy, mask=mask)


def _rows(x: jax.Array) -> tuple[int, int, int]:
    n_cols = x.shape[-1]
    block = triton.next_power_of_2(n_cols)
    return x.size // n_cols, n_cols, block


def _forward(x: jax.Array, w: jax.Array, b: jax.Array, eps: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    n_rows, n_cols, block = _rows(x)
    stats = jax.ShapeDtypeStruct((n_rows,), jnp.float32)
    y, mean, rstd = tritonplug.triton_call(
        x.reshape(n_rows, n_cols), w, b, n_cols, eps, kernel=layer_norm_fwd_kernel,
        out_type=(jax.ShapeDtypeStruct((n_rows, n_cols), x.dtype), stats, stats), grid=(n_rows,), BLOCK=block)
    return y.reshape(x.shape), mean, rstd


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x: jax.Array, w: jax.Array, b: jax.Array, eps: float = 1e-5) -> jax.Array:
    """Normalise ``x`` over its last axis, then scale by ``w`` and shift by ``b``."""
    return _forward(x, w, b, eps)[0]


def _layer_norm_fwd(x, w, b, eps):
    y, mean, rstd = _forward(x, w, b, eps)
    return y, (x, w, mean, rstd)


def _layer_norm_bwd(eps, residuals, dy):
    del eps  # already folded into rstd
    x, w, mean, rstd = residuals
    n_rows, n_cols, block = _rows(x)
    part = jax.ShapeDtypeStruct((n_rows, n_cols), jnp.float32)
    dx, dw_part, db_part = tritonplug.triton_call(
        x.reshape(n_rows, n_cols), w, mean, rstd, dy.reshape(n_rows, n_cols), n_cols, kernel=layer_norm_bwd_kernel,
        out_type=(jax.ShapeDtypeStruct((n_rows, n_cols), x.dtype), part, part), grid=(n_rows,), BLOCK=block)
    dw = jnp.sum(dw_part, axis=0).astype(w.dtype)
    db = jnp.sum(db_part, axis=0).astype(w.dtype)
    return dx.reshape(x.shape), dw, db


layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


def layer_norm_reference(x: jax.Array, w: jax.Array, b: jax.Array, eps: float = 1e-5) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * w + b


def main() -> None:
    rows, cols = (4096, 1024) if on_gpu() else (64, 96)
    kx, kw, kb, kd = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(kx, (rows, cols), jnp.float32)
    w = 1.0 + 0.1 * jax.random.normal(kw, (cols,), jnp.float32)
    b = 0.1 * jax.random.normal(kb, (cols,), jnp.float32)
    dy = jax.random.normal(kd, (rows, cols), jnp.float32)

    def loss(fn):
        return lambda x, w, b: jnp.sum(fn(x, w, b) * dy)

    y = jax.jit(layer_norm)(x, w, b)
    np.testing.assert_allclose(np.asarray(y), np.asarray(layer_norm_reference(x, w, b)), rtol=1e-4, atol=1e-4)
    grads = jax.jit(jax.grad(loss(layer_norm), argnums=(0, 1, 2)))(x, w, b)
    expected = jax.grad(loss(layer_norm_reference), argnums=(0, 1, 2))(x, w, b)
    for name, got, want in zip(("dx", "dw", "db"), grads, expected, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-3, atol=1e-3, err_msg=name)
    print(f"layer norm of {rows}x{cols} on platform {platform()!r} by backend {backend_name()!r}: "
          f"y, dx, dw and db match jax.grad of the jnp reference")


if __name__ == "__main__":
    main()
