"""Contiguous block accesses found statically, so the grid reads and writes them as slices.

Most kernels address memory as ``base + pid * P + tl.arange(0, S)`` with ``P >= S``: program
``p`` touches the window ``[b + P*p, b + P*p + S)``. Vectorised over the grid that is a strided
slice of the buffer, which XLA copies at memory speed, where a gather or scatter of every
element is several times slower. :func:`windows` is a view of the pointer-lane evaluator's result
(:mod:`.lanes`, which knows every top-level pointer's lanes as ``base[p] + Σ s_d i_d`` over the
grid): per top-level 1-D ``tt.load``/``tt.store`` whose programs' windows form such a progression,
a :class:`Window`. Everything else keeps the general gather/scatter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tritonplug_interpret.xla.lanes import Found, Lanes, shape_of
from tritonplug_interpret.xla.ttir import Function, Op


@dataclass(frozen=True)
class Window:
    """Program ``p`` of the flattened grid accesses ``[start + step*p, start + step*p + size)``."""

    buffer: int
    start: int
    step: int
    size: int


def windows(fn: Function, found: Found, programs: int) -> Mapping[Op, Window]:
    """Each top-level 1-D load/store whose windows form a progression over the flattened grid → its :class:`Window`."""
    out = {}
    for op in fn.body.ops:
        if op.name == "tt.load" and op in found.loads:
            lanes, types = found.loads[op].lanes, op.result_types
            shape = shape_of(types[-1]) if types else None
        elif op.name == "tt.store" and op in found.stores:
            lanes, shape = found.stores[op], shape_of(op.type_text) if op.type_text else None
        else:
            continue
        window = _window(lanes, shape, programs)
        if window is not None:
            out[op] = window
    return out


def _window(lanes: Lanes, shape: tuple[int, ...] | None, programs: int) -> Window | None:
    if shape is None or len(shape) != 1 or lanes.buffer is None or lanes.origin is not None or lanes.value is None:
        return None
    if lanes.strides != (1,) and not (lanes.strides == (0,) and shape == (1,)):
        return None
    starts = np.broadcast_to(lanes.value, (programs,)) if lanes.value.ndim == 0 else lanes.value.reshape(-1)
    if starts.shape[0] != programs:
        return None
    step = int(starts[1] - starts[0]) if programs > 1 else shape[0]
    if step < shape[0] or not np.array_equal(starts, starts[0] + step * np.arange(programs, dtype=np.int64)):
        return None
    return Window(lanes.buffer, int(starts[0]), step, shape[0])


def read_window(buffer, w: Window, programs: int):
    """All programs' windows of ``buffer`` as a (programs, size) array (out-of-range lanes are zero)."""
    import jax.numpy as jnp
    from jax import lax

    length = buffer.shape[0]
    lo, hi = max(0, -w.start), max(0, w.start + w.step * programs - length)
    padded = jnp.pad(buffer, (lo, hi)) if lo or hi else buffer
    flat = lax.slice_in_dim(padded, w.start + lo, w.start + lo + w.step * programs)
    return flat.reshape(programs, w.step)[:, :w.size]


def write_window(buffer, w: Window, values, active):
    """Write (programs, size) ``values`` where ``active`` into ``buffer``'s windows."""
    import jax.numpy as jnp
    from jax import lax

    programs = values.shape[0]
    length = buffer.shape[0]
    lo, hi = max(0, -w.start), max(0, w.start + w.step * programs - length)
    padded = jnp.pad(buffer, (lo, hi)) if lo or hi else buffer
    begin = w.start + lo
    segment = lax.slice_in_dim(padded, begin, begin + w.step * programs).reshape(programs, w.step)
    merged = jnp.where(active, values, segment[:, :w.size])
    segment = merged if w.step == w.size else segment.at[:, :w.size].set(merged)
    padded = lax.dynamic_update_slice_in_dim(padded, segment.reshape(-1), begin, axis=0)
    return lax.slice_in_dim(padded, lo, lo + length) if lo or hi else padded
