"""Autotune hooks run once, when a call is made, against stand-ins that record what they do.

Triton runs a config's ``pre_hook`` (and the autotuner's ``pre_hook``, the default one of which zeroes the
``reset_to_zero`` arguments) on the launch's tensors, in Python, right before the launch. An XLA program has no
Python between launches, but the one effect such hooks have in practice, zeroing a buffer the kernel then
``tl.atomic_add``s into (mamba-ssm's ``init_to_zero``), is one it expresses: an output that starts zero-filled.
So each hook is called once, with ``nargs`` holding a :class:`StandIn` for every array argument; a stand-in
records ``.zero_()`` (and ``.fill_(0)``, ``x[...] = 0``, which are the same) and refuses everything else a hook
could do with a tensor (read a value, compare, index, take a pointer, change a shape, print, pass it to
torch), and the hook's own exceptions, output to stdout/stderr and changes to ``nargs`` are refused too. A refusal is
a :class:`HookRefused` naming the hook and what it did, raised at the call before anything is compiled. A tensor
descriptor argument gets a :class:`DescriptorStandIn`, whose ``block_shape`` a hook may set only to what it is.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import ml_dtypes  # noqa: F401  (registers bfloat16 and float8 names with NumPy)
import numpy as np

from tritonplug.calls.call import DescriptorArg
from tritonplug.calls.user_code import describe
from tritonplug.errors import TritonplugError
from tritonplug.records import BufferSpec


class HookRefused(TritonplugError, NotImplementedError):
    """An autotune hook did something an XLA program cannot do before (or after) a launch."""


class _Refusal(Exception):
    """Raised by a stand-in inside a hook; :func:`record` turns it into a :class:`HookRefused`."""


class _Log:
    """What the stand-ins of one hook call saw: fills by argument label, in order, and refusals."""

    def __init__(self) -> None:
        self.fills: dict[str, Any] = {}
        self.refused: list[str] = []

    def refuse(self, what: str) -> _Refusal:
        self.refused.append(what)
        return _Refusal(what)


class StandIn:
    """An array argument as a hook sees it: its shape and dtype, and ``zero_``; all else is refused."""

    __slots__ = ("_label", "_log", "shape", "dtype")

    def __init__(self, label: str, shape: tuple[int, ...], dtype: str, log: _Log) -> None:
        for name, value in (("_label", label), ("_log", log), ("shape", tuple(shape)), ("dtype", np.dtype(dtype))):
            object.__setattr__(self, name, value)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def element_size(self) -> int:
        return int(self.dtype.itemsize)

    def stride(self, dim: int | None = None) -> Any:
        """Row-major, as every JAX array is."""
        strides = tuple(math.prod(self.shape[i + 1:]) for i in range(len(self.shape)))
        return strides if dim is None else strides[dim]

    def zero_(self) -> StandIn:
        self._log.fills[self._label] = 0
        return self

    def fill_(self, value: Any) -> StandIn:
        self._set(value, f"fills {self._label!r} with {value!r}")
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        if key is not Ellipsis and key != slice(None):
            raise self._log.refuse(f"writes part of {self._label!r} ({self._label}[{key!r}] = ...)")
        self._set(value, f"fills {self._label!r} with {value!r}")

    def _set(self, value: Any, what: str) -> None:
        # Only a fill whose bytes are all zero once cast to the buffer's dtype (as torch casts) is an XLA
        # zero-fill on every backend (jaxlib's runtime clears buffers; it fills with nothing else): 1e-50 in a
        # float32 buffer is one, -0.0 is not.
        in_range = not (np.issubdtype(self.dtype, np.integer) and isinstance(value, (int, np.integer))
                        and not np.iinfo(self.dtype).min <= value <= np.iinfo(self.dtype).max)  # torch refuses
        if isinstance(value, (bool, int, float, np.number, np.bool_)) and in_range:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cast = np.array(value).astype(self.dtype)
            if not cast.tobytes().strip(b"\0"):
                self._log.fills[self._label] = 0
                return
        raise self._log.refuse(f"{what}: only zero-fills are supported, a buffer filled with anything else "
                               f"(or with a tensor) is not")

    def __getattr__(self, name: str) -> Any:
        raise self._log.refuse(f"reads {self._label!r}.{name} (a hook may only zero its arguments: .zero_())")

    def __setattr__(self, name: str, value: Any) -> None:
        raise self._log.refuse(f"sets {self._label!r}.{name}")

    __hash__ = object.__hash__


def _refusing(dunder: str, what: str) -> Callable[..., Any]:
    def method(self: StandIn, *args: Any, **kwargs: Any) -> Any:
        raise self._log.refuse(f"{what} {self._label!r} ({dunder})")
    method.__name__ = dunder
    return method


for _dunder, _what in {
        "__getitem__": "indexes", "__bool__": "reads the value of", "__eq__": "compares", "__ne__": "compares",
        "__lt__": "compares", "__le__": "compares", "__gt__": "compares", "__ge__": "compares",
        "__int__": "reads the value of", "__float__": "reads the value of", "__index__": "reads the value of",
        "__iter__": "iterates over", "__array__": "converts to an array", "__str__": "prints or formats",
        "__format__": "prints or formats", "__repr__": "prints or formats", "__add__": "computes with",
        "__radd__": "computes with", "__sub__": "computes with", "__mul__": "computes with",
        "__rmul__": "computes with", "__truediv__": "computes with", "__neg__": "computes with",
        "__iadd__": "adds into", "__isub__": "subtracts from", "__imul__": "multiplies"}.items():
    setattr(StandIn, _dunder, _refusing(_dunder, _what))


class DescriptorStandIn:
    """A ``TensorDescriptor`` argument as a hook sees it: ``shape``, ``strides``, ``block_shape`` to read.

    Triton's TMA tutorials and Liger's fused MLP set ``desc.block_shape`` from the configuration's block sizes in
    a ``pre_hook``. The block is part of the compiled kernel and the call's descriptor, one per call, so a hook
    may set it only to the block the descriptor was given (then the hook changes nothing); any other block is
    refused, saying which configuration asked for it."""

    __slots__ = ("_label", "_log", "_desc")

    def __init__(self, label: str, desc: DescriptorArg, log: _Log) -> None:
        for name, value in (("_label", label), ("_log", log), ("_desc", desc)):
            object.__setattr__(self, name, value)

    shape = property(lambda self: self._desc.shape)
    strides = property(lambda self: self._desc.strides)
    block_shape = property(lambda self: list(self._desc.block_shape))

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "block_shape" and isinstance(value, (list, tuple)) \
                and [int(v) for v in value] == list(self._desc.block_shape):
            return  # the block the descriptor has: no effect
        if name == "block_shape":
            raise self._log.refuse(
                f"sets {self._label!r}.block_shape = {list(value)!r}, but the call's TensorDescriptor has "
                f"block_shape {list(self._desc.block_shape)!r}: a block chosen per configuration is not supported; "
                f"give TensorDescriptor.from_array the block of the configuration you launch, and autotune only "
                f"over configurations with that block")
        raise self._log.refuse(f"sets {self._label!r}.{name}")

    def __getattr__(self, name: str) -> Any:
        raise self._log.refuse(f"reads {self._label!r}.{name} (a hook may read a descriptor's shape, strides and "
                               f"block_shape)")


def stand_in(label: str, value: Any, log: _Log) -> Any:
    """A stand-in for an array argument (a ``BufferSpec``) or a tensor descriptor, a tuple of stand-ins for a tuple;
    others as they are."""
    if isinstance(value, tuple):
        return tuple(stand_in(f"{label}[{i}]", v, log) for i, v in enumerate(value))
    if isinstance(value, BufferSpec):
        return StandIn(label, value.shape, value.dtype, log)
    if isinstance(value, DescriptorArg):
        return DescriptorStandIn(label, value, log)
    return value


def record(role: str, hook: Callable[..., Any], kernel: str, named: Mapping[str, Any], *,
           after: bool = False) -> dict[str, str]:
    """Call ``hook`` once as Triton calls it (``hook(nargs)``; with ``after``, a post_hook:
    ``hook(nargs, exception=None)``), ``nargs`` being ``named`` with a stand-in for each array (a ``BufferSpec``,
    labelled by its name, ``name[i]`` inside a tuple). Returns the labels of the arrays it zeroes, each with the
    hook's description (for an error about what it zeroed), or raises :class:`HookRefused`."""
    log = _Log()
    nargs = {name: stand_in(name, value, log) for name, value in named.items()}
    given = dict(nargs)
    head = f"{role} {describe(hook)} of kernel {kernel!r}"
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            if after:
                hook(nargs, exception=None)
            else:
                hook(nargs)
    except _Refusal:
        pass
    except Exception as exc:
        log.refused.append(f"raises {type(exc).__name__}: {exc}")
    if log.refused:
        raise HookRefused(f"{head} {log.refused[0]}; tritonplug runs autotune hooks once, when the call is made, "
                          f"and an XLA program can express only zeroing an argument before the launch")
    if printed.getvalue():
        raise HookRefused(f"{head} prints {printed.getvalue()[:200]!r}: a hook's side effects cannot run inside an "
                          f"XLA program")
    changed = sorted(k for k in set(given) | set(nargs) if k not in nargs or k not in given or nargs[k] is not given[k])
    if changed:
        raise HookRefused(f"{head} changes nargs[{changed[0]!r}]: a hook may only zero its arguments (.zero_())")
    if after and log.fills:
        raise HookRefused(f"{head} zeroes {next(iter(log.fills))!r} after the launch; only a pre_hook's zeroing "
                          f"(before the launch) becomes part of the XLA program")
    return {label: head for label in log.fills}
