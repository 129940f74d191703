"""``grouped_matmul``: ``jax.lax.ragged_dot`` on Triton kernels, differentiable, on every backend.

``grouped_matmul(lhs, rhs, group_sizes)`` takes ``ragged_dot``'s arguments and gives its result: ``lhs``
``(m, k)`` with its rows sorted by group, ``rhs`` ``(g, k, n)``, ``group_sizes`` ``(g,)`` int32 (traced: a
router's counts), result ``(m, n)`` where rows ``[sum(sizes[:e]), sum(sizes[:e+1]))`` are multiplied by
``rhs[e]``, and rows past ``sum(group_sizes)`` are zero. The forward and dX run vLLM's ``fused_moe_kernel``,
dW our kernel (``kernels.py``); accumulation is fp32, in and out bf16/fp16/fp32.

:func:`gathered_matmul` is the same op with the permutation fused: row ``r`` of the result is
``a[r // top_k] @ b[expert of r]``, the rows read through a :class:`~kernels.BlockPlan` built from the router's
choice, so the tokens are never copied into expert order (the MoE layer's ``tritonplug`` choice).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import triton.language as tl

import tritonplug

from . import kernels

_COMPUTE_TYPES = {jnp.dtype(jnp.bfloat16): tl.bfloat16, jnp.dtype(jnp.float16): tl.float16,
                  jnp.dtype(jnp.float32): tl.float32}


def on_cpu() -> bool:
    """Whether the default backend is the CPU (kernels translated to XLA ops: small tiles)."""
    return jax.default_backend() == "cpu"


def grouped_matmul(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array, precision=None,
                   preferred_element_type=None, group_offset=None) -> jax.Array:
    """``jax.lax.ragged_dot(lhs, rhs, group_sizes)`` on Triton kernels; ``jax.grad`` in ``lhs`` and ``rhs``.

    ``precision`` is accepted for ``ragged_dot``'s signature and ignored (the kernels accumulate in fp32);
    ``preferred_element_type`` is the result's dtype (default: ``lhs``'s); ``group_offset`` (a shard's first
    group, under expert parallelism) is not supported: shard with ``@tritonplug.partitioned`` instead.
    """
    _check(lhs, rhs, group_sizes, group_offset)
    out_dtype = jnp.dtype(preferred_element_type or lhs.dtype)
    if out_dtype not in _COMPUTE_TYPES:
        raise TypeError(f"grouped_matmul: `preferred_element_type` must be bfloat16, float16 or float32, "
                        f"got {out_dtype}")
    m, g = lhs.shape[0], rhs.shape[0]
    if m == 0 or g == 0:
        return jnp.zeros((m, rhs.shape[2]), out_dtype)
    cpu = on_cpu()
    plan = kernels.block_plan(group_sizes, m, kernels.block_size_m(m, g, cpu))
    return gathered_matmul(lhs, rhs, plan, 1, out_dtype, cpu)


def _check(lhs, rhs, group_sizes, group_offset) -> None:
    for name, value in (("lhs", lhs), ("rhs", rhs), ("group_sizes", group_sizes)):
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise TypeError(f"grouped_matmul: `{name}` must be an array, got {type(value).__name__}")
    if lhs.ndim != 2:
        raise ValueError(f"grouped_matmul: `lhs` must be 2-D (m, k), got shape {lhs.shape}")
    if rhs.ndim != 3:
        raise ValueError(f"grouped_matmul: `rhs` must be 3-D (groups, k, n), got shape {rhs.shape}")
    if rhs.shape[1] != lhs.shape[1]:
        raise ValueError(f"grouped_matmul: `rhs` {rhs.shape} must have k = {lhs.shape[1]} (lhs {lhs.shape}) as "
                         "its second dimension")
    if group_sizes.shape != (rhs.shape[0],):
        raise ValueError(f"grouped_matmul: `group_sizes` must have shape ({rhs.shape[0]},), one size per group of "
                         f"`rhs` {rhs.shape}, got {group_sizes.shape}")
    if not jnp.issubdtype(group_sizes.dtype, jnp.integer):
        raise TypeError(f"grouped_matmul: `group_sizes` must be integers (int32), got {group_sizes.dtype}")
    for name, value in (("lhs", lhs), ("rhs", rhs)):
        if jnp.dtype(value.dtype) not in _COMPUTE_TYPES:
            raise TypeError(f"grouped_matmul: `{name}` must be bfloat16, float16 or float32, got {value.dtype}")
    if lhs.dtype != rhs.dtype:
        raise TypeError(f"grouped_matmul: `lhs` ({lhs.dtype}) and `rhs` ({rhs.dtype}) must have one dtype")
    if group_offset is not None:
        raise NotImplementedError("grouped_matmul: `group_offset` is not supported; split the groups over devices "
                                  "with @tritonplug.partitioned (examples/moe/parallel.py) instead")


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def gathered_matmul(a: jax.Array, b: jax.Array, plan: kernels.BlockPlan, top_k: int, out_dtype, cpu: bool):
    """``(plan.num_rows, n)``: row ``r`` is ``a[r // top_k] @ b[expert of r]`` for the rows the plan places,
    zero for the others."""
    return _forward(a, b, plan, top_k, out_dtype, cpu)


def _forward(a, b, plan, top_k, out_dtype, cpu):
    # the plan writes every row (zeros past the groups): no zero fill
    c = tritonplug.empty(plan.num_rows, b.shape[2], dtype=out_dtype)
    return kernels.invoke_fused_moe_triton_kernel(a, b, c, None, plan, False, top_k, _COMPUTE_TYPES[out_dtype], cpu)


def _fwd(a, b, plan, top_k, out_dtype, cpu):
    return _forward(a, b, plan, top_k, out_dtype, cpu), (a, b, plan)


def _bwd(top_k, out_dtype, cpu, residuals, dc):
    return (*gathered_matmul_backward(*residuals, top_k, cpu, dc), None)


def gathered_matmul_backward(a: jax.Array, b: jax.Array, plan: kernels.BlockPlan, top_k: int, cpu: bool,
                             dc: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(da, db)``: :func:`gathered_matmul`'s backward for the cotangent ``dc``, without running its forward
    again (``parallel.py`` calls it from a backward that keeps its own residuals)."""
    dc = dc.astype(a.dtype)
    # dA: each row of dc times its expert's transpose (the same plan: with top_k 1 row r is read from dc[r]),
    # then the top_k rows of one row of a summed.
    da = tritonplug.empty(plan.num_rows, b.shape[1], dtype=a.dtype)
    da = kernels.invoke_fused_moe_triton_kernel(dc, b, da, None, plan, False, 1, _COMPUTE_TYPES[jnp.dtype(a.dtype)],
                                                cpu, transpose_b=True)
    if top_k > 1:
        da = da.reshape(-1, top_k, da.shape[-1]).sum(axis=1, dtype=jnp.float32).astype(a.dtype)
    db = kernels.grouped_dw(a, dc, plan, b.shape[0], top_k, cpu)
    return da, db


gathered_matmul.defvjp(_fwd, _bwd)
