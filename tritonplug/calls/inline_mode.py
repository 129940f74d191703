"""Whether a call is inlined as its translation to XLA ops, launched, or left to ``"auto"``: the mode and who set it.

A call's mode comes from the first of (precedence call > kernel > setting):

* ``triton_call(inline=...)``, when not ``None``;
* the kernel's default, set by ``tritonplug.set_inline(kernel, mode)`` (kept on the kernel object, so the
  launcher or module that owns a kernel says it once);
* the setting ``TRITONPLUG_INLINE`` (``on``, ``off`` or ``auto``; off when unset).

The mode is resolved when the call is made (traced), checked there with the other options, and carried by the
call (``CallSpec.inline_from`` says by whom); the lowering decides the path from it (``lowering/path_choice.py``).
A kernel default set (``tritonplug.set_inline``) clears the memo of calls made (``eager.memo``); a traced call
memoised under another value of the setting is made again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonplug import settings

#: The modes: ``True`` (inline), ``False`` (launch), ``"auto"`` (inline where the translation fuses and a tuning
#: record measured it faster; see docs/using.md).
MODES = (True, False, "auto")
#: Who set a call's mode, in precedence order, then ``"default"`` (nobody: launched).
SOURCES = ("call", "kernel", "setting", "default")
_ATTRIBUTE = "_tritonplug_inline"


def checked(value: Any, what: str) -> bool | str | None:
    """``value`` as a mode (``None`` stays unset); a ``TypeError``/``ValueError`` naming ``what`` otherwise."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value == "auto":
        return "auto"
    kind = ValueError if isinstance(value, str) else TypeError
    raise kind(f"{what} must be True (the kernel lowered as its translation to XLA ops), False (launched), "
               f"'auto' (inlined where the translation fuses and a tuning record measured it faster) or None "
               f"(the kernel's default, else TRITONPLUG_INLINE), got {type(value).__name__}: {value!r}")


def set_kernel_default(kernel: Any, mode: Any) -> None:
    """Give ``kernel`` (a ``@triton.jit`` function, or its autotune/heuristics wrapper) a default mode."""
    value = checked(mode, "set_inline(kernel, mode): mode")
    try:
        setattr(kernel, _ATTRIBUTE, value)
    except (AttributeError, TypeError):
        raise TypeError(f"set_inline(kernel, mode): kernel must be a Triton kernel object that takes attributes "
                        f"(a @triton.jit function, or its triton.autotune / triton.heuristics wrapper), got "
                        f"{type(kernel).__name__}") from None


def setting() -> str | None:
    """The setting's text now (unparsed): what a memoised traced call must have been made under."""
    return settings.INLINE.raw()


def kernel_default(kernel: Any) -> bool | str | None:
    """The default set on ``kernel`` or, when none, on the kernel it wraps (an autotuner's, a heuristic's ``.fn``):
    a default set on the ``@triton.jit`` function holds for its wrappers, one set on a wrapper wins."""
    for _ in range(4):  # autotune(heuristics(jit(function))) at most
        value = getattr(kernel, _ATTRIBUTE, None)
        if value is not None or not hasattr(kernel, "fn"):
            return value
        kernel = kernel.fn
    return None


def resolve(call_value: bool | str | None, kernel: Any) -> tuple[bool | str, str]:
    """The call's mode and its source (one of :data:`SOURCES`); a bad ``TRITONPLUG_INLINE`` raises here, at the
    call."""
    if call_value is not None:
        return call_value, "call"
    default = kernel_default(kernel)
    if default is not None:
        return default, "kernel"
    if settings.INLINE.is_set():
        return settings.INLINE.get(), "setting"
    return False, "default"
