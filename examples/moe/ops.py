"""The MoE example's public op, where issue 36 names it: ``grouped_matmul(lhs, rhs, group_sizes)``, a drop-in for
``jax.lax.ragged_dot`` on Triton kernels, differentiable in ``lhs`` and ``rhs``, on every backend.

It is defined in :mod:`examples.moe.grouped` (with ``gathered_matmul``, the same op with the router's permutation
fused, which the MoE layer uses); this module only names it, so MoE code can swap one import for the other::

    from examples.moe.ops import grouped_matmul   # for jax.lax.ragged_dot
"""

from .grouped import grouped_matmul

__all__ = ["grouped_matmul"]
