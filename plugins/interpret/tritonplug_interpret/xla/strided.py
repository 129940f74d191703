"""Block loads read as windows of a strided view of the buffer, wherever they are in the kernel.

A load whose pointer tensor is ``base + Σ_d s_d * i_d`` — a per-program scalar ``base``
(anything: computed from program ids, loop counters, loaded values) plus lane offsets whose
strides ``s_d`` are known before tracing — reads a rectangle of the buffer: rows ``R`` apart
(``R`` the larger stride) of contiguous runs (stride 1). That is one ``lax.dynamic_slice`` of
a 2-D view of the buffer instead of a gather of every lane; under ``vmap`` the slices of all
programs become one gather of whole windows (one index per program, not per element), which
XLA copies row by row. The typical case is the k-loop of a matmul, whose pointers are loop
iter_args advanced by a uniform step (``a_ptrs += BLOCK_K * stride_ak``).

The lanes come from :mod:`.lanes` (before tracing, loop bodies included). The view is built
once per kernel call: when every window's position is known statically it is the buffer itself
reshaped (padded only as far as windows reach past it, and widened only when a window may run
past the end of a row); otherwise it is padded so that every window with at least one lane
inside the buffer is read unclamped. Lanes outside the buffer and masked lanes still take
``other`` (the load computes its mask from the lane offsets as before).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
from jax import lax

from tritonplug_interpret.xla.lanes import LoadLanes, access_shape

#: At most this many shifted copies of the buffer per view (rows closer than a window is wide).
MAX_SHIFTS = 4


@dataclass(frozen=True)
class View:
    """A 2-D view ``V[r, j] = buffer[r * row - front + j]`` of one buffer (what windows slice)."""

    buffer: int
    row: int        # R: elements between the view's rows (0: a flat, 1-D view)
    width: int      # W: columns (> R when windows may run past the end of a row)
    front: int      # elements of padding before the buffer
    n_rows: int     # rows of the view (its length, for a flat view)
    rows: int       # the window's extent along the row dimension
    cols: int       # its extent along the contiguous dimension


@dataclass(frozen=True)
class Access:
    """How one load reads its block from a :class:`View`."""

    view: View
    row_dim: int | None   # block dimension that steps by ``view.row`` (None: a 1-D run)
    col_dim: int          # block dimension of stride 1
    shape: tuple[int, ...]


def access(load: LoadLanes, size: int) -> Access | None:
    """How ``load`` reads a window of a buffer of ``size`` elements, if its lanes allow one."""
    lanes = load.lanes
    shape = access_shape(load.op)
    if not shape or lanes.buffer is None:
        return None
    moving = [(s, d) for d, s in enumerate(lanes.strides) if s]
    if any(s < 0 for s, _ in moving) or not moving or len(moving) > 2:
        return None
    starts = load.starts if load.starts is not None and load.starts.size else None
    if len(moving) == 1:
        (s, d), = moving
        if s != 1:
            return None
        views = [_flat_view(lanes.buffer, shape[d], size, None)]
        if starts is not None:
            views.append(_flat_view(lanes.buffer, shape[d], size, starts))
        return Access(min(views, key=_cells), None, d, shape)
    (row, d0), (s1, d1) = sorted(moving, reverse=True)
    if s1 != 1 or -(-(row + shape[d1] - 1) // row) - 1 > MAX_SHIFTS:
        return None
    views = [_row_view(lanes.buffer, row, shape[d0], shape[d1], size, None)]
    if starts is not None:
        views.append(_row_view(lanes.buffer, row, shape[d0], shape[d1], size, starts))
    return Access(min(views, key=_cells), d0, d1, shape)


def _cells(view: View) -> int:
    """Elements of the view (a tight view far larger than the buffer is not worth its padding)."""
    return view.n_rows * (view.width if view.row else 1)


def _flat_view(buffer: int, n: int, size: int, starts: Any) -> View:
    if starts is None:     # any window with a lane inside the buffer is unclamped
        return View(buffer, 0, n, n - 1, size + 2 * (n - 1), 1, n)
    front = max(0, -int(starts.min()))
    return View(buffer, 0, n, front, front + max(size, int(starts.max()) + n), 1, n)


def _row_view(buffer: int, row: int, rows: int, cols: int, size: int, starts: Any) -> View:
    if starts is None:     # any window with a lane inside the buffer is unclamped; rows may wrap
        front = (rows - 1) * row + cols - 1
        return View(buffer, row, row + cols - 1, front, (size - 1 + front) // row + rows, rows, cols)
    front = row * max(0, -(int(starts.min()) // row))      # whole rows, so columns stay put
    width = row + cols - 1 if int((starts % row).max()) + cols > row else row
    n_rows = max(-(-(front + size) // row), (front + int(starts.max())) // row + rows)
    return View(buffer, row, width, front, n_rows, rows, cols)


# ------------------------------------------------------------------ runtime


def build_view(buffer: Any, view: View) -> Any:
    """The view of a flat ``buffer``: a reshape when it needs neither padding nor wider rows."""
    length = buffer.shape[0]
    if not view.row:
        return jnp.pad(buffer, (view.front, view.n_rows - view.front - length))
    row = view.row
    shifts = -(-view.width // row)                             # shifted copies that make a row W wide
    total = (view.n_rows + shifts - 1) * row
    padded = buffer
    if view.front or total != length:
        padded = jnp.pad(buffer, (view.front, total - view.front - length))
    grid = padded.reshape(view.n_rows + shifts - 1, row)
    if shifts == 1:
        return grid
    wide = jnp.concatenate([grid[t:t + view.n_rows] for t in range(shifts)], axis=1)
    return wide[:, :view.width]


def read(view_array: Any, access: Access, base: Any) -> Any:
    """The block at lane offset ``base`` (a traced scalar) in the block's own shape."""
    view = access.view
    start = jnp.asarray(base).astype(jnp.int64) + view.front
    if access.row_dim is None:
        window = lax.dynamic_slice(view_array, (jnp.maximum(start, 0),), (view.cols,), allow_negative_indices=False)
        dims: tuple[int, ...] = (access.col_dim,)
    else:
        start = jnp.maximum(start, 0)   # (below 0 only when every lane is outside the buffer)
        row, col = lax.div(start, jnp.int64(view.row)), lax.rem(start, jnp.int64(view.row))
        window = lax.dynamic_slice(view_array, (row, col), (view.rows, view.cols), allow_negative_indices=False)
        dims = (access.row_dim, access.col_dim)
        if access.row_dim > access.col_dim:
            window, dims = window.T, (access.col_dim, access.row_dim)
    shape = [1] * len(access.shape)
    for d in dims:
        shape[d] = access.shape[d]
    return jnp.broadcast_to(window.reshape(shape), access.shape)
