"""Bind ``triton_call``'s arguments to the kernel's parameters.

Each kernel parameter becomes one argument node (the types live in ``calls/call.py``): an operand
array, an output buffer, a scalar, a constexpr, or a tuple of nodes.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from tritonplug.adapters import jax_compat
from tritonplug.adapters.triton_compat import KernelFacts
from tritonplug.calls import source_uses, tensor_descriptor, user_warnings
from tritonplug.calls.call import (
    ArrayArg,
    BoundArgs,
    ConstArg,
    DescriptorArg,
    OutputArg,
    ScalarArg,
    UnsetConst,
    pointer_type,
)
from tritonplug.calls.tensor_descriptor import TensorDescriptor
from tritonplug.records import BufferSpec

_F32 = np.finfo(np.float32)
#: NumPy scalar dtypes jaxlib's runtime passes as they are; narrower NumPy ints widen to i32 (exactly).
_NUMPY_SCALARS = {"uint32": "u32", "int64": "i64", "uint64": "u64", "float64": "fp64"}
#: Scalar annotations that decide the runtime type (jaxlib passes these; ``annotation_checks`` refuses values
#: they cannot hold).
_ANNOTATED_SCALARS = {"i1": "i1", "u1": "i1", "i32": "i32", "u32": "u32", "i64": "i64", "u64": "u64",
                      "fp32": "fp32", "fp64": "fp64"}


def scalar_type(value: Any, where: str) -> str:
    """Triton's type for a Python or NumPy scalar, as Triton and jax-triton 0.4 type them.

    Ints by range (i32, u32, i64, u64); a Python float is fp32 whenever it lies in float32's range
    (zero, inf and nan included) and fp64 only beyond it; NumPy scalars keep their dtype (float16
    widens to fp32 and narrow ints to i32, since the runtime has no narrower scalar types).
    """
    if isinstance(value, (bool, np.bool_)):
        return "i1"
    if isinstance(value, np.integer):
        return _NUMPY_SCALARS.get(value.dtype.name, "i32")
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return "i32"
        if 2**31 <= value < 2**32:
            return "u32"
        if -(2**63) <= value < 2**63:
            return "i64"
        if 2**63 <= value < 2**64:
            return "u64"
        raise ValueError(f"{where}: integer {value} does not fit in 64 bits")
    if isinstance(value, np.floating):
        if np.dtype(value.dtype).itemsize > 8:
            raise TypeError(f"{where}: {value.dtype.name} scalars cannot be passed to a kernel; use a Python float")
        return _NUMPY_SCALARS.get(value.dtype.name, "fp32")
    if isinstance(value, float):
        magnitude = abs(value)
        if magnitude != magnitude or magnitude == float("inf") or magnitude == 0.0 \
                or float(_F32.tiny) <= magnitude <= float(_F32.max):
            return "fp32"
        return "fp64"
    raise TypeError(f"{where}: expected an array, a tuple or a Python/NumPy scalar, got {type(value).__name__}")


def is_array(value: Any) -> bool:
    # A NumPy scalar type (np.float16, a dtype constexpr) has class attributes shape and dtype: not an array.
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (np.generic, type))


def is_ref(value: Any) -> bool:
    """A mutable array reference made by ``jax.new_ref``: the kernel updates it in place."""
    return jax_compat.is_mutable_ref(value)


def constexpr_value(value: Any) -> Any:
    """A constexpr as Triton's front end wants it: NumPy scalars and concrete 0-d integer arrays (anything
    with ``__index__``, as a launcher's ``x.shape[0]`` may be) become Python scalars; the rest is kept."""
    if isinstance(value, np.generic):
        return value.item()
    if is_array(value) and getattr(value, "ndim", None) == 0 and np.issubdtype(np.dtype(value.dtype), np.integer) \
            and not isinstance(value, jax.core.Tracer):
        return operator.index(value)
    return value


def python_scalar(value: Any) -> bool | int | float:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return float(value)


