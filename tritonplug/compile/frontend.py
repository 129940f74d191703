"""From a resolved configuration to compile requests: specialisation, TTIR and cache keys.

``compile.resolver`` turns autotune/heuristics wrappers into concrete configurations;
``specialize`` computes Triton's signature, constexprs and attributes for one of them and
the runtime parameters of its launch; ``make_ir`` runs Triton's front end.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonplug.adapters import triton_compat
from tritonplug.adapters.triton_compat import KernelFacts
from tritonplug.calls import kernel_use
from tritonplug.calls.call import (
    ArrayArg,
    BoundArgs,
    ConstArg,
    DescriptorArg,
    OutputArg,
    ScalarArg,
    UnsetConst,
    buffer_nbytes,
    pointer_type,
)
from tritonplug.compile import fd_capture, ir_rules
from tritonplug.errors import KernelSourceError
from tritonplug.records import (
    ArrayParam,
    BackendInfo,
    BufferSpec,
    ConstexprParam,
    Options,
    ScalarParam,
    Target,
    TensorDescriptorParam,
)
from tritonplug.version import __version__

TRITONPLUG_VERSION = __version__


@dataclass(frozen=True)
class Specialization:
    signature: dict
    constexprs: dict
    attrs: dict
    params: tuple[Any, ...]


def specialize(bound: BoundArgs, metaparams: Mapping[str, Any], operands: Sequence[BufferSpec],
               results: Sequence[BufferSpec], zeroed: frozenset[int], policy: BackendInfo) -> Specialization:
    """Triton's signature/constexprs/attrs for one configuration, and the launch's parameters.

    ``policy`` is the backend's: the divisibility it promises for pointers and integers, and
    whether integers equal to 1 become constants.
    """
    pointer_divisibility, integer_divisibility = policy.pointer_divisibility, policy.integer_divisibility
    zero_param_of = {out: ("in", i) for out, i in bound.aliased_params}
    bytes_to_zero = {}
    for out in zeroed:
        bytes_to_zero[zero_param_of.get(out, ("out", out))] = buffer_nbytes(results[out])
    signature: dict[str, Any] = {}
    constexprs: dict[Any, Any] = {}
    attrs: dict[tuple, list] = {}

    def visit(node: Any, path: tuple[int, ...], specializable: bool) -> Any:
        if isinstance(node, tuple):
            items = [visit(n, path + (i,), specializable) for i, n in enumerate(node)]
            return tuple(t for t, _ in items), tuple(p for _, p in items)
        if isinstance(node, (ArrayArg, OutputArg)):
            spec = operands[node.index] if isinstance(node, ArrayArg) else results[node.index]
            zero = bytes_to_zero.get(("in", node.index) if isinstance(node, ArrayArg) else ("out", node.index), 0)
            divisibility = pointer_divisibility if specializable else 0
            if divisibility:
                attrs[path] = [["tt.divisibility", divisibility]]
            buffer = node.index if isinstance(node, ArrayArg) else len(operands) + node.index
            return "*" + pointer_type(spec.dtype, "operand"), ArrayParam(buffer, zero, divisibility)
        if isinstance(node, ConstArg):  # a None argument, a constexpr as Triton's launcher specialises it
            constexprs[path] = node.value
            return "constexpr", ConstexprParam(node.value)
        if isinstance(node, DescriptorArg):
            signature_type = triton_compat.descriptor_type(pointer_type(node.dtype, "descriptor"), node.block_shape,
                                                           node.layout)
            return signature_type, TensorDescriptorParam(node.index, node.dtype, node.shape, node.strides,
                                                         node.block_shape, node.padding, node.round_f32_to_tf32,
                                                         node.layout)
        if isinstance(node, ScalarArg):
            if specializable and policy.specialize_ones and node.dtype != "i1" and isinstance(node.value, int) \
                    and node.value == 1 and len(path) == 1:
                constexprs[path] = 1
                return "constexpr", ConstexprParam(1)
            if specializable and integer_divisibility and node.dtype in ("i32", "u32", "i64", "u64") \
                    and node.value % integer_divisibility == 0:
                attrs[path] = [["tt.divisibility", integer_divisibility]]
            return node.dtype, ScalarParam(node.value, node.dtype)
        raise AssertionError(node)

    params = []
    for i, (name, node) in enumerate(zip(bound.names, bound.nodes, strict=True)):
        if isinstance(node, (ConstArg, UnsetConst)):
            # an UnsetConst always has its value in metaparams: the resolver requires every constexpr to get one
            value = metaparams[name] if name in metaparams or isinstance(node, UnsetConst) else node.value
            signature[name] = "constexpr"
            constexprs[(i,)] = value
            params.append(ConstexprParam(value))
            continue
        sig, param = visit(node, (i,), name not in bound.do_not_specialize)
        signature[name] = sig
        params.append(param)
    return Specialization(signature, constexprs, attrs, tuple(params))


def cache_key(info: BackendInfo, target: Target, options: Options, fn: Any, spec: Specialization,
              environment: Sequence[tuple[str, str]], argument_order: tuple[int, ...] | None = None) -> str:
    """Everything that changes the binary, hashed: versions, target, options, source, specialisation, the
    ``TRITON_*`` variables (``environment``: ``triton_compat.environment_key()``, read once per lowering) and
    the order of the compiled entry point's arguments where the host changes it (``kernel_abi``)."""
    payload = {
        "tritonplug": TRITONPLUG_VERSION,
        "triton": triton_compat.TRITON_VERSION,
        "backend": [info.name, info.version],
        "target": [target.backend, target.platform, str(target.arch), target.warp_size, target.triton_backend],
        "options": [[k, repr(v)] for k, v in options.values],
        "kernel": triton_compat.source_key(fn),
        "signature": repr(sorted(spec.signature.items())),
        "constexprs": [[list(k), triton_compat.source_key(v)] for k, v in sorted(spec.constexprs.items())],
        "attrs": repr(sorted(spec.attrs.items())),
        "env": [list(pair) for pair in environment],
    }
    if argument_order is not None:
        payload["argument_order"] = list(argument_order)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def make_ir(kernel: KernelFacts, target: Target, options: Options, spec: Specialization,
            bound: BoundArgs | None = None) -> str:
    """Run the kernel's front end (to TTIR, or TTGIR for Gluon: ``kernel.ir_stage``). A kernel error becomes a
    ``TypeError``/``ValueError`` naming the argument behind it when ``bound`` shows one (see ``kernel_use``),
    else a ``KernelSourceError``; both point at the kernel's source line."""
    assert target.triton_backend is not None
    fn = kernel.fn
    gpu_target = (target.triton_backend, target.arch, target.warp_size)

    def front_end(signature: dict, constexprs: dict, attrs: dict) -> str:
        return triton_compat.frontend_ir(fn, gpu_target, options.as_dict(), signature, dict(constexprs), attrs)

    with fd_capture.Captured() as output:  # MLIR's diagnostics, for a module that fails verification
        try:
            ir = front_end(spec.signature, spec.constexprs, spec.attrs)
            ir_rules.check(kernel.name, ir)
            return ir
        except KernelSourceError:
            output.drop()
            raise
        except Exception as exc:
            output.drop()  # the blame's trial runs print too
            failure = exc
            if triton_compat.is_kernel_source_error(exc) and bound is not None:
                where = _source_location(fn, exc)
                culprit = kernel_use.blame(kernel.name, bound, spec.signature, spec.constexprs, spec.attrs, exc,
                                           where, _succeeds(front_end))
                if culprit is not None:
                    raise culprit from exc
    if triton_compat.is_kernel_source_error(failure):
        raise KernelSourceError(f"Triton could not compile kernel {kernel.name!r}{_source_location(fn, failure)}:"
                                f"\n{failure}{_binding_note(bound)}") from failure
    diagnostic = ir_rules.first_diagnostic(output.stderr)
    if triton_compat.is_verifier_failure(failure) and diagnostic:
        raise KernelSourceError(f"Triton could not compile kernel {kernel.name!r}{diagnostic} (the module Triton's "
                                f"front end built fails verification)") from failure
    raise failure


