"""Repeat calls reuse validation and binding: each call's spec is memoised by its key.

The memo itself (``state.memo``) is a plain bounded dict in ``process/state.py``, which compile workers import
without JAX; this module makes its entries and finds them by the call's keys (``eager.keys``, written from the table
of argument kinds): a call is the same as a memoised one where its key is. The key covers everything binding looks
at — the kernel, the operands' shapes and dtypes, the scalars' types and values, the outputs, the grid and the
options — so an identical later call (the common case in eager loops) reuses the ``CallSpec`` and only gathers its
arrays.

An entry is stored under the call's general key and, where it has one, its quick key; a quick key's hit is concrete
by construction and goes straight to the memoised program. A call with a quick key that its general key found
(the keywords in another order) is stored under its quick key too, for the next time.

The inline mode of a call that does not pass ``inline=`` comes from the kernel's default (``set_inline`` clears the
memo) or the setting ``TRITONPLUG_INLINE`` (``calls.inline_mode``), which the key does not hold: a traced call (the
general key: inside ``jit``, where the mode decides what XLA compiles) is a repeat only under the setting's value
its entry was made under. An eager repeat (the quick key) keeps the program it compiled: checking would cost that
path a lookup in the environment per call, and its result is the same on either path.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritonplug.adapters import jax_compat
from tritonplug.calls import inline_mode
from tritonplug.calls.binding import bind_like_a_call
from tritonplug.calls.call import CallSpec
from tritonplug.eager import keys


@dataclass(frozen=True)
class Entry:
    call: CallSpec
    names: tuple[str, ...]
    operand_keywords: frozenset[str]
    sources: tuple[tuple[str, tuple[int, ...]], ...]
    out_tree: Any
    #: ``primitive.eager_dispatcher(call)``: how an eager repeat runs the call.
    dispatch: Callable[..., Any]
    #: ``inline_mode.setting()`` when the call was made: a traced repeat needs the same.
    inline_setting: str | None = None
    # Derived from the fields above by __post_init__:
    single: bool = field(init=False, repr=False, compare=False)  # one output, not in a container
    kernel: Any = field(init=False, repr=False, compare=False)
    positions: tuple[int, ...] | None = field(init=False, repr=False, compare=False)
    gather: Callable[[Sequence[Any], Mapping[str, Any]], Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "single", self.out_tree.num_leaves == 1 and self.out_tree.num_nodes == 1)
        object.__setattr__(self, "kernel", self.call.kernel.kernel)  # the quick path's check, one attribute away
        positions = self._positions()
        #: where each array sits among the positional arguments, when all came by position; else None
        object.__setattr__(self, "positions", positions)
        #: ``gather(args, kwargs)``: the call's arrays, in the order the program takes them
        gather: Callable[[Sequence[Any], Mapping[str, Any]], Any]
        if positions is None:
            gather = functools.partial(arrays_of, self)
        else:  # a C-level itemgetter; of one position, a slice, so that it too gives a tuple
            pick = operator.itemgetter(*positions) if len(positions) > 1 else operator.itemgetter(
                slice(positions[0], positions[0] + 1))
            gather = lambda args, kwargs: pick(args)  # noqa: E731
        object.__setattr__(self, "gather", gather)

    def _positions(self) -> tuple[int, ...] | None:
        """Where each array sits among the positional arguments, when every one was passed by position at the top
        level (the common case); None otherwise (``arrays_of`` then binds the arguments again)."""
        if self.operand_keywords or not self.sources or any(path for _, path in self.sources):
            return None
        return tuple(self.names.index(name) for name, _ in self.sources)


def find(memo: Any, kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any,
         out_type_spelling: bool) -> tuple[Entry, bool] | None:
    """The entry ``memo`` (``state.memo``) holds for a call made before, and whether its arrays are all concrete;
    None for a new call. ``out_type_spelling``: the call said ``out_type=`` (0.4), not ``out_shape=`` (0.3):
    they count ``input_output_aliases`` differently."""
    entries = memo.entries
    key = keys.quick_key(kernel, args, kwargs, out_value, out_type_spelling)
    if key is not None:
        entry = entries.get(key)
        if entry is not None and entry.kernel is kernel:  # the key holds id(kernel), which may be reused
            return entry, True
    entry = memo.lookup(keys.signature(kernel, args, kwargs, out_value, out_type_spelling))
    if entry is None or entry.kernel is not kernel or entry.inline_setting != inline_mode.setting():
        return None
    if key is not None:
        memo.store(key, entry)
    return entry, False


def remember(memo: Any, kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any,
             out_type_spelling: bool, entry: Entry) -> None:
    """Memoise a new call's entry in ``memo`` under its keys."""
    memo.store(keys.signature(kernel, args, kwargs, out_value, out_type_spelling), entry)
    memo.store(keys.quick_key(kernel, args, kwargs, out_value, out_type_spelling), entry)


def all_concrete(arrays: Sequence[Any]) -> bool:
    """Whether every operand is a concrete array (a ``jax.Array`` on a device or a NumPy array)."""
    return all(type(a) in jax_compat.CONCRETE_ARRAY_TYPES for a in arrays)


def arrays_of(entry: Entry, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
    """The call's array operands, in the order the memoised spec binds them."""
    operands = {k: v for k, v in kwargs.items() if k in entry.operand_keywords}
    bound = bind_like_a_call(entry.names, args, operands, "")
    arrays = []
    for name, path in entry.sources:
        value = bound[name]
        for i in path:
            value = value[i]
        arrays.append(value)
    return arrays
