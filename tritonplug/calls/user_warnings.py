"""Warnings attributed to the user's code, not to the tritonplug line that noticed the problem.

A warning raised while JAX lowers a ``triton_call`` passes through tritonplug, its plugins, JAX's
lowering machinery and ``contextlib``; a fixed ``stacklevel`` would point somewhere different for
each path. :func:`warn` walks the stack instead and names the first frame outside all of them.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType

#: Modules whose frames are machinery between the user's call and the warning.
_MACHINERY = ("tritonplug", "jax", "jaxlib", "contextlib")


#: Whether each module name seen so far is machinery (warnings are issued on every eager call).
_MACHINERY_BY_MODULE: dict[str, bool] = {}


def _is_machinery(frame: FrameType) -> bool:
    name = frame.f_globals.get("__name__", "")
    known = _MACHINERY_BY_MODULE.get(name)
    if known is None:
        known = name.startswith("tritonplug_") or any(name == m or name.startswith(m + ".") for m in _MACHINERY)
        _MACHINERY_BY_MODULE[name] = known
    return known


def _skipped_by_warnings(frame: FrameType) -> bool:
    """Frames ``warnings.warn`` does not count in ``stacklevel`` (CPython's import machinery)."""
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def user_stacklevel(frame: FrameType) -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` called in ``frame`` name the first frame outside
    the machinery above it (or the outermost frame, when the whole stack is machinery: a worker thread)."""
    level, current = 1, frame
    while _is_machinery(current):
        caller = current.f_back
        while caller is not None and _skipped_by_warnings(caller):
            caller = caller.f_back
        if caller is None:
            break
        current, level = caller, level + 1
    return level


def warn(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the user's frame."""
    frame = sys._getframe(0)
    warnings.warn(message, category, stacklevel=user_stacklevel(frame))


def warn_caller(message: str, category: type[Warning], frames: int) -> None:
    """``warnings.warn`` attributed to the frame ``frames`` above the caller of this function.

    For the checks of a public function's arguments, where the user's frame is known to be the public
    function's caller: eager calls issue these warnings on every call, and :func:`warn`'s walk of the
    stack would double their cost.
    """
    warnings.warn(message, category, stacklevel=frames + 2)
