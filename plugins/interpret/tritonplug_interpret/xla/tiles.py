"""A store whose programs' 2-D blocks tile the whole buffer: a transposition instead of a scatter.

In parallel mode a store is logged per program and applied after the grid. When :mod:`.lanes`
knows every program's block start and the blocks (rows ``row`` elements apart, runs of stride 1)
are exactly the cells of a grid of tiles over the buffer — each tile once, none missing, none
past an edge — the logged ``[P, R, C]`` blocks are put in place by reordering the programs and
transposing ``[nR, nC, R, C] → [nR, R, nC, C]``, and masked-off lanes keep the old value: one
``select`` over the buffer, no per-element index. Programs that take the tiles along their rows or down
their columns are reordered by a reshape (and a transposition); only another order (a matmul's grouped
"swizzle") gathers whole blocks. The typical case is a matmul's output tile store whose tiles divide the
matrix. Anything else keeps the general scatter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from tritonplug_interpret.xla.lanes import Lanes, access_shape
from tritonplug_interpret.xla.ttir import Op


@dataclass(frozen=True, eq=False)
class Tiling:
    """How each program's block lands in the buffer viewed as ``[n_rows * rows, n_cols * cols]``."""

    shape: tuple[int, ...]  # the block's shape (size-1 dimensions included)
    row_dim: int            # block dimension of stride ``row``
    col_dim: int            # block dimension of stride 1
    n_rows: int             # tiles down
    n_cols: int             # tiles across
    order: np.ndarray       # tile (in row-major order of the grid of tiles) → the program that writes it


def tiling(op: Op, lanes: Lanes, size: int, programs: int) -> Tiling | None:
    """A :class:`Tiling` of ``op`` (a top-level ``tt.store`` through ``lanes``), or None."""
    shape = access_shape(op)
    if not shape or lanes.buffer is None or lanes.value is None or lanes.origin is not None:
        return None
    moving = [(s, d) for d, s in enumerate(lanes.strides) if s]
    if len(moving) != 2:
        return None
    (row, row_dim), (unit, col_dim) = sorted(moving, reverse=True)
    if any(n != 1 for d, n in enumerate(shape) if d not in (row_dim, col_dim)):
        return None     # a broadcast dimension: several lanes write one element
    rows, cols = shape[row_dim], shape[col_dim]
    if unit != 1 or row % cols or size % row or (size // row) % rows:
        return None
    n_rows, n_cols = size // row // rows, row // cols
    if n_rows * n_cols != programs:
        return None
    starts = np.broadcast_to(lanes.value, (programs,))
    r, c = np.divmod(starts, row)
    if np.any(starts < 0) or np.any(r % rows) or np.any(c % cols):
        return None
    cell = (r // rows) * n_cols + c // cols
    if not np.array_equal(np.sort(cell), np.arange(programs)):
        return None
    order = np.empty(programs, np.int64)
    order[cell] = np.arange(programs)
    return Tiling(shape, row_dim, col_dim, n_rows, n_cols, order)


def _arranged(t: Tiling, blocks: Any) -> Any:
    """``[P, *shape]`` blocks as the buffer's flat layout."""
    programs = t.order.shape[0]
    blocks = jnp.broadcast_to(blocks, (programs, *t.shape))
    rows, cols = t.shape[t.row_dim], t.shape[t.col_dim]
    keep = [d for d in range(len(t.shape)) if d not in (t.row_dim, t.col_dim)]
    blocks = jnp.transpose(blocks, (0, *[1 + d for d in keep], 1 + t.row_dim, 1 + t.col_dim))
    blocks = _in_tile_order(t, blocks.reshape(programs, rows, cols))
    return jnp.transpose(blocks.reshape(t.n_rows, t.n_cols, rows, cols), (0, 2, 1, 3)).reshape(-1)


def _in_tile_order(t: Tiling, blocks: Any) -> Any:
    """``blocks[t.order]`` (the tiles in row-major order) without a gather where the programs run along the rows of
    tiles (the order is the identity) or down their columns (a transposition of the grid of programs); any other
    permutation is a gather of whole blocks."""
    programs = t.order.shape[0]
    if np.array_equal(t.order, np.arange(programs)):
        return blocks
    if np.array_equal(t.order, np.arange(programs).reshape(t.n_cols, t.n_rows).T.reshape(-1)):
        grid = blocks.reshape(t.n_cols, t.n_rows, *blocks.shape[1:])
        return jnp.swapaxes(grid, 0, 1).reshape(blocks.shape)
    return blocks[t.order]


def write(data: Any, t: Tiling, values: Any, active: Any) -> Any:
    """``data`` with every program's active lanes set to its ``values``."""
    return jnp.where(_arranged(t, active), _arranged(t, values).astype(data.dtype), data)
