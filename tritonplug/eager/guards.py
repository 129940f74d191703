"""A recorded call: its guard, written from the table of argument kinds (``eager.kinds``), and the statement that
runs its program.

A record is made of a concrete call that its quick key found (so each of its values is of a quick kind). Its guard
is one boolean expression, with no loop and no call on the common path, that holds for a new call where:

* it has as many positional arguments and as many keywords (an added or a removed keyword is another call);
* each argument, and the value of each of the recorded keywords, looked up by name, holds its kind's guard against
  the recorded value (the same aval; an equal ``int``, ``str`` or tuple of ``int``s; the same ``float``, ``bool``
  or ``None`` object): keyword order aside, the same quick key;
* ``out_type`` holds the guard of its kind: the same object, or a ``ShapeDtypeStruct`` (or a tuple of them) with
  the same dtype objects and equal shapes of ints.

``jax_enable_x64`` and the kernel are the runner's to check (``eager.runners``). A call with a value that may change
in place (a NumPy array) is not recorded. No text of the caller's goes into a guard: names and values are bound as
constants, each prefixed with the record's tag, and a keyword's name shows in a comment only as its ``repr``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from tritonplug.eager.kinds import OPERANDS, QUICK_OPERANDS, QUICK_OUTPUTS
from tritonplug.eager.memo import Entry

#: The types of the values a guard can be written for.
RECORDABLE = frozenset(t for kind in OPERANDS if kind.guard is not None for t in kind.types)


@dataclass(frozen=True, eq=False)
class Repeat:
    """A recorded call: its entry; its guard, an expression over ``args``, ``kwargs`` and ``out_value``; the
    statement that runs its program on the call's arrays and returns the result; and the constants both read."""

    entry: Entry
    tag: str
    guard: str
    run: str
    constants: Mapping[str, Any]


def recordable(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether a call its quick key found can be recorded (a cheap check, made on every such call)."""
    for value in args:
        if type(value) not in RECORDABLE:
            return False
    for value in kwargs.values():
        if type(value) not in RECORDABLE:
            return False
    return True


def _shown(name: str) -> str:
    """A keyword's name for a comment: its ``repr`` (no line break can end the comment), cut short."""
    text = repr(name)
    return text if len(text) <= 40 else text[:37] + "..."


def record(entry: Entry, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any, tag: str) -> Repeat:
    """The record of a call (see the module's docstring); ``recordable(args, kwargs)`` holds."""
    constants: dict[str, Any] = {f"{tag}E": entry}
    terms = [f"len(args) == {len(args)}", f"len(kwargs) == {len(kwargs)}"]
    for i, value in enumerate(args):
        kind = QUICK_OPERANDS[type(value)]
        constants.update(kind.wanted(value, f"{tag}a{i}"))
        terms.append(f"{kind.guard_for(f'args[{i}]', f'{tag}a{i}', value)}  # args[{i}]: {kind.name}")
    for j, (name, value) in enumerate(kwargs.items()):
        kind = QUICK_OPERANDS[type(value)]
        constants[f"{tag}n{j}"] = name
        constants.update(kind.wanted(value, f"{tag}w{j}"))
        lookup = f"(k := kwargs.get({tag}n{j}, MISSING))"
        terms.append(f"{kind.guard_for('k', f'{tag}w{j}', value, first=lookup)}  # {_shown(name)}: {kind.name}")
    kind = QUICK_OUTPUTS[type(out_value)]
    constants.update(kind.wanted(out_value, f"{tag}O"))
    terms.append(f"{kind.guard_for('out_value', f'{tag}O', out_value)}  # out_type: {kind.name}")
    guard = "(" + "\n            and ".join(terms) + "\n    )"
    return Repeat(entry, tag, guard, _run_statement(entry, tag, constants, len(args), kwargs), constants)


def _picks(entry: Entry, n_args: int, kwargs: Mapping[str, Any], tag: str) -> list[str] | None:
    """Where each of the call's arrays is, as an expression: ``args[i]``, or ``kwargs[name]`` with the name's
    constant (the guard holds only for a call with as many positional arguments and the same keyword names, so each
    array is where the recorded call had it); None where one sits inside a tuple."""
    names = list(kwargs)
    picks = []
    for name, path in entry.sources:
        if path:
            return None
        i = entry.names.index(name)
        if i < n_args:
            picks.append(f"args[{i}]")
        elif name in kwargs:
            picks.append(f"kwargs[{tag}n{names.index(name)}]")
        else:
            return None
    return picks


def _run_statement(entry: Entry, tag: str, constants: dict[str, Any], n_args: int, kwargs: Mapping[str, Any]) -> str:
    """The statement that runs a matching record's program (JAX's C++ dispatch) on the call's arrays and returns
    the call's result; the names it reads are added to ``constants``."""
    constants[f"{tag}P"] = entry.dispatch
    picks = _picks(entry, n_args, kwargs, tag)
    if picks is None:
        constants[f"{tag}G"] = entry.gather
        arrays = f"*{tag}G(args, kwargs)"
    else:
        arrays = ", ".join(picks)
    if entry.single:
        return f"return {tag}P({arrays})[0]"
    constants[f"{tag}T"], constants[f"{tag}U"] = entry.out_tree, jax.tree_util.tree_unflatten
    return f"return {tag}U({tag}T, {tag}P({arrays}))"
