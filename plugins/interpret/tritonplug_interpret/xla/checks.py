"""Checked mode on the XLA path: the first out-of-bounds access becomes an exception.

Every load, store and atomic records, per program, the first active lane outside its buffer
(:meth:`Frame.record_check`). After the grid one ``jax.debug.callback`` receives those records
and raises :class:`~tritonplug_interpret.checked.OutOfBoundsAccess` naming the kernel, the
argument and the byte offset; XLA hands the error to the caller of the computation.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from tritonplug_interpret.checked import OutOfBoundsAccess
from tritonplug_interpret.xla.program import Context


def _program_of(linear: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    gx, gy, _ = grid
    return linear % gx, (linear // gx) % gy, linear // (gx * gy)


def raise_if_bad(ctx: Context, record: tuple, grid: tuple[int, int, int]) -> None:
    sites = list(ctx.sites)
    buffers = list(ctx.buffers)
    name = ctx.kernel_name

    def check(site: Any, offset: Any, lane: Any, *program: Any) -> None:
        site = np.asarray(site).reshape(-1)
        bad = np.nonzero(site >= 0)[0]
        if not bad.size:
            return
        first = int(bad[0])
        linear = int(np.asarray(program[0]).reshape(-1)[first]) if program else first
        s = sites[int(site[first])]
        info = buffers[s.buffer]
        off = int(np.asarray(offset).reshape(-1)[first])
        raise OutOfBoundsAccess(
            f"kernel {name!r}: out-of-bounds {s.access} of {s.itemsize} byte(s) through argument {info.name!r} "
            f"at byte offset {off} (element {off // max(s.itemsize, 1)}), in program {_program_of(linear, grid)} "
            f"at lane {int(np.asarray(lane).reshape(-1)[first])}; {info.name!r} is a {info.dtype.name} buffer of "
            f"{info.size * info.dtype.itemsize} bytes")

    jax.debug.callback(check, *record)
