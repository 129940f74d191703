"""The hashable description of one ``triton_call``: the primitive's only parameter, and its parts.

Binding (``calls/binding.py``) turns each kernel parameter into one argument node: an operand array,
a tensor descriptor over one, an output buffer, a scalar, a constexpr, or a tuple of nodes. The nodes, the options
(``calls/options.py``) and the kernel's facts (``triton_compat.KernelFacts``) make a ``CallSpec``:
everything a lowering needs to build a launch for any configuration.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tritonplug.adapters.triton_compat import KernelFacts
from tritonplug.calls.options import CallOptions
from tritonplug.records import BufferSpec

#: Triton's pointer element type for each NumPy dtype name a kernel operand may have.
POINTER_TYPES = {
    "bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
    "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "float8_e4m3fnuz": "fp8e4b8", "float8_e5m2fnuz": "fp8e5b16",
}


@dataclass(frozen=True)
class ArrayArg:
    index: int  # position among the call's array operands


@dataclass(frozen=True)
class OutputArg:
    index: int  # position among the flattened outputs


@dataclass(frozen=True)
class DescriptorArg:
    """A host-side tensor descriptor (``tritonplug.TensorDescriptor``) over array operand ``index``,
    validated by ``tensor_descriptor.check``: its static part, in ints; ``layout`` is the ``repr`` of a
    Gluon shared-memory layout, or ``""``."""

    index: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    padding: str
    round_f32_to_tf32: bool
    layout: str


@dataclass(frozen=True)
class ScalarArg:
    """A scalar passed by value. Equality goes by ``exact`` (the bits), since compiled programs are
    cached by it: 0.0 == -0.0 would share one, and nan != nan would never hit."""

    value: bool | int | float = field(compare=False)
    dtype: str
    exact: str = ""

    @classmethod
    def of(cls, value: bool | int | float, dtype: str) -> ScalarArg:
        return cls(value, dtype, value.hex() if isinstance(value, float) else repr(value))


@dataclass(frozen=True)
class ConstArg:
    value: Any


@dataclass(frozen=True)
class UnsetConst:
    """A constexpr with no value yet: an autotune config or heuristic must supply it."""


@dataclass(frozen=True)
class BoundArgs:
    names: tuple[str, ...]
    nodes: tuple[Any, ...]  # one per kernel parameter
    do_not_specialize: frozenset[str]
    aliases: tuple[tuple[int, int], ...]  # (array operand index, output index)
    aliased_params: tuple[tuple[int, int], ...]  # (output index, array operand index) for outputs with no parameter
    refs: tuple[int, ...] = ()  # array operands that are mutable refs (jax.new_ref), updated in place


@dataclass(frozen=True, eq=False)
class CallSpec:
    kernel: KernelFacts
    bound: BoundArgs
    metaparams: tuple[tuple[str, Any], ...]
    out_specs: tuple[BufferSpec, ...]
    options: CallOptions
    #: One autotune configuration (``Configuration.autotune_config``) to lower alone, for ``tritonplug.tune``.
    pinned_config: tuple[tuple[str, Any], ...] | None = None
    #: Who set ``options.inline`` (``calls.inline_mode.SOURCES``): the call, the kernel's default, the setting.
    inline_from: str = "call"

    def _fields(self) -> tuple:
        return (self.kernel, self.bound, self.metaparams, self.out_specs, self.options, self.pinned_config,
                self.inline_from)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not CallSpec:
            return NotImplemented
        return hash(self) == hash(other) and self._fields() == other._fields()

    def __hash__(self) -> int:
        """Computed once: JAX hashes the primitive's parameters on every eager call."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(self._fields())
            object.__setattr__(self, "_hash", cached)
        return cached

    def __repr__(self) -> str:
        return f"CallSpec({self.kernel.name}, grid={self.options.grid})"


_POINTER_TYPE_OF: dict[Any, str] = {}


def pointer_type(dtype: Any, where: str) -> str:
    """Triton's element type for a buffer of ``dtype``; ``where`` names the argument in the error."""
    known = _POINTER_TYPE_OF.get(dtype)
    if known is not None:
        return known
    name = np.dtype(dtype).name
    if name not in POINTER_TYPES:
        raise TypeError(f"{where}: dtype {name} is not supported by Triton kernels "
                        f"(supported: {', '.join(POINTER_TYPES)})")
    _POINTER_TYPE_OF[dtype] = POINTER_TYPES[name]
    return POINTER_TYPES[name]


def buffer_nbytes(spec: BufferSpec) -> int:
    return math.prod(spec.shape) * np.dtype(spec.dtype).itemsize


def refs_as_outputs(call: CallSpec, ref_specs: Sequence[BufferSpec]) -> CallSpec:
    """The same call with each Ref operand turned into an extra output aliased to it.

    ``ref_specs`` are the Refs' shapes and dtypes, in ``call.bound.refs`` order. The kernel
    parameter stays bound to the operand buffer, which XLA now shares with the new output.
    """
    refs = call.bound.refs
    first = len(call.out_specs)
    new_aliases = tuple((i, first + k) for k, i in enumerate(refs))
    bound = dataclasses.replace(call.bound, refs=(), aliases=call.bound.aliases + new_aliases,
                                aliased_params=call.bound.aliased_params + tuple((o, i) for i, o in new_aliases))
    discharged = dataclasses.replace(call, bound=bound, out_specs=call.out_specs + tuple(ref_specs))
    if "_resolutions" in call.__dict__:  # the same configurations (``compile.resolver``): the refs' new outputs
        discharged.__dict__["_resolutions"] = dict(call.__dict__["_resolutions"])  # have no parameter of their own
    return discharged
