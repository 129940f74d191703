"""The eager loop's repeat of a recent call, recognised by a guard written for it and run in the same breath.

An eager loop calls the same kernel the same way again and again. The quick signature (``calls.memo``) finds such a
call's entry by building a flat key and looking it up. On an H100 (``bench/eager_floor.py``) that costs several
microseconds where it really runs, right after each wait for the device, with the interpreter's caches cold: a
synchronised call took 1.07× XLA's ``x + y``, where the same call checked by a single comparison took 0.95×. What
costs there is the amount of Python run: a generic comparison loop was no faster than the key, and a guard of its
own still left 1.03–1.08×, spent in the frames between it and JAX's dispatch (the record loop, the pick, the
result).

So, as ``torch.compile`` guards its graphs, each call that its quick signature found gets a *guard*: one boolean
expression written for that call's shape, with no loop and no call on the common path. A kernel's guards are
written into one function, its *runner* (``memo.recent``, by the kernel's id): the first guard that holds runs its
record's program on the call's arrays and returns its result, in that one frame; none holding, it returns None (no
call's result) and the call takes the quick signature. A guard holds for a new call when:

* ``jax_enable_x64`` has the same value (checked once, for all the records; the kernel is the same object, as the
  runner holds it and is found by its id);
* each array argument is a ``jax.Array`` with the same aval (JAX interns avals);
* every other argument and keyword is the same object, or an equal ``int`` or tuple of ``int``s (the loop's ``n`` and
  grid, computed again on each call); the same keyword names (in any order: order only names another memo entry);
* ``out_type`` is the same object, or a ``ShapeDtypeStruct`` (or tuple of them) with the same dtype objects and
  shapes that are the same tuple or an equal tuple of ints (one made again from ``x.shape`` and ``x.dtype`` on each
  call holds the same objects; JAX refuses to change a ``ShapeDtypeStruct``).

A runner runs in a ``tritonplug.tune`` session too: the session runs its function under ``jax.disable_jit()``,
where the program's ``jit`` calls the primitive itself, whose eager rule hands an autotuned call to the session
(``tests/test_call_repeats.py`` checks that a session sees a call its kernel's runner has recorded).

Guards are made only for calls whose every part is immutable (``jax.Array``, ``int``, ``float``, ``bool``, ``str``,
``None``, tuples of ints): where a guard holds, both calls' quick signatures are equal up to keyword order, so they
share the entry and its program (``tests/test_call_repeats.py`` checks this on drawn pairs and on each near miss).
Anything else (a NumPy array, a float equal to the recorded one but another object) fails the guard. The runner's
text is kept (``KernelRepeats.source``), and ``KernelRepeats.match`` writes a twin from the same guards that returns
the matching entry instead of running it, for tests to ask which record a call matches. No text of the caller's goes
into either (keyword names and values are bound as constants).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from tritonplug.adapters import jax_compat
from tritonplug.calls.memo import Entry

_ARRAY: type[Any] = jax_compat.CONCRETE_ARRAY_TYPES[0]  # jax.Array's concrete type
_X64 = jax_compat.ENABLE_X64
_SDS = jax.ShapeDtypeStruct
_IMMUTABLE = (int, float, bool, str, type(None))
_MISSING = object()
#: Records kept per kernel: the forms of a call past the first four take the key path. A record is never replaced:
#: a loop over more forms than this would write (``exec``) a runner on every call, about 200 µs each.
RECENT_PER_KERNEL = 4


@dataclass(frozen=True, eq=False)
class Repeat:
    """A concrete call that its quick signature found: its entry; its guard, an expression over ``kernel``,
    ``args``, ``kwargs`` and ``out_value``; the statement that runs its program on the call's arrays and returns the
    result; and the names both read, each prefixed with ``tag`` (one per record of a kernel)."""

    entry: Entry
    tag: str
    guard: str
    run: str
    constants: Mapping[str, Any]


@dataclass(frozen=True, eq=False, slots=True)
class KernelRepeats:
    """A kernel's records, newest first, and the runner written from their guards (slotted: ``triton_call`` reads
    ``run`` on every eager call)."""

    kernel: Any
    repeats: tuple[Repeat, ...]
    #: ``run(kernel, args, kwargs, out_value)``: the first matching record's program run, its result; else None
    run: Callable[[Any, Sequence[Any], Mapping[str, Any], Any], Any]
    source: str

    def match(self, kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any) -> Any:
        """The first record whose guard holds for this call, its entry; else None (the runner's guards, written
        again into a function that returns the entry instead of running it)."""
        matcher, _ = _write(self.kernel, self.repeats, lambda repeat: f"return {repeat.tag}E")
        return matcher(kernel, args, kwargs, out_value)


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


_SHARED = {"X64": _X64, "ARRAY": _ARRAY, "MISSING": _MISSING, "equal": _equal,
           "same_output": _same_output, "same_outputs": _same_outputs}


def _record(entry: Entry, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any, tag: str) -> Repeat:
    """The record of a call (see the module's docstring)."""
    constants: dict[str, Any] = {f"{tag}E": entry, f"{tag}OUT": out_value}
    terms = [f"len(args) == {len(args)}", f"len(kwargs) == {len(kwargs)}"]
    for i, value in enumerate(args):
        if type(value) is _ARRAY:
            constants[f"{tag}a{i}"] = value.aval
            terms.append(f"type(args[{i}]) is ARRAY and args[{i}].aval is {tag}a{i}")
        else:
            constants[f"{tag}v{i}"] = value
            terms.append(f"(args[{i}] is {tag}v{i} or equal(args[{i}], {tag}v{i}))")
    for j, (name, value) in enumerate(kwargs.items()):
        constants[f"{tag}n{j}"], constants[f"{tag}w{j}"] = name, value
        terms.append(f"((k := kwargs.get({tag}n{j}, MISSING)) is {tag}w{j} or equal(k, {tag}w{j}))")
    if type(out_value) is _SDS:
        constants[f"{tag}S"], constants[f"{tag}D"] = out_value.shape, out_value.dtype
        terms.append(f"(out_value is {tag}OUT or same_output(out_value, {tag}S, {tag}D))")
    else:
        constants[f"{tag}OUTS"] = tuple((leaf.shape, leaf.dtype) for leaf in out_value)
        terms.append(f"(out_value is {tag}OUT or same_outputs(out_value, {tag}OUTS))")
    guard = "(" + "\n            and ".join(terms) + ")"
    return Repeat(entry, tag, guard, _run_statement(entry, tag, constants), constants)


def _run_statement(entry: Entry, tag: str, constants: dict[str, Any]) -> str:
    """The statement that runs a matching record's program (JAX's C++ dispatch) on the call's arrays and returns
    the call's result; the names it reads are added to ``constants``."""
    constants[f"{tag}P"] = entry.dispatch
    if entry.positions is not None:  # every array came by position, at the top level: picked by index
        arrays = ", ".join(f"args[{p}]" for p in entry.positions)
    else:
        constants[f"{tag}G"] = entry.gather
        arrays = f"*{tag}G(args, kwargs)"
    if entry.single:
        return f"return {tag}P({arrays})[0]"
    constants[f"{tag}T"], constants[f"{tag}U"] = entry.out_tree, jax.tree_util.tree_unflatten
    return f"return {tag}U({tag}T, {tag}P({arrays}))"


def _write(kernel: Any, repeats: tuple[Repeat, ...], statement: Callable[[Repeat], str]) -> tuple[Callable, str]:
    """One function of the records' guards, each followed by its ``statement``; None after the last."""
    lines = ["def runner(kernel, args, kwargs, out_value):",
             "    if X64.value is not X:",
             "        return None"]
    constants: dict[str, Any] = {**_SHARED, "K": kernel, "X": _X64.value}  # K: the runner keeps its kernel alive
    for repeat in repeats:
        constants.update(repeat.constants)
        lines += [f"    if {repeat.guard}:", f"        {statement(repeat)}"]
    lines.append("    return None")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<tritonplug repeat runner>", "exec"), constants)  # noqa: S102 (our text; values bound)
    return constants["runner"], source


def remember(memo: Any, entry: Entry, kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
             out_value: Any) -> None:
    """Keep a call that its quick signature just found (which checked its parts' types) as its kernel's newest
    record in ``memo`` (``state.memo``), unless some part of it is mutable, it has a record already or its kernel
    has all it may keep; the kernel's runner is written again with it."""
    key = id(kernel)
    known = memo.recent.get(key)
    records = () if known is None else known.repeats
    if len(records) >= RECENT_PER_KERNEL:
        return
    for repeat in records:
        if repeat.entry is entry:
            return
    for value in args:
        if type(value) is not _ARRAY and type(value) not in _IMMUTABLE:
            return
    for value in kwargs.values():
        if type(value) not in _IMMUTABLE and type(value) is not tuple:  # the quick signature took ints only
            return
    records = (_record(entry, args, kwargs, out_value, f"r{len(records)}_"), *records)
    run, source = _write(kernel, records, lambda repeat: repeat.run)
    memo.recent[key] = KernelRepeats(kernel, records, run, source)  # holds the kernel: its id names no other object
