"""The eager loop's repeat of a recent call, recognised by a guard written for it instead of by a key.

An eager loop calls the same kernel the same way again and again. The quick signature (``calls.memo``) finds such a
call's entry by building a flat key and looking it up. On an H100 (``bench/eager_floor.py``) that costs several
microseconds where it really runs, right after each wait for the device, with the interpreter's caches cold: a
synchronised call took 1.07× XLA's ``x + y``, where the same call checked by a single comparison took 0.95×. A
generic comparison loop was no faster than the key: what costs there is the amount of Python run, not the hashing.

So, as ``torch.compile`` guards its graphs, each call that its quick signature found gets a *guard*: a function
written for that call's shape, one boolean expression with no loop and no call on the common path. It holds for a
new call when:

* the kernel is the same object and ``jax_enable_x64`` has the same value;
* each array argument is a ``jax.Array`` with the same aval (JAX interns avals);
* every other argument and keyword is the same object, or an equal ``int`` or tuple of ``int``s (the loop's ``n`` and
  grid, computed again on each call); the same keyword names (in any order: order only names another memo entry);
* ``out_type`` is the same object, or a ``ShapeDtypeStruct`` (or tuple of them) with the same dtype objects and
  shapes that are the same tuple or an equal tuple of ints (one made again from ``x.shape`` and ``x.dtype`` on each
  call holds the same objects; JAX refuses to change a ``ShapeDtypeStruct``).

Guards are made only for calls whose every part is immutable (``jax.Array``, ``int``, ``float``, ``bool``, ``str``,
``None``, tuples of ints): where a guard holds, both calls' quick signatures are equal up to keyword order, so they
share the entry and its program (``tests/test_call_repeats.py`` checks this on drawn pairs and on each near miss).
Anything else (a NumPy array, a float equal to the recorded one but another object) fails the guard, and the call
takes the quick signature. The guard's text is kept on its record (``Repeat.source``); no text of the caller's goes
into it (keyword names and values are bound as constants).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from tritonplug.adapters import jax_compat
from tritonplug.calls.memo import Entry

_ARRAY = jax_compat.CONCRETE_ARRAY_TYPES[0]  # jax.Array's concrete type
_X64 = jax_compat.ENABLE_X64
_SDS = jax.ShapeDtypeStruct
_IMMUTABLE = (int, float, bool, str, type(None))
_MISSING = object()
#: Records kept per kernel: the forms of a call past the first four take the key path. A record is never replaced:
#: a loop over more forms than this would write (``exec``) a guard on every call, about 200 µs each.
RECENT_PER_KERNEL = 4


@dataclass(frozen=True, eq=False)
class Repeat:
    """A concrete call that its quick signature found, and the guard that recognises its repeats."""

    entry: Entry
    #: ``guard(kernel, args, kwargs, out_value) -> bool``
    guard: Callable[[Any, Sequence[Any], Mapping[str, Any], Any], bool]
    source: str


def _equal(value: Any, want: Any) -> bool:
    """Whether ``value`` equals ``want`` (a recorded int, or tuple of ints) in type and value, part by part."""
    kind = type(value)
    if kind is not type(want) or value != want:
        return False
    if kind is tuple:
        for item in value:
            if type(item) is not int:  # (True,) == (1,): want's items are ints
                return False
        return True
    return kind is int


def _same_output(value: Any, shape: tuple[int, ...], dtype: Any) -> bool:
    return (type(value) is _SDS and value.dtype is dtype
            and (value.shape is shape or _equal(value.shape, shape)))


def _same_outputs(value: Any, outs: tuple[tuple[tuple[int, ...], Any], ...]) -> bool:
    if type(value) is not tuple or len(value) != len(outs):
        return False
    for leaf, (shape, dtype) in zip(value, outs, strict=True):
        if not _same_output(leaf, shape, dtype):
            return False
    return True


def _guard(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any) -> tuple[Callable, str]:
    """The guard of a call (see the module's docstring), and its source."""
    constants: dict[str, Any] = {"K": kernel, "X64": _X64, "X": _X64.value, "ARRAY": _ARRAY, "MISSING": _MISSING,
                                 "equal": _equal, "same_output": _same_output, "same_outputs": _same_outputs,
                                 "OUT": out_value}
    terms = ["kernel is K", f"len(args) == {len(args)}", f"len(kwargs) == {len(kwargs)}", "X64.value is X"]
    for i, value in enumerate(args):
        if type(value) is _ARRAY:
            constants[f"a{i}"] = value.aval
            terms.append(f"type(args[{i}]) is ARRAY and args[{i}].aval is a{i}")
        else:
            constants[f"v{i}"] = value
            terms.append(f"(args[{i}] is v{i} or equal(args[{i}], v{i}))")
    for j, (name, value) in enumerate(kwargs.items()):
        constants[f"n{j}"], constants[f"w{j}"] = name, value
        terms.append(f"((k{j} := kwargs.get(n{j}, MISSING)) is w{j} or equal(k{j}, w{j}))")
    if type(out_value) is _SDS:
        constants["S"], constants["D"] = out_value.shape, out_value.dtype
        terms.append("(out_value is OUT or same_output(out_value, S, D))")
    else:
        constants["OUTS"] = tuple((leaf.shape, leaf.dtype) for leaf in out_value)
        terms.append("(out_value is OUT or same_outputs(out_value, OUTS))")
    source = ("def guard(kernel, args, kwargs, out_value):\n    return (" + "\n            and ".join(terms) + ")\n")
    exec(compile(source, "<tritonplug repeat guard>", "exec"), constants)  # noqa: S102 (our text; values bound)
    return constants["guard"], source


def remember(recent: dict[int, tuple[Repeat, ...]], entry: Entry, kernel: Any, args: Sequence[Any],
             kwargs: Mapping[str, Any], out_value: Any) -> None:
    """Keep a call that its quick signature just found (which checked its parts' types) as its kernel's newest
    record, unless some part of it is mutable, it has a record already or its kernel has all it may keep."""
    key = id(kernel)
    known = recent.get(key, ())
    if len(known) >= RECENT_PER_KERNEL:
        return
    for repeat in known:
        if repeat.entry is entry:
            return
    for value in args:
        if type(value) is not _ARRAY and type(value) not in _IMMUTABLE:
            return
    for value in kwargs.values():
        if type(value) not in _IMMUTABLE and type(value) is not tuple:  # the quick signature took ints only
            return
    guard, source = _guard(kernel, args, kwargs, out_value)
    recent[key] = (Repeat(entry, guard, source), *known)
