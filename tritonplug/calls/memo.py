"""Repeat calls reuse validation and binding: each call's spec is memoised by its signature.

The memo itself (``state.memo``) is a plain bounded dict in ``process/state.py``, which compile workers
import without JAX; this module makes its keys and entries.

The signature is everything binding looks at — the kernel, the operands' shapes and dtypes, the
scalars' types and values, the outputs, the grid and the options — so an identical later call
(the common case in eager loops) reuses the ``CallSpec`` and only gathers its arrays.

Two signatures name an entry. The *quick* one covers the eager loop's common call — concrete arrays, Python
scalars, int/str/bool/None/int-tuple keywords, ``ShapeDtypeStruct`` outputs — in one flat pass, keywords in the
caller's order (another order is another entry); its hits are concrete by construction and go straight to the
memoised program. The general one (:func:`signature`) covers every memoisable call, tracers included.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from tritonplug.adapters import jax_compat
from tritonplug.calls.binding import bind_like_a_call
from tritonplug.calls.call import CallSpec
from tritonplug.calls.options import OPTION_FIELDS

_OPTION_NAMES = frozenset(f.name for f in OPTION_FIELDS)


class NotMemoisable(Exception):
    """Some part of the call has no cheap, exact signature: take the full path."""


@dataclass(frozen=True)
class Entry:
    call: CallSpec
    names: tuple[str, ...]
    operand_keywords: frozenset[str]
    sources: tuple[tuple[str, tuple[int, ...]], ...]
    out_tree: Any
    #: ``primitive.eager_dispatcher(call)``: how an eager repeat runs the call.
    dispatch: Callable[..., Any]
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
    key = quick_signature(kernel, args, kwargs, out_value, out_type_spelling)
    if key is not None:
        entry = entries.get(key)
        if entry is not None and entry.call.kernel.kernel is kernel:  # the key holds id(kernel), which may be reused
            return entry, True
    general = _general_key(kernel, args, kwargs, out_value, out_type_spelling)
    entry = memo.lookup(general)
    if entry is None or entry.call.kernel.kernel is not kernel:
        return None
    if key is not None:
        memo.store(key, entry)
    return entry, False


def remember(memo: Any, kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any,
             out_type_spelling: bool, entry: Entry) -> None:
    """Memoise a new call's entry in ``memo`` under its signatures."""
    memo.store(_general_key(kernel, args, kwargs, out_value, out_type_spelling), entry)
    memo.store(quick_signature(kernel, args, kwargs, out_value, out_type_spelling), entry)


def _general_key(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any,
                 out_type_spelling: bool) -> Hashable | None:
    key = signature(kernel, args, kwargs, out_value)
    return None if key is None else (key, out_type_spelling)


_ARRAY = jax_compat.CONCRETE_ARRAY_TYPES[0]  # jax.Array's concrete type
_SDS = jax.ShapeDtypeStruct
_X64 = jax_compat.ENABLE_X64
#: Deprecated options (``calls.options``): a call naming them warns, so it never takes the quick path.
_WARNING_OPTIONS = frozenset(("zeroed_outputs", "input_output_aliases"))