def split_keywords(facts: KernelFacts, keywords: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``triton_call``'s keywords that are not options: (operands by keyword, constexprs). The constexprs are
    normalised here, once (:func:`constexpr_value`), and must be the kernel's parameters, as hashable Python values.

    (An array passed positionally to a constexpr is refused by :func:`bind`.)
    """
    operands = {k: v for k, v in keywords.items() if k in facts.param_names and k not in facts.constexpr_names}
    constexprs = {}
    for key, value in keywords.items():
        if key in operands:
            continue
        value = constexprs[key] = constexpr_value(value)
        if key not in facts.param_names:
            raise TypeError(f"triton_call() got an unexpected keyword argument {key!r}: it is neither a "
                            f"parameter of kernel {facts.name!r} nor an option of triton_call")
        if is_ref(value):
            raise TypeError(f"argument {key!r} of kernel {facts.name!r} is a tl.constexpr, but a Ref (jax.new_ref) "
                            f"was passed; constexprs must be hashable Python values")
        if is_array(value):
            raise TypeError(f"argument {key!r} of kernel {facts.name!r} is a tl.constexpr, but an array was passed; "
                            f"constexprs must be hashable Python values")
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"metaparameter {key!r} of kernel {facts.name!r} must be hashable, got "
                            f"{type(value).__name__}") from None
    return operands, constexprs


def bind(facts: KernelFacts, args: Sequence[Any], kwargs: Mapping[str, Any], out_specs: Sequence[Any],
         input_output_aliases: Mapping[int, int], metaparams: Mapping[str, Any],
         sources: list[tuple[str, tuple[int, ...]]] | None = None,
         aliases_count_scalars: bool = True) -> tuple[BoundArgs, list[Any]]:
    """Bind operands; returns the bound arguments and the array operands in order.

    The steps: arguments to parameters as a Python call binds them; each constexpr its value (``metaparams``, from
    :func:`split_keywords`, are normalised already); each operand its node; the Refs; the aliases; the outputs to
    the parameters left. ``sources``, if given, receives where each array came from: (parameter name, tuple path).
    ``input_output_aliases`` input indices count every operand (jax-triton 0.4, ``out_type=``) or, with
    ``aliases_count_scalars=False``, the array operands only (jax-triton 0.3, ``out_shape=``).
    """
    given = bind_like_a_call(tuple(p.name for p in facts.params), args, kwargs, facts.name)
    operands = _Operands(facts, sources)
    nodes: dict[str, Any] = {}
    for p in facts.params:
        if p.is_constexpr:
            nodes[p.name] = _constexpr_node(facts, p, given, kwargs, metaparams)
        elif p.name in given:
            nodes[p.name] = operands.node(given[p.name], p.name)
        elif p.has_default:  # as Triton's launcher: a parameter left out takes its default, never an output
            nodes[p.name] = operands.node(p.default, p.name)
    refs = operands.refs(input_output_aliases)
    alias_inputs = operands.flat if aliases_count_scalars else [n for n in operands.flat
                                                                if isinstance(n, (ArrayArg, DescriptorArg))]
    aliases = _check_aliases(input_output_aliases, alias_inputs, operands.arrays, out_specs, facts.name,
                             aliases_count_scalars)
    aliased_params = _bind_outputs(facts, nodes, out_specs, aliases, len(operands.flat))
    dns = frozenset(p.name for p in facts.params if p.do_not_specialize)
    return BoundArgs(tuple(p.name for p in facts.params), tuple(nodes[p.name] for p in facts.params), dns,
                     aliases, aliased_params, refs), operands.arrays


def _constexpr_node(facts: KernelFacts, p: Any, given: Mapping[str, Any], kwargs: Mapping[str, Any],
                    metaparams: Mapping[str, Any]) -> Any:
    """A constexpr parameter's node: its value from the call (by position or keyword), the metaparameters or its
    default; ``UnsetConst`` for one an autotune config or a heuristic must set."""
    if p.name in given:
        value = constexpr_value(given[p.name])
    elif p.name in metaparams:
        return ConstArg(metaparams[p.name])  # normalised by split_keywords
    elif p.has_default:
        value = constexpr_value(p.default)
    else:
        return UnsetConst()
    if is_array(value):
        how = (f" as positional argument {list(given).index(p.name) + 1} (too many positional "
               f"arguments?)" if p.name in given and p.name not in kwargs else "")
        raise TypeError(f"argument {p.name!r} of kernel {facts.name!r} is a tl.constexpr, but an array was "
                        f"passed{how}; constexprs must be Python values")
    return ConstArg(value)


class _Operands:
    """The operand nodes of one binding, with what they collect: the array operands in order, every leaf
    operand (``flat``: ``input_output_aliases`` counts them) and, if asked, where each array came from."""

    def __init__(self, facts: KernelFacts, sources: list[tuple[str, tuple[int, ...]]] | None) -> None:
        self.facts, self.sources = facts, sources
        self.annotations = {p.name: p.annotation for p in facts.params if p.annotation}
        self.arrays: list[Any] = []
        self.flat: list[Any] = []

    def node(self, value: Any, name: str, path: str = "", indices: tuple[int, ...] = ()) -> Any:
        if isinstance(value, tuple):
            nodes = tuple(self.node(v, name, f"{path}[{i}]", indices + (i,)) for i, v in enumerate(value))
            if not indices:  # a tuple binds to a tuple parameter; one the kernel computes with as a value refuses it
                source_uses.refuse_tuple(self.facts, name, value)
            return nodes
        where = f"argument {name!r}{path} of kernel {self.facts.name!r}"
        if value is None:  # Triton's launcher specialises a None argument as the constexpr None
            node: Any = ConstArg(None)
        elif isinstance(value, TensorDescriptor):
            node = _descriptor_node(self.facts, value, len(self.arrays), where)
            self._array(value.base, name, indices)
        elif is_array(value):
            pointer_type(value.dtype, where)
            node = ArrayArg(len(self.arrays))
            self._array(value, name, indices)
        else:
            dtype = scalar_type(value, where)  # first: it names the argument when the value is no scalar
            if not indices:  # Triton compiles an annotated parameter (eps: tl.float64) with its annotation
                dtype = _ANNOTATED_SCALARS.get(self.annotations.get(name, ""), dtype)
            if isinstance(value, np.float32):
                user_warnings.warn("Passing np.float32 scalars to triton_call is deprecated (as in jax-triton 0.4): "
                                   "pass a Python float, which is fp32 whenever float32 can hold it",
                                   DeprecationWarning)
            node = ScalarArg.of(python_scalar(value), dtype)
        self.flat.append(node)
        return node

    def _array(self, value: Any, name: str, indices: tuple[int, ...]) -> None:
        self.arrays.append(value)
        if self.sources is not None:
            self.sources.append((name, indices))

    def refs(self, input_output_aliases: Mapping[int, int]) -> tuple[int, ...]:
        """The array operands that are Refs, each passed once, and never with ``input_output_aliases``."""
        refs = tuple(i for i, a in enumerate(self.arrays) if is_ref(a))
        _check_refs_once(self.arrays, refs, self.sources, self.facts.name)
        if refs and input_output_aliases:
            raise ValueError("input_output_aliases cannot be combined with Ref arguments (jax.new_ref): a Ref is "
                             "already updated in place")
        return refs


def _bind_outputs(facts: KernelFacts, nodes: dict[str, Any], out_specs: Sequence[Any],
                  aliases: tuple[tuple[int, int], ...], n_inputs: int) -> tuple[tuple[int, int], ...]:
    """The outputs fill the non-constexpr parameters left without an argument, in order; returns the
    (output, operand) pairs of outputs that reuse their aliased input's parameter (jax-triton 0.4 style)."""
    kernel = facts.name
    missing = [p.name for p in facts.params if not p.is_constexpr and p.name not in nodes]
    aliased_outputs = {o for _, o in aliases}
    if len(missing) == len(out_specs):  # every output has its own parameter (jax-triton 0.3 style)
        free_outputs = list(range(len(out_specs)))
        aliased_params: tuple[tuple[int, int], ...] = ()
    elif len(missing) == len(out_specs) - len(aliased_outputs):  # aliased outputs reuse their input (0.4 style)
        free_outputs = [o for o in range(len(out_specs)) if o not in aliased_outputs]
        aliased_params = tuple((o, i) for i, o in aliases)
    elif len(missing) < len(out_specs) - len(aliased_outputs):
        raise TypeError(f"triton_call of kernel {kernel!r} got too many operands: {n_inputs} operands "
                        f"leave {len(missing)} parameters {missing} for the {len(out_specs)} outputs of out_shape "
                        f"({len(aliased_outputs)} aliased to inputs); each output needs a parameter of its own")
    else:
        raise TypeError(f"triton_call of kernel {kernel!r} got too few operands: parameters {missing} have no "
                        f"argument, but out_shape has only {len(out_specs)} outputs ({len(aliased_outputs)} "
                        f"aliased to inputs) to fill them; pass the missing operands")
    for name, out in zip(missing, free_outputs, strict=True):
        nodes[name] = OutputArg(out)
    return aliased_params


def operand_specs(arrays: Sequence[Any]) -> tuple[BufferSpec, ...]:
    """The shape and dtype of each array operand as the lowering will see them (JAX's canonical dtype: a NumPy
    float64 array is float32 without ``jax_enable_x64``)."""
    return tuple(BufferSpec(tuple(int(d) for d in a.shape), jax.dtypes.canonicalize_dtype(a.dtype).name)
                 for a in arrays)


def _check_refs_once(arrays: list[Any], refs: tuple[int, ...], sources: list[tuple[str, tuple[int, ...]]] | None,
                     kernel: str) -> None:
    """JAX passes a mutable reference to a computation once: name the parameters that share one."""
    seen: dict[int, int] = {}
    for i in refs:
        first = seen.setdefault(id(arrays[i]), i)
        if first != i:
            names = [sources[j][0] if sources else f"operand {j}" for j in (first, i)]
            raise ValueError(f"kernel {kernel!r}: the same Ref (jax.new_ref) is passed to parameters {names[0]!r} and "
                             f"{names[1]!r}; JAX passes a mutable reference once. Pass it to the parameter the kernel "
                             f"writes through and its value (ref[...]) to the other, or launch with "
                             f"tritonplug.launch, which does so")


def _descriptor_node(facts: KernelFacts, desc: TensorDescriptor, index: int, where: str) -> Any:
    node = tensor_descriptor.check(desc, index, where)
    if facts.language == "gluon" and not node.layout:
        raise ValueError(f"{where}: kernel {facts.name!r} is a Gluon kernel, whose descriptors need a shared-memory "
                         f"layout: pass TensorDescriptor(..., layout=gl.NVMMASharedLayout(...))")
    if facts.language != "gluon" and node.layout:
        raise ValueError(f"{where}: TensorDescriptor.layout is for Gluon kernels (@gluon.jit); kernel "
                         f"{facts.name!r} is a @triton.jit kernel, whose descriptors take no layout")
    return node


def bind_like_a_call(names: tuple[str, ...], args: Sequence[Any], kwargs: Mapping[str, Any],
                      kernel: str) -> dict[str, Any]:
    """Positional arguments fill the parameters in order, keywords by name, as in a Python call."""
    if len(args) > len(names):
        raise TypeError(f"triton_call of kernel {kernel!r}: too many positional arguments: the kernel has "
                        f"{len(names)} parameters, got {len(args)} positional arguments")
    bound = dict(zip(names, args, strict=False))  # fewer args than names: the rest by keyword or outputs
    for key, value in kwargs.items():
        if key in bound:
            raise TypeError(f"triton_call of kernel {kernel!r}: multiple values for argument {key!r}")
        bound[key] = value
    return bound


def _check_aliases(input_output_aliases: Mapping[int, int], flat_inputs: list[Any], arrays: list[Any],
                   out_specs: Sequence[Any], kernel: str, count_scalars: bool) -> tuple[tuple[int, int], ...]:
    """(array operand index, output index) pairs; ``flat_inputs`` are the nodes the input indices count."""
    pairs = []
    if not isinstance(input_output_aliases, Mapping):
        raise TypeError(f"input_output_aliases must be a dict {{input index: output index}}, "
                        f"got {type(input_output_aliases).__name__}")
    if len(set(input_output_aliases.values())) != len(input_output_aliases):
        raise ValueError(f"input_output_aliases maps two inputs to one output: {dict(input_output_aliases)}")
    for i, o in sorted(input_output_aliases.items()):
        if not isinstance(i, (int, np.integer)) or not 0 <= i < len(flat_inputs):
            counted = ("operands" if count_scalars else "array operands (with out_shape=, as in jax-triton 0.3, "
                                                          "the indices count arrays only)")
            raise ValueError(f"input_output_aliases: input index {i!r} is out of range; kernel {kernel!r} got "
                             f"{len(flat_inputs)} {counted}")
        if not isinstance(o, (int, np.integer)) or not 0 <= o < len(out_specs):
            raise ValueError(f"input_output_aliases: output index {o!r} is out of range; out_shape has "
                             f"{len(out_specs)} outputs")
        node = flat_inputs[i]
        if isinstance(node, DescriptorArg):
            raise ValueError(f"input_output_aliases: input {i} is a TensorDescriptor; only arrays alias (pass its base "
                             f"array as an operand of its own, or as a Ref)")
        if not isinstance(node, ArrayArg):
            raise ValueError(f"input_output_aliases: input {i} is a scalar ({node.value!r}); only arrays alias")
        array, out = arrays[node.index], out_specs[o]
        if tuple(array.shape) != tuple(out.shape) or np.dtype(array.dtype) != np.dtype(out.dtype):
            raise ValueError(f"input_output_aliases: input {i} is {np.dtype(array.dtype).name}{list(array.shape)} "
                             f"but output {o} is {np.dtype(out.dtype).name}{list(out.shape)}; they must match")
        pairs.append((node.index, int(o)))
    return tuple(pairs)
