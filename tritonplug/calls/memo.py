"""Repeat calls reuse validation and binding: each call's spec is memoised by its signature.

The memo itself (``state.memo``) is a plain bounded dict in ``process/state.py``, which compile workers
import without JAX; this module makes its keys and entries.

The signature is everything binding looks at — the kernel, the operands' shapes and dtypes, the
scalars' types and values, the outputs, the grid and the options — so an identical later call
(the common case in eager loops) reuses the ``CallSpec`` and only gathers its arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
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
        return (id(kernel), tuple(map(_operand_key, args)), keywords, tree, outs, jax.config.jax_enable_x64)
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
