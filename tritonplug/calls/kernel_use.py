"""Which argument of a call a kernel source error is about.

Triton's front end type-checks the kernel against the call's signature, and its errors point at
a line of the kernel ("Unsupported ptr type <['128'], int32> in `tl.load`"), not at the argument
the caller got wrong. Triton itself decides which argument it was: the front end runs again with
one argument's kind changed — a pointer where the call passed a scalar, a scalar where it passed
an array, a pointer where it passed a ``TensorDescriptor`` — and if that compiles, the call passed the wrong
kind of value for that argument. Errors of ``tl.arange``'s extent name the ``tl.constexpr`` parameters the
failing expression uses; a constexpr of a type the kernel cannot use (``BLOCK=128.0``, ``"128"``, ``[128]``,
``DTYPE=jnp.float16``) that the failing expression reads is named with its type, and with the value that
compiles (``128``, ``tl.float16``) when one does.

This runs only after the front end failed, on every backend alike (each runs the front end), before
anything is compiled or cached.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from tritonplug.adapters import triton_compat
from tritonplug.calls.call import ArrayArg, BoundArgs, ConstArg, DescriptorArg, OutputArg, ScalarArg

#: Triton's messages about ``tl.arange``'s bounds, and what the user is told instead.
_ARANGE_PROBLEMS = {
    "arange's range must be a power of 2": "a power-of-two extent (end - start)",
    "arange's end argument must be greater than the start argument": "an end greater than its start",
    "exceeds triton maximum tensor numel": "at most 1048576 elements (Triton's largest tensor)",
    "arange must fit in int32": "bounds between 0 and 2**32 - 1",
}
_ARANGE_NOT_CONSTEXPR = "arange's arguments must be of type tl.constexpr"

#: Scalar types tried for a parameter the call bound to an array, in order.
_SCALAR_GUESSES = ("i32", "fp32")

Compiles = Callable[[dict, dict, dict], bool]


def blame(kernel_name: str, bound: BoundArgs, signature: dict, constexprs: dict, attrs: dict,
          exc: BaseException, where: str, compiles: Compiles) -> Exception | None:
    """The ``TypeError``/``ValueError`` naming the argument behind the front end's error ``exc``, or
    ``None`` when no single argument explains it (the error is the kernel's own).

    ``compiles(signature, constexprs, attrs)`` runs the front end and says whether it succeeded;
    ``where`` is the error's location, `` (File "k.py", line 12)``.
    """
    triton_message = triton_compat.kernel_source_error_message(exc)
    found = _arange_blame(kernel_name, bound, constexprs, exc, triton_message, where)
    if found is not None:
        return found
    for index, (name, node) in enumerate(zip(bound.names, bound.nodes, strict=True)):
        if isinstance(node, ConstArg) and node.value is None:
            trial_constexprs = {k: v for k, v in constexprs.items() if k != (index,)}
            for kind in (*_pointer_guesses(signature), *_SCALAR_GUESSES):
                if compiles({**signature, name: kind}, trial_constexprs, attrs):
                    what = "a pointer" if kind.startswith("*") else "a value"
                    return TypeError(
                        f"argument {name!r} of kernel {kernel_name!r} is None, which Triton passes as the constexpr "
                        f"None, but the kernel uses it as {what}{where}; pass "
                        f"{'an array' if kind.startswith('*') else 'a scalar'} for it. Triton's front end: "
                        f"{triton_message}")
        if isinstance(node, ScalarArg):
            for element in _pointer_guesses(signature):
                trial_constexprs = {k: v for k, v in constexprs.items() if k != (index,)}
                if compiles({**signature, name: element}, trial_constexprs, _without(attrs, index)):
                    return TypeError(
                        f"argument {name!r} of kernel {kernel_name!r} is used as a pointer by the kernel{where}, "
                        f"but a scalar was passed ({node.value!r}, {node.dtype}); pass an array for it. "
                        f"Triton's front end: {triton_message}")
        elif isinstance(node, (ArrayArg, OutputArg)):
            for scalar in _SCALAR_GUESSES:
                if compiles({**signature, name: scalar}, constexprs, _without(attrs, index)):
                    what = ("an output buffer of out_shape" if isinstance(node, OutputArg)
                            else f"an array of {signature[name].lstrip('*')}")
                    fix = ("pass the scalar as an operand, before the outputs" if isinstance(node, OutputArg)
                           else "pass a Python or NumPy scalar for it")
                    return TypeError(
                        f"argument {name!r} of kernel {kernel_name!r} is used as a scalar by the kernel{where}, "
                        f"but it was bound to {what}; {fix}. Triton's front end: {triton_message}")
    return (_constexpr_blame(kernel_name, bound, signature, constexprs, attrs, exc, triton_message, where, compiles)
            or _descriptor_blame(kernel_name, bound, signature, constexprs, attrs, exc, triton_message, where,
                                 compiles))


def _arange_blame(kernel_name: str, bound: BoundArgs, constexprs: dict, exc: BaseException, triton_message: str,
                  where: str) -> Exception | None:
    """``tl.arange`` with a bad extent: the constexprs (or runtime arguments) its bounds use, by name."""
    names = _names_in(triton_compat.kernel_source_error_node(exc))
    if _ARANGE_NOT_CONSTEXPR in triton_message:
        runtime = [n for n, node in zip(bound.names, bound.nodes, strict=True)
                   if n in names and isinstance(node, (ScalarArg, ArrayArg, OutputArg))]
        if runtime:
            return TypeError(f"argument {runtime[0]!r} of kernel {kernel_name!r} bounds a tl.arange{where}, whose "
                             f"bounds must be compile-time constants, but it is a runtime argument; declare it "
                             f"`{runtime[0]}: tl.constexpr` and pass it by keyword")
        return None
    expected = next((text for problem, text in _ARANGE_PROBLEMS.items() if problem in triton_message), None)
    if expected is None:
        return None
    index_of = {n: i for i, n in enumerate(bound.names)}
    used = [(n, constexprs[(index_of[n],)]) for n in bound.names if n in names and (index_of[n],) in constexprs]
    if not used:
        return None
    values = ", ".join(f"{n}={v!r}" for n, v in used)
    noun = "tl.constexpr" if len(used) == 1 else "tl.constexprs"
    return ValueError(f"{noun} {', '.join(repr(n) for n, _ in used)} of kernel {kernel_name!r} ({values}) bound "
                      f"a tl.arange{where} that needs {expected}: {triton_message}")


#: Constexpr values Triton's front end takes as they are; any other type is suspect when the kernel fails on it.
_PLAIN_CONSTEXPR_TYPES = (bool, int)


def _constexpr_blame(kernel_name: str, bound: BoundArgs, signature: dict, constexprs: dict, attrs: dict,
                     exc: BaseException, triton_message: str, where: str, compiles: Compiles) -> Exception | None:
    """A constexpr of the wrong type (``BLOCK=128.0``, ``"128"``, ``[128]``, ``DTYPE=jnp.float16``) that the
    failing expression reads: named, with its type and, where one compiles, the value the kernel takes."""
    names = _names_in(triton_compat.kernel_source_error_node(exc))
    index_of = {n: i for i, n in enumerate(bound.names)}
    read = [n for n in bound.names if n in names and (index_of[n],) in constexprs]
    suspects = [n for n in read if not _plain(constexprs[(index_of[n],)])]
    for name in suspects:
        value = constexprs[(index_of[name],)]
        for fixed in _constexpr_fixes(value):
            if compiles(signature, {**constexprs, (index_of[name],): fixed}, attrs):
                return TypeError(f"tl.constexpr {name!r} of kernel {kernel_name!r} was given {_typed(value)}, which "
                                 f"the kernel cannot use{where}; it compiles with {name}={_shown(fixed)} "
                                 f"({type(fixed).__name__}). Triton's front end: {triton_message}")
    if suspects:
        name = suspects[0]
        value = constexprs[(index_of[name],)]
        return TypeError(f"tl.constexpr {name!r} of kernel {kernel_name!r} was given {_typed(value)}, and the kernel "
                         f"fails on it{where}. Triton's front end: {triton_message}")
    return None


def _plain(value: Any) -> bool:
    return isinstance(value, _PLAIN_CONSTEXPR_TYPES) or triton_compat.is_triton_dtype(value)


def _typed(value: Any) -> str:
    kind = "a NumPy/JAX dtype" if triton_compat.numpy_dtype_name(value) is not None else type(value).__name__
    return f"{_shown(value)} ({kind})"


def _shown(value: Any) -> str:
    name = getattr(value, "__name__", None)
    if isinstance(value, type) and name is not None:
        return f"{value.__module__}.{name}"
    return repr(value).replace("triton.language.", "tl.")


def _constexpr_fixes(value: Any) -> list[Any]:
    """Values of a type the front end takes that the caller may have meant by ``value``."""
    dtype_name = triton_compat.numpy_dtype_name(value)
    if dtype_name is not None:
        fixed = triton_compat.triton_dtype(dtype_name)
        return [fixed] if fixed is not None else []
    if isinstance(value, np.integer):
        return [int(value)]
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return [int(value)]
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return [int(text)]
        fixed = triton_compat.triton_dtype(text)
        return [fixed] if fixed is not None else []
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return [value[0]]
    return []


def _descriptor_blame(kernel_name: str, bound: BoundArgs, signature: dict, constexprs: dict, attrs: dict,
                      exc: BaseException, triton_message: str, where: str, compiles: Compiles) -> Exception | None:
    """A ``TensorDescriptor`` where the kernel takes a pointer, or an array where it uses a descriptor."""
    node_ast = triton_compat.kernel_source_error_node(exc)
    methods = _method_receivers(node_ast)
    for index, (name, node) in enumerate(zip(bound.names, bound.nodes, strict=True)):
        if isinstance(node, DescriptorArg):
            pointer = "*" + signature[name].split("<", 1)[1].split("[", 1)[0]
            if compiles({**signature, name: pointer}, constexprs, _without(attrs, index)):
                return TypeError(f"argument {name!r} of kernel {kernel_name!r} is used as a pointer by the "
                                 f"kernel{where}, but a TensorDescriptor was passed; pass the array itself (its "
                                 f"base). Triton's front end: {triton_message}")
            if name in methods:
                return TypeError(f"argument {name!r} of kernel {kernel_name!r} is a TensorDescriptor of "
                                 f"{node.dtype}{list(node.shape)} with block_shape {list(node.block_shape)} (rank "
                                 f"{len(node.shape)}), which the kernel's use of it{where} does not fit: "
                                 f"{triton_message}")
        elif isinstance(node, (ArrayArg, OutputArg)) and methods.get(name, set()) & _DESCRIPTOR_METHODS:
            used = sorted(methods[name] & _DESCRIPTOR_METHODS)[0]
            return TypeError(f"argument {name!r} of kernel {kernel_name!r} is used as a tensor descriptor by the "
                             f"kernel ({name}.{used}){where}, but an array was passed; pass "
                             f"tritonplug.TensorDescriptor.from_array(array, block_shape) for it. Triton's front end: "
                             f"{triton_message}")
    return None


_DESCRIPTOR_METHODS = frozenset({"load", "store", "gather", "scatter", "atomic_add", "atomic_min", "atomic_max",
                                 "atomic_and", "atomic_or", "atomic_xor", "block_shape", "shape", "strides"})


def _method_receivers(node: Any) -> dict[str, set[str]]:
    """``{name: {attributes read on it}}`` for ``name.attr`` in the AST ``node``."""
    found: dict[str, set[str]] = {}
    if isinstance(node, ast.AST):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                found.setdefault(sub.value.id, set()).add(sub.attr)
    return found


def _names_in(node: Any) -> set[str]:
    if not isinstance(node, ast.AST):
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _pointer_guesses(signature: dict) -> list[str]:
    """Pointer types to try for a scalar: the call's most common pointer type first, then fp32 and i32."""
    pointers = Counter(t for t in signature.values() if isinstance(t, str) and t.startswith("*"))
    ordered = [t for t, _ in pointers.most_common()][:1]
    return list(dict.fromkeys([*ordered, "*fp32", "*i32"]))


def _without(attrs: dict, index: int) -> dict:
    """The attributes without those of parameter ``index`` (a pointer's divisibility means nothing for a float)."""
    return {path: value for path, value in attrs.items() if path[0] != index}
