"""A grid's ``tt.dot`` of shared tiles as one GEMM (parallel mode).

Under ``vmap`` a program's ``tt.dot`` of two tiles is a batched dot of P small matrices, and in a
matmul kernel most of them repeat: the A tile of step k is the same in every program of a row of
output tiles, the B tile in every program of a column. When :mod:`.sharing` proves that A takes
only ``nA`` distinct values over the grid and B ``nB`` (and ``nA * nB <= P``: no product that no
program uses), the dot is computed once for all pairs, ``(nA·M × K) @ (K × nB·N)``, and program
``p`` takes its block ``(class_a[p], class_b[p])`` from the result. The batched form reaches this
function through :func:`jax.custom_batching.custom_vmap`; called unbatched (sequential mode, or a
vmap over something else) it is the plain dot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap

from tritonplug_interpret.xla.sharing import count


@dataclass(frozen=True, eq=False)
class SharedDot:
    """Which distinct operand tile each program uses, and one program that has each."""

    a_class: np.ndarray     # int64[P]: program → class of its A tile
    b_class: np.ndarray
    a_first: np.ndarray     # class → a program with that A tile
    b_first: np.ndarray


def plan(a_labels: np.ndarray, b_labels: np.ndarray) -> SharedDot | None:
    """A :class:`SharedDot` when sharing saves work: fewer distinct pairs than programs allow."""
    programs = a_labels.shape[0]
    n_a, n_b = count(a_labels), count(b_labels)
    if programs < 2 or n_a * n_b > programs or (n_a == programs and n_b == programs):
        return None
    first_a = np.unique(a_labels, return_index=True)[1]
    first_b = np.unique(b_labels, return_index=True)[1]
    return SharedDot(a_labels, b_labels, first_a, first_b)


def _matmul(a: Any, b: Any, acc: Any) -> Any:
    """``a @ b`` accumulated in ``acc``'s dtype. bf16 operands of an fp32 accumulator are widened first (exact:
    a product of two bf16 values fits fp32's mantissa): XLA:CPU (jaxlib 0.10.2) fails at run time with
    ``Unsupported element type for DotThunk::Execute: BF16 x BF16 = F32`` when it folds a transpose of such a
    dot's result into the dot (``(A @ B).T``, as FLA's attention kernels' TTIR gives it)."""
    if acc.dtype == jnp.float32:
        a, b = (x.astype(jnp.float32) if x.dtype == jnp.bfloat16 else x for x in (a, b))
    return jnp.matmul(a, b, preferred_element_type=acc.dtype, precision=lax.Precision.HIGHEST)


def plain_dot(a_parts: list, b_parts: list, c: Any) -> Any:
    """``c + A @ B`` with ``A``, ``B`` the parts concatenated along the contraction dimension."""
    a = a_parts[0] if len(a_parts) == 1 else jnp.concatenate(a_parts, axis=-1)
    b = b_parts[0] if len(b_parts) == 1 else jnp.concatenate(b_parts, axis=-2)
    return c + _matmul(a, b, c)


def _rows(x: Any, index: np.ndarray) -> Any:
    """``x[index]`` along axis 0, as a strided slice when ``index`` is a progression (XLA then
    computes only those rows of what produced ``x``)."""
    if index.size > 1:
        step = int(index[1] - index[0])
        if step > 0 and np.array_equal(index, index[0] + step * np.arange(index.size)):
            return x[int(index[0]):int(index[-1]) + 1:step]
    if index.size == 1:
        return x[int(index[0]):int(index[0]) + 1]
    return jnp.take(x, jnp.asarray(index), axis=0)


def dot(shared: SharedDot, a_parts: list, b_parts: list, c: Any) -> Any:
    """``c + A @ B`` for one program (``A``, ``B``: the parts concatenated along the contraction
    dimension); under the program ``vmap``, one GEMM of the distinct tiles."""
    programs, n_parts = shared.a_class.shape[0], len(a_parts)

    @custom_vmap
    def one(*args):
        return plain_dot(list(args[:n_parts]), list(args[n_parts:-1]), args[-1])

    @one.def_vmap
    def grid(axis_size, in_batched, *args):
        if axis_size != programs or not all(in_batched[:-1]) or any(x.ndim != 3 for x in args[:-1]):
            args = [x if batched else jnp.broadcast_to(x, (axis_size, *x.shape))
                    for x, batched in zip(args, in_batched, strict=True)]
            return plain_dot(list(args[:n_parts]), list(args[n_parts:-1]), args[-1]), True
        c = args[-1]
        # the distinct tiles of each part first: XLA then builds only those
        tiles_a = jnp.concatenate([_rows(x, shared.a_first) for x in args[:n_parts]], axis=-1)   # [nA, M, K]
        tiles_b = jnp.concatenate([_rows(x, shared.b_first) for x in args[n_parts:-1]], axis=-2)  # [nB, K, N]
        n_a, m, k = tiles_a.shape
        n_b, _, n = tiles_b.shape
        lhs = tiles_a.reshape(n_a * m, k)
        rhs = jnp.transpose(tiles_b, (1, 0, 2)).reshape(k, n_b * n)
        full = _matmul(lhs, rhs, c)
        blocks = jnp.transpose(full.reshape(n_a, m, n_b, n), (0, 2, 1, 3))[shared.a_class, shared.b_class]
        return c + blocks, True

    return one(*a_parts, *b_parts, c)
