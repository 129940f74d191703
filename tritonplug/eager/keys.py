"""A call's keys, written from the table of argument kinds (``eager.kinds``) when this module is imported.

* ``quick_key(kernel, args, kwargs, out_value, spelling)``: the key of a call whose every part is of a quick kind,
  None for any other call. One flat pass, written for speed (it runs on every eager call that no guard took):
  an if-chain over the quick kinds for the arguments, the same for the keywords (in the caller's order: another
  order is another key, for the same entry), then the outputs. Each part goes into one flat list item by item (a
  tuple of parts would cost a tuple per value), which reads back one way only: after the kernel's id, the spelling
  of ``out_type`` and ``jax_enable_x64``, each argument's part: an aval, or a type followed by as many items as its
  kind's key has (one for ``int``, ``float``, ``bool``, ``str``, ``NoneType``, ``tuple``; two for ``ndarray``); each
  keyword's name (a ``str`` instance, where a part starts with a type or an aval) followed by its part; each
  output's part (``ShapeDtypeStruct``, its shape, its dtype); ``tuple`` last when the outputs were a tuple.
* ``signature(kernel, args, kwargs, out_value, spelling)``: the general key, of every call that can be memoised
  (tracers included), None for any other: the same parts where a value is of a quick kind, the general kinds'
  otherwise, keywords sorted, outputs as their tree and leaves.

``out_type=`` (jax-triton 0.4) and ``out_shape=`` (0.3) count ``input_output_aliases`` differently, so the spelling
is part of both keys. The generated functions' text is in ``linecache`` and logged at debug level
(``eager.generated``); ``SOURCES`` keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import jax

from tritonplug.eager import generated
from tritonplug.eager.kinds import NAMESPACE, OPERANDS, OPTION_VALUES, OUTPUT_LEAVES, OUTPUTS, Kind, type_name


class NotMemoisable(Exception):
    """Some part of the call has no cheap, exact key: take the full path."""


def _items(kind: Kind, value: str = "value") -> str:
    """The sequence whose items ``kind`` requires to be ints."""
    return value if not kind.ints else f"{value}.{kind.ints}"


def _ints(kind: Kind, indent: str, fail: str) -> list[str]:
    if kind.ints is None:
        return []
    return [f"{indent}for item in {_items(kind)}:", f"{indent}    if type(item) is not int:", f"{indent}        {fail}"]


def _is(kind: Kind) -> str:
    return " or ".join(f"kind is {type_name(t)}" for t in kind.types)


def _add(key: str, name: str | None = None) -> str:
    """The statement that adds a part to the flat key: a tuple display's items one by one, after the keyword's
    ``name`` if given."""
    items = key[1:-1] if key.startswith("(") and key.endswith(")") else key
    if name is not None:
        return f"key += ({name}, {items})"
    return f"key += {key}" if items is not key else f"append({key})"


def _quick_chain(kinds: Sequence[Kind], indent: str, keyword: bool) -> list[str]:
    """An if-chain over the quick kinds that adds the value's part to the key; any other value: no quick key. For
    keywords, the kinds an option's value may be come first (an option or a constexpr, mostly)."""
    quick = [k for k in kinds if k.types]
    if keyword:
        quick.sort(key=lambda kind: kind.refused == "OPTIONS")
    lines: list[str] = []
    for kind in quick:
        lines.append(f"{indent}{'elif' if lines else 'if'} {_is(kind)}:  # {kind.name}")
        body = indent + "    "
        if keyword and kind.refused:
            lines += [f"{body}if name in {kind.refused}:", f"{body}    return None"]
        lines += _ints(kind, body, "return None")
        lines.append(body + _add(kind.key, "name" if keyword else None))
    return [*lines, f"{indent}else:", f"{indent}    return None"]


def _quick_outputs(kinds: Sequence[Kind]) -> list[str]:
    lines = ["    value = out_value", "    kind = type(value)"]
    for kind in kinds:
        lines.append(f"    if {_is(kind)}:  # {kind.name}")
        if kind.of is None:
            lines += [*_ints(kind, "        ", "return None"), f"        {_add(kind.key)}"]
        else:
            lines += ["        for value in out_value:", "            kind = type(value)",
                      f"            if not ({_is(kind.of)}):", "                return None",
                      *_ints(kind.of, "            ", "return None"), f"            {_add(kind.of.key)}",
                      f"        {_add(kind.key)}"]
        lines.append("        return tuple(key)")
    return [*lines, "    return None"]


def _quick_key_source() -> str:
    return "\n".join([
        "def quick_key(kernel, args, kwargs, out_value, spelling):",
        "    key = [id(kernel), spelling, X64.value]",
        "    append = key.append",
        "    for value in args:",
        "        kind = type(value)",
        *_quick_chain(OPERANDS, "        ", keyword=False),
        "    for name, value in kwargs.items():",
        "        kind = type(value)",
        *_quick_chain(OPERANDS, "        ", keyword=True),
        *_quick_outputs(OUTPUTS),
    ]) + "\n"


def _part_source(name: str, kinds: Sequence[Kind]) -> str:
    """A function of one value that returns its part of the general key: its kind's, the first that takes it."""
    lines = [f"def {name}(value):", "    kind = type(value)"]
    for kind in kinds:
        if kind.types:
            lines.append(f"    if {_is(kind)}:  # {kind.name}")
            if kind.ints is not None:
                lines += [*_ints(kind, "        ", "break"), "        else:", f"            return {kind.key}"]
            else:
                lines.append(f"        return {kind.key}")
        elif kind.accepts == "True":  # takes any value: the last kind
            return "\n".join([*lines, f"    return {kind.key}  # {kind.name}"]) + "\n"
        else:
            lines += [f"    if {kind.accepts}:  # {kind.name}", f"        return {kind.key}"]
    return "\n".join([*lines, "    raise NotMemoisable"]) + "\n"


_NAMESPACE: dict[str, Any] = {**NAMESPACE, "NotMemoisable": NotMemoisable}
#: The generated functions' source, by name.
SOURCES: dict[str, str] = {"quick_key": _quick_key_source(), "part": _part_source("part", OPERANDS),
                           "option_part": _part_source("option_part", OPTION_VALUES),
                           "output_part": _part_source("output_part", OUTPUT_LEAVES)}
_FUNCTIONS = {name: generated.define(name, source, _NAMESPACE, name.replace("_", " "))
              for name, source in SOURCES.items()}
quick_key: Callable[[Any, Sequence[Any], Mapping[str, Any], Any, bool], tuple | None] = _FUNCTIONS["quick_key"]
part: Callable[[Any], Hashable] = _FUNCTIONS["part"]
option_part: Callable[[Any], Hashable] = _FUNCTIONS["option_part"]
output_part: Callable[[Any], Hashable] = _FUNCTIONS["output_part"]

_OPTIONS = NAMESPACE["OPTIONS"]
_X64 = NAMESPACE["X64"]


def signature(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any,
              spelling: bool = True) -> Hashable | None:
    """The call's general key, or None when it cannot be memoised (refs, unhashable values …).

    ``kwargs`` are all of triton_call's keywords: options, keyword operands and metaparameters.
    """
    try:
        leaves, tree = jax.tree_util.tree_flatten(out_value)
        keywords = tuple(sorted((name, option_part(value) if name in _OPTIONS else part(value))
                                for name, value in kwargs.items()))
        key = ("general", id(kernel), spelling, _X64.value, tuple(map(part, args)), keywords, tree,
               tuple(map(output_part, leaves)))
        hash(key)  # an option's unhashable value
        return key
    except (NotMemoisable, TypeError, AttributeError):
        return None