def quick_signature(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any,
                    out_type_spelling: bool) -> tuple | None:
    """The quick signature of a call of concrete arrays, Python scalars and simple keywords (see the module's
    docstring); None for any other call. Every value's type is part of it: ``grid=(True,)`` equals ``(1,)`` but is
    refused, a float ``4.0`` equals ``4`` but binds as fp32, ``-0.0`` equals ``0.0`` (so floats go in as
    ``float.hex``). One flat pass, written for speed: it runs on every eager call. The flat key reads back one
    way only: an aval is an array; ``int``/``bool``/``float`` a scalar's type, its value next; ``np.ndarray`` then
    shape and dtype; a ``str`` a keyword's name, then its type and value or an int tuple; a tuple after the
    keywords an output's shape, then its dtype.

    A ``jax.Array`` goes in as its aval: JAX interns avals (one object per shape, dtype, weak type and sharding),
    so it hashes and compares by identity, cheaper than its shape and dtype; where a JAX version does not intern
    them they compare by value, as exactly."""
    key: list[Any] = [id(kernel), out_type_spelling, _X64.value]
    append = key.append
    for value in args:
        kind = type(value)
        if kind is _ARRAY:
            append(value.aval)
        elif kind is int or kind is bool:
            key += (kind, value)
        elif kind is float:
            key += (kind, value.hex())
        elif kind is np.ndarray:
            key += (kind, value.shape, value.dtype)
        else:
            return None
    for name, value in kwargs.items():
        kind = type(value)
        if kind is int:  # the common kinds first: constexprs, then the grid
            key += (name, kind, value)
        elif kind is tuple:
            if name in _WARNING_OPTIONS:
                return None
            for item in value:
                if type(item) is not int:
                    return None
            key += (name, value)
        elif kind is str or kind is bool or value is None:
            key += (name, kind, value)
        elif kind is float:
            key += (name, kind, value.hex())
        else:
            return None
    if type(out_value) is _SDS:
        shape = out_value.shape
        for size in shape:
            if type(size) is not int:  # an SDS keeps what it is given: (4.0,) equals (4,) but is refused
                return None
        key += (shape, out_value.dtype, False)
        return tuple(key)
    if type(out_value) is not tuple:
        return None
    for leaf in out_value:
        if type(leaf) is not _SDS:
            return None
        shape = leaf.shape
        for size in shape:
            if type(size) is not int:
                return None
        key += (shape, leaf.dtype)
    append(True)
    return tuple(key)


def _tuple_key(value: tuple) -> Hashable:
    return ("tuple", *map(_operand_key, value))


def _array_key(value: Any) -> Hashable:
    return ("array", value.shape, value.dtype)


def _float_key(value: Any) -> Hashable:
    return (type(value), float(value).hex())  # exact: 0.0 == -0.0, but the kernel sees the sign


def _scalar_key(value: Any) -> Hashable:
    return (type(value), value)


#: The key function of each operand type seen so far. Eager loops call with the same few types, so a
#: dict lookup replaces the isinstance chain (``isinstance(x, jax.Array)`` alone costs a C++ check).
_KEY_OF_TYPE: dict[type, Callable[[Any], Hashable]] = {}


def _key_function(value: Any) -> Callable[[Any], Hashable]:
    if isinstance(value, tuple):
        return _tuple_key
    if isinstance(value, (jax.Array, np.ndarray)):  # tracers too: jax.Array's check looks at the aval
        return _array_key
    if isinstance(value, jax.core.Tracer):
        return lambda v: ("traced", type(v.aval).__name__, v.shape, v.dtype)
    if isinstance(value, (float, np.floating)):
        return _float_key
    if type(value) in (bool, int) or isinstance(value, np.generic):
        return _scalar_key
    raise NotMemoisable


def _operand_key(value: Any) -> Hashable:
    kind = type(value)
    known = _KEY_OF_TYPE.get(kind)
    if known is not None:
        return known(value)
    key_function = _key_function(value)
    if not issubclass(kind, jax.core.Tracer):  # a tracer's classification depends on its aval, not its type
        _KEY_OF_TYPE[kind] = key_function
    return key_function(value)


def _option_key(value: Any) -> Hashable:
    """An option's value with the type of every part: a memoised validation holds only for inputs equal in
    type, not just in value (``grid=(2.0,)`` equals ``(2,)`` but is refused; ``num_warps=True`` equals 1)."""
    if isinstance(value, Mapping):
        return (type(value), tuple((_option_key(k), _option_key(v)) for k, v in sorted(value.items(), key=repr)))
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(map(_option_key, value)))
    if isinstance(value, (float, np.floating)):
        return _float_key(value)
    hash(value)
    return (type(value), value)


def signature(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any) -> Hashable | None:
    """The call's signature, or None when it cannot be memoised (refs, unhashable values …).

    ``kwargs`` are all of triton_call's keywords: options, keyword operands and metaparameters.
    """
    try:
        leaves, tree = jax.tree_util.tree_flatten(out_value)
        outs = tuple((type(leaf), tuple((type(d), d) for d in leaf.shape), np.dtype(leaf.dtype)) for leaf in leaves)
        keywords = tuple(sorted((k, _option_key(v) if k in _OPTION_NAMES else _operand_key(v))
                                for k, v in kwargs.items()))
        return (id(kernel), tuple(map(_operand_key, args)), keywords, tree, outs, jax_compat.ENABLE_X64.value)
    except (NotMemoisable, TypeError, AttributeError):
        return None


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
