"""Contiguous block accesses found statically, so the grid reads and writes them as slices.

Most kernels address memory as ``base + pid * P + tl.arange(0, S)`` with ``P >= S``: program
``p`` touches the window ``[b + P*p, b + P*p + S)``. Vectorised over the grid that is a strided
slice of the buffer, which XLA copies at memory speed, where a gather or scatter of every
element is several times slower. This module evaluates the function's top-level integer and
pointer values as affine forms ``c + Σ c_k pid_k + Σ s_d i_d`` (constants, program ids, ranges
and the launch's scalar arguments are all known before tracing) and reports, per top-level
``tt.load``/``tt.store``, a :class:`Window` when the flattened grid's windows form such a
progression. Everything else keeps the general gather/scatter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tritonplug_interpret.xla.ttir import Function, int_constant
from tritonplug_interpret.xla.types import parse_type


@dataclass(frozen=True)
class Form:
    const: int
    pid: tuple[int, int, int]
    strides: tuple[int, ...]        # per block dimension (0: constant along it)
    buffer: int | None = None       # set for pointers


@dataclass(frozen=True)
class Window:
    """Program ``p`` of the flattened grid accesses ``[start + step*p, start + step*p + size)``."""

    buffer: int
    start: int
    step: int
    size: int


def _combine(a: Form, b: Form, sign: int) -> Form | None:
    if len(a.strides) != len(b.strides) and a.strides and b.strides:
        return None
    strides = a.strides or tuple(0 for _ in b.strides)
    other = b.strides or tuple(0 for _ in strides)
    return Form(a.const + sign * b.const, tuple(x + sign * y for x, y in zip(a.pid, b.pid, strict=True)),
                tuple(x + sign * y for x, y in zip(strides, other, strict=True)), a.buffer)


def _scale(a: Form, k: int) -> Form:
    return Form(a.const * k, tuple(x * k for x in a.pid), tuple(s * k for s in a.strides), a.buffer)


def _is_constant(a: Form) -> bool:
    return a.buffer is None and not any(a.pid) and not any(a.strides)


def _forms(fn: Function, arguments: dict[str, Form]) -> dict[str, Form]:
    forms = dict(arguments)
    for op in fn.body.ops:
        if len(op.results) != 1:
            continue
        args = [forms.get(n) for n in op.operands]
        out = None
        name = op.name
        if name == "arith.constant":
            value = int_constant(op)
            if value is not None and op.type_text:
                shape = parse_type(op.type_text).shape
                out = Form(value, (0, 0, 0), tuple(0 for _ in shape))
        elif name == "tt.get_program_id":
            axis = {"x": 0, "y": 1, "z": 2}.get(op.header.split()[0]) if op.header else None
            if axis is not None:
                out = Form(0, tuple(int(i == axis) for i in range(3)), ())
        elif name == "tt.make_range":
            start = int(op.attrs.get("start", "0").split(":")[0])
            out = Form(start, (0, 0, 0), (1,))
        elif None in args:
            out = None
        elif name in ("tt.splat", "tt.broadcast"):
            shape = parse_type(op.result_types()[-1]).shape
            a = args[0]
            if not a.strides:
                out = Form(a.const, a.pid, tuple(0 for _ in shape), a.buffer)
            elif len(a.strides) == len(shape):
                out = a
        elif name == "tt.expand_dims":
            axis = int(op.attrs["axis"].split(":")[0])
            a = args[0]
            out = Form(a.const, a.pid, a.strides[:axis] + (0,) + a.strides[axis:], a.buffer)
        elif name in ("arith.extsi", "arith.trunci", "arith.index_cast"):
            out = args[0]
        elif name in ("arith.addi", "tt.addptr"):
            out = _combine(args[0], args[1], 1)
        elif name == "arith.subi" and args[1].buffer is None:
            out = _combine(args[0], args[1], -1)
        elif name == "arith.muli":
            a, b = args
            out = _scale(a, b.const) if _is_constant(b) else _scale(b, a.const) if _is_constant(a) else None
        if out is not None:
            forms[op.results[0]] = out
    return forms


def windows(fn: Function, arguments: dict[str, Form], grid: tuple[int, int, int]) -> dict[int, Window]:
    """``id(op)`` → :class:`Window` for each top-level 1-D load/store whose windows form a progression."""
    forms = _forms(fn, arguments)
    gx, gy, gz = grid
    linear = np.arange(gx * gy * gz, dtype=np.int64)
    pids = np.stack([linear % gx, (linear // gx) % gy, linear // (gx * gy)])
    found = {}
    for op in fn.body.ops:
        if op.name not in ("tt.load", "tt.store") or not op.operands:
            continue
        form = forms.get(op.operands[0])
        if form is None or form.buffer is None or form.strides != (1,):
            continue
        size = parse_type(op.result_types()[-1] if op.name == "tt.load" else op.type_text).shape
        if len(size) != 1:
            continue
        starts = form.const + np.asarray(form.pid, np.int64) @ pids
        step = int(starts[1] - starts[0]) if len(starts) > 1 else size[0]
        if step < size[0] or not np.array_equal(starts, starts[0] + step * linear):
            continue
        found[id(op)] = Window(form.buffer, int(starts[0]), step, size[0])
    return found


def read(buffer, w: Window, programs: int):
    """All programs' windows of ``buffer`` as a (programs, size) array (out-of-range lanes are zero)."""
    import jax.numpy as jnp
    from jax import lax

    length = buffer.shape[0]
    lo, hi = max(0, -w.start), max(0, w.start + w.step * programs - length)
    padded = jnp.pad(buffer, (lo, hi)) if lo or hi else buffer
    flat = lax.slice_in_dim(padded, w.start + lo, w.start + lo + w.step * programs)
    return flat.reshape(programs, w.step)[:, :w.size]


def write(buffer, w: Window, values, active):
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
