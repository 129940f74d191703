"""What "the same call" means: one table of the kinds of argument an eager call is memoised by.

A repeat eager call must find the program of the call it repeats, and a call that differs in anything binding reads
must not. Each row of the table below says, for one kind of value, which values are of it, what part of the call's
key such a value gives (``key``), and, where a call of it can be recorded, the guard that holds for a new value only
where that part would be the same (``guard``). Everything else is written from the table (``eager.keys``,
``eager.guards``), as JAX's C++ ``jit`` keys a call by one ``CallSignature``, and TorchDynamo writes its guards from
what it recorded: the quick key, the general key, each record's guard.

* **Quick kinds** (``types``): a value of exactly one of these types (a subclass is another kind), concrete and
  read in full by the key; a call whose every argument, keyword value and output is of a quick kind has a *quick
  key*, built in one flat pass on every eager call that no guard took. ``ints``: the items of the value (or of
  ``value.<ints>``) must each be exactly an ``int`` (``(True,) == (1,)`` but binds otherwise). ``refused``: a set of
  keyword names under which a value of this kind takes the full path (an option's array would be read for its data;
  the deprecated options warn on every call).
* **General kinds** (``accepts``): the rest that the general key (``eager.keys.signature``) takes: tracers, NumPy
  scalars, nested tuples, and the containers an option may be. A call with any of them has no quick key and is
  never recorded.
* **Guards** are written for quick kinds whose values cannot change in place (not a NumPy array). A guard is one
  expression over ``{v}``, the new value, and ``{w}``, the constant a record keeps of the recorded value (``wants``:
  suffix of the constant's name → attribute of the value, ``""`` the value itself); ``{ints}`` is ``ints`` checked
  item by item for the recorded length, ``{n}`` the recorded length, ``{each}`` the guard of ``of`` for every item.
  A guard holds only where its kind's key part is equal (``tests/test_call_repeats.py`` checks it on drawn pairs
  of calls, ``tests/test_eager_guards.py`` on the calls that differ from a recorded one in one thing;
  ``tests/test_eager_keys.py`` checks the keys against a plain description of a call).

Key parts carry the value's type: ``grid=(2.0,)`` equals ``(2,)`` but is refused; a float ``4.0`` equals ``4`` but
binds as fp32; ``-0.0`` equals ``0.0`` but the kernel sees its sign (so floats go in as ``float.hex``). A
``jax.Array`` goes in as its aval: JAX interns avals (one object per shape, dtype, weak type and sharding), so it
hashes and compares by identity, cheaper than its shape and dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import NoneType
from typing import Any

import jax
import numpy as np

from tritonplug.adapters import jax_compat
from tritonplug.calls.options import OPTION_FIELDS

ARRAY = jax_compat.CONCRETE_ARRAY_TYPES[0]  # jax.Array's concrete type
SDS = jax.ShapeDtypeStruct


@dataclass(frozen=True)
class Kind:
    """One row of the table (see the module's docstring)."""

    name: str
    #: the value's part of the call's key: an expression over ``value`` and ``kind`` (its type)
    key: str
    types: tuple[type, ...] = ()
    ints: str | None = None
    refused: str | None = None
    guard: str | None = None
    wants: tuple[tuple[str, str], ...] = (("", ""),)
    of: Kind | None = None
    #: a general kind's test: an expression over ``value`` (rows are tried in order)
    accepts: str | None = None

    def guard_for(self, v: str, w: str, value: Any, first: str | None = None) -> str:
        """The guard that ``value``, recorded under the constants named ``w…``, holds for the value ``v`` (an
        expression); ``first``, if given, is written for ``v``'s first use (a keyword's lookup, bound there)."""
        assert self.guard is not None, f"{self.name} values are never recorded"
        template = self.guard if first is None else self.guard.replace("{v}", "{first}", 1)
        ints = each = "True"
        if self.ints is not None:
            items = value if not self.ints else getattr(value, self.ints)
            seq = v if not self.ints else f"{v}.{self.ints}"
            ints = " and ".join(f"type({seq}[{i}]) is int" for i in range(len(items))) or "True"
        if self.of is not None:
            each = " and ".join(self.of.guard_for(f"{v}[{i}]", f"{w}_{i}", item)
                                for i, item in enumerate(value)) or "True"
        return template.format(v=v, w=w, first=first, ints=ints, each=each,
                               n=len(value) if isinstance(value, tuple) else 0)

    def wanted(self, value: Any, w: str) -> dict[str, Any]:
        """The constants a guard of ``value`` reads, by name."""
        constants = {w + suffix: getattr(value, attribute) if attribute else value
                     for suffix, attribute in self.wants}
        if self.of is not None:
            for i, item in enumerate(value):
                constants.update(self.of.wanted(item, f"{w}_{i}"))
        return constants


_INT = "({v} is {w} or type({v}) is int and {v} == {w})"

#: The kinds of an operand (positional or by keyword) and of a keyword's value, quick ones first, each tried in turn.
OPERANDS: tuple[Kind, ...] = (
    Kind("jax array", "value.aval", types=(ARRAY,), refused="OPTIONS",
         guard="type({v}) is ARRAY and {v}.aval is {w}", wants=(("", "aval"),)),
    Kind("int", "(kind, value)", types=(int,), guard=_INT),
    Kind("tuple of ints", "(kind, value)", types=(tuple,), ints="", refused="WARNING_OPTIONS",
         guard="({v} is {w} or type({v}) is tuple and {v} == {w} and {ints})"),
    Kind("float", "(kind, value.hex())", types=(float,), guard="{v} is {w}"),  # another object: the quick key
    Kind("bool", "(kind, value)", types=(bool,), guard="{v} is {w}"),
    Kind("str", "(kind, value)", types=(str,), guard="({v} is {w} or type({v}) is str and {v} == {w})"),
    Kind("None", "(kind, value)", types=(NoneType,), guard="{v} is None"),
    Kind("numpy array", "(kind, value.shape, value.dtype)", types=(np.ndarray,), refused="OPTIONS"),  # mutable
    Kind("tuple", '("tuple", *map(part, value))', accepts="type(value) is tuple"),
    Kind("array or tracer", '("array", value.shape, value.dtype)',  # jax.Array's check reads a tracer's aval
         accepts="isinstance(value, (jax.Array, np.ndarray))"),
    Kind("other tracer", '("traced", type(value.aval).__name__, value.shape, value.dtype)',
         accepts="isinstance(value, jax.core.Tracer)"),
    Kind("other float", "(kind, float(value).hex())", accepts="isinstance(value, (float, np.floating))"),
    Kind("numpy scalar", "(kind, value)", accepts="isinstance(value, np.generic)"),
)

#: The kinds of an option's value (a field of ``calls.options.CallOptions``): the quick kinds but arrays, then any
#: container or hashable value, read with the type of every part (``num_warps=True`` equals 1).
OPTION_VALUES: tuple[Kind, ...] = (
    *(kind for kind in OPERANDS if kind.types and kind.refused != "OPTIONS"),
    Kind("mapping", "(kind, tuple((option_part(k), option_part(v)) for k, v in sorted(value.items(), key=repr)))",
         accepts="isinstance(value, Mapping)"),
    Kind("list or tuple", "(kind, tuple(map(option_part, value)))", accepts="isinstance(value, (list, tuple))"),
    *(kind for kind in OPERANDS if kind.name == "other float"),
    Kind("hashable", "(kind, value)", accepts="True"),  # the key's hash refuses the rest
)

ONE_OUTPUT = Kind("ShapeDtypeStruct", "(kind, value.shape, value.dtype)", types=(SDS,), ints="shape",
                  guard="({v} is {w} or type({v}) is SDS and {v}.dtype is {w}D"
                        " and ({v}.shape is {w}S or {v}.shape == {w}S and {ints}))",
                  wants=(("", ""), ("D", "dtype"), ("S", "shape")))
#: ``out_type``'s kinds: one ``ShapeDtypeStruct``, a tuple of them (its key: each one's part, then ``tuple``), or
#: (general) any pytree of leaves with a shape and a dtype.
OUTPUTS: tuple[Kind, ...] = (
    ONE_OUTPUT,
    Kind("tuple of ShapeDtypeStruct", "tuple", types=(tuple,), of=ONE_OUTPUT,
         guard="({v} is {w} or type({v}) is tuple and len({v}) == {n} and {each})"),
)
OUTPUT_LEAVES: tuple[Kind, ...] = (
    ONE_OUTPUT,
    Kind("other leaf", "(kind, tuple((type(d), d) for d in value.shape), np.dtype(value.dtype))", accepts="True"),
)

#: What the table's expressions read, besides Python's builtins.
NAMESPACE: dict[str, Any] = {
    "ARRAY": ARRAY, "SDS": SDS, "NoneType": NoneType, "ndarray": np.ndarray, "np": np, "jax": jax,
    "Mapping": Mapping, "X64": jax_compat.ENABLE_X64,
    "OPTIONS": frozenset(f.name for f in OPTION_FIELDS),
    #: deprecated options: a call naming them warns, so it never takes the quick path
    "WARNING_OPTIONS": frozenset(("zeroed_outputs", "input_output_aliases")),
}
_TYPE_NAMES = {ARRAY: "ARRAY", SDS: "SDS", NoneType: "NoneType", np.ndarray: "ndarray"}


def type_name(kind: type) -> str:
    """The name a type has in generated code (``NAMESPACE`` or a builtin)."""
    return _TYPE_NAMES.get(kind, kind.__name__)


#: The quick operand kinds by type, for records (a call its quick key found: each of its values is of one).
QUICK_OPERANDS: dict[type, Kind] = {t: kind for kind in OPERANDS for t in kind.types}
QUICK_OUTPUTS: dict[type, Kind] = {t: kind for kind in OUTPUTS for t in kind.types}
