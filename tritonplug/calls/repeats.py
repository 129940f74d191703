"""The eager loop's repeat of a recent call, recognised without building a key.

An eager loop calls the same kernel the same way again and again. The quick signature (``calls.memo``) finds such
a call's entry by building a flat key and looking it up; measured on an H100, that key is most of the Python in front
of the program (about 10 µs of 13 per synchronised call, where the interpreter's caches are cold after each wait).

So the last few calls of each kernel that the quick signature found are kept as :class:`Repeat` records, and a new
call is first compared with them part by part, in place, mostly by identity:

* the kernel, and ``jax_enable_x64``;
* each array's aval (JAX interns avals);
* every other argument and keyword (in the same order): the same object, or an equal ``int`` or tuple of ``int``s
  (the loop's ``n`` and grid, computed again on each call);
* each output's dtype object and its shape (the same tuple, or an equal one of ints): a ``ShapeDtypeStruct`` made
  again from ``x.shape`` and ``x.dtype`` on each call holds the same objects, and JAX refuses to change one.

A record is made only of calls whose every part is immutable (``jax.Array``, ``int``, ``float``, ``bool``, ``str``,
``None``, tuples of ints), so a match implies that both calls' quick signatures are equal: the same entry, the same
program (``tests/test_call_repeats.py`` checks it on drawn pairs of calls). Anything else (a NumPy array, a float equal
to the recorded one but another object) does not match, and the call takes the quick signature.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from tritonplug.adapters import jax_compat
from tritonplug.calls.memo import Entry

_ARRAY = jax_compat.CONCRETE_ARRAY_TYPES[0]  # jax.Array's concrete type
_X64 = jax_compat.ENABLE_X64
_SDS = jax.ShapeDtypeStruct
_IMMUTABLE = (int, float, bool, str, type(None))
#: Records kept per kernel, newest first: a loop that calls one kernel in more forms than this takes the key path.
RECENT_PER_KERNEL = 4


@dataclass(frozen=True, eq=False)
class Repeat:
    """A concrete call found by its quick signature, as :meth:`matches` compares later calls with it."""

    entry: Entry
    kernel: Any
    #: per positional argument: (True, its aval) for a ``jax.Array``, else (False, the value itself)
    args: tuple[tuple[bool, Any], ...]
    kwargs: tuple[tuple[str, Any], ...]  # in the caller's order
    out: Any  # the out_type object
    #: each output's (shape, dtype); None for one ``ShapeDtypeStruct`` (``out_shape``, ``out_dtype`` then)
    outs: tuple[tuple[Any, Any], ...] | None
    out_shape: Any
    out_dtype: Any
    x64: bool

    def matches(self, kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any) -> bool:
        if (kernel is not self.kernel or len(args) != len(self.args) or len(kwargs) != len(self.kwargs)
                or _X64.value is not self.x64):
            return False
        if out_value is not self.out:
            if self.outs is not None:
                if not _same_outputs(out_value, self.outs):
                    return False
            elif (type(out_value) is not _SDS or out_value.dtype is not self.out_dtype
                  or (out_value.shape is not self.out_shape and not _equal(out_value.shape, self.out_shape))):
                return False
        for value, (array, want) in zip(args, self.args, strict=True):
            if array:
                if type(value) is not _ARRAY or value.aval is not want:
                    return False
            elif value is not want and not _equal(value, want):
                return False
        for (name, value), (known, want) in zip(kwargs.items(), self.kwargs, strict=True):
            if name != known or (value is not want and not _equal(value, want)):
                return False
        return True


def _equal(value: Any, want: Any) -> bool:
    """Whether ``value`` equals ``want`` (a recorded int or tuple of ints) in type and value, part by part."""
    kind = type(value)
    if kind is not type(want) or value != want:
        return False
    if kind is tuple:
        for item in value:
            if type(item) is not int:  # (True,) == (1,): want's items are ints
                return False
        return True
    return kind is int


def _same_outputs(value: Any, outs: tuple[tuple[Any, Any], ...]) -> bool:
    if type(value) is not tuple or len(value) != len(outs):
        return False
    for leaf, (shape, dtype) in zip(value, outs, strict=True):
        if type(leaf) is not _SDS or leaf.dtype is not dtype:
            return False
        if leaf.shape is not shape and not _equal(leaf.shape, shape):
            return False
    return True


def recent_entry(recent: dict[int, tuple[Repeat, ...]], kernel: Any, args: Sequence[Any],
                 kwargs: Mapping[str, Any], out_value: Any) -> Entry | None:
    """The entry of the recent call of ``kernel`` that this call repeats, or None."""
    for repeat in recent.get(id(kernel), ()):
        if repeat.matches(kernel, args, kwargs, out_value):
            return repeat.entry
    return None


def remember(recent: dict[int, tuple[Repeat, ...]], entry: Entry, kernel: Any, args: Sequence[Any],
             kwargs: Mapping[str, Any], out_value: Any) -> None:
    """Keep a call that its quick signature just found (its parts already checked by it) as the newest record of its
    kernel, unless some part of it is mutable."""
    for value in args:
        if type(value) is not _ARRAY and type(value) not in _IMMUTABLE:
            return
    for value in kwargs.values():
        if type(value) not in _IMMUTABLE and type(value) is not tuple:  # the quick signature took ints only
            return
    single = type(out_value) is _SDS
    outs = None if single else tuple((leaf.shape, leaf.dtype) for leaf in out_value)
    repeat = Repeat(entry, kernel, tuple((True, v.aval) if type(v) is _ARRAY else (False, v) for v in args),
                    tuple(kwargs.items()), out_value, outs, out_value.shape if single else None,
                    out_value.dtype if single else None, _X64.value)
    key = id(kernel)
    recent[key] = (repeat, *(r for r in recent.get(key, ()) if r.entry is not entry))[:RECENT_PER_KERNEL]
