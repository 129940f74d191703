"""What a translated kernel compiles to on the CPU: its compiled HLO, and how many of its ops XLA cannot fuse.

Issue 38: a translation made of slices, reshapes, selects and reductions fuses with its neighbours; a gather, a
scatter or a while loop does not. :func:`unfusible_ops` counts those three in compiled HLO text, so a test can
assert how many a kernel's translation holds at a given shape.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import jax

HOST_CALL = "tritonplug_host_kernel"  # the interpreter path's FFI target: the kernel was not translated
UNFUSIBLE = ("gather", "scatter", "while")
# an instruction's line: `[ROOT] %name = TYPE opcode(operands), ...`; TYPE may be a tuple with spaces and comments
# (`(s64[], /*index=5*/f32[8]{0}) while(`), but holds no `word(`: the first one after ` = ` is the opcode
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%\S+\s+=\s+.*?\s([a-z][\w-]*)\(", re.MULTILINE)


def compiled_hlo(fn: Callable[..., Any], *args: Any) -> str:
    """The compiled HLO text of ``jax.jit(fn)`` at ``args``, checked to hold no host call (the XLA path ran)."""
    lowered = jax.jit(fn).lower(*args)
    assert HOST_CALL not in lowered.as_text(), "the kernel was not translated to XLA"
    return lowered.compile().as_text()


def unfusible_ops(hlo: str) -> dict[str, int]:
    """How many gather, scatter and while ops ``hlo`` (compiled HLO text) holds, each op counted once
    (a fusion's body and the fusion both print, so a gather inside a fusion counts once)."""
    counts = Counter(m.group(1) for m in _INSTRUCTION.finditer(hlo))
    return {name: counts.get(name, 0) for name in UNFUSIBLE}


def count_unfusible(fn: Callable[..., Any], *args: Any) -> dict[str, int]:
    """:func:`unfusible_ops` of ``jax.jit(fn)`` compiled at ``args`` on the CPU."""
    return unfusible_ops(compiled_hlo(fn, *args))


def run_translated(kernel: Any, inputs: tuple, out_shape: tuple[int, ...], grid: tuple[int, ...], *args: Any,
                   fill: float, **constexprs: Any) -> Any:
    """``kernel(*inputs, out, *args)`` over ``grid`` on the XLA path, ``out`` a ref of ``out_shape`` holding ``fill``
    (what the kernel leaves alone shows): the result, checked to have been translated (no host call)."""
    import numpy as np

    import tritonplug

    def fn(*arrays: Any) -> Any:
        out = jax.new_ref(arrays[-1])
        tritonplug.triton_call(*arrays[:-1], out, *args, kernel=kernel, out_type=(), grid=grid, **constexprs)
        return out[...]

    arrays = (*inputs, np.full(out_shape, fill, np.float32))
    assert HOST_CALL not in jax.jit(fn).lower(*arrays).as_text(), "not translated to XLA"
    return np.asarray(jax.jit(fn)(*arrays))