def _binding_note(bound: BoundArgs | None) -> str:
    """Where the outputs went, when a scalar sits on a parameter named like a pointer: outputs fill the parameters
    left without an argument, in order, so a scalar passed by position one place early takes an output's
    parameter, and the kernel then fails far from the call."""
    if bound is None:
        return ""
    outputs = [(name, node.index) for name, node in zip(bound.names, bound.nodes, strict=True)
               if isinstance(node, OutputArg)]
    scalars = [(name, node.value) for name, node in zip(bound.names, bound.nodes, strict=True)
               if isinstance(node, ScalarArg) and "ptr" in name.lower()]
    if not outputs or not scalars:
        return ""
    landed = ", ".join(f"output {i} filled parameter {name!r}" for name, i in outputs)
    name, value = scalars[0]
    return (f"\n(tritonplug: the scalar {value!r} was bound to parameter {name!r}, named like a pointer, and {landed}: "
            f"outputs fill the parameters that get no argument, in order. If {name!r} is an output, pass the scalars "
            f"after it by keyword, e.g. {outputs[0][0]}={value!r}.)")


def _succeeds(front_end: Any) -> Any:
    def compiles(signature: dict, constexprs: dict, attrs: dict) -> bool:
        try:
            front_end(signature, constexprs, attrs)
        except Exception:
            return False
        return True
    return compiles


def _source_location(fn: Any, exc: Exception) -> str:
    """`` (File "kernels.py", line 12)`` for Triton's error, whose line numbers count from the ``def`` line."""
    import inspect

    line = triton_compat.kernel_source_error_line(exc)
    function = triton_compat.python_function(fn)
    try:
        lines, first = inspect.getsourcelines(function)
        filename = inspect.getsourcefile(function)
    except (OSError, TypeError):
        return ""
    if line is None or filename is None:
        return f' (File "{filename}")' if filename else ""
    def_offset = next((i for i, text in enumerate(lines) if text.lstrip().startswith("def ")), 0)
    return f' (File "{filename}", line {first + def_offset + line - 1})'
