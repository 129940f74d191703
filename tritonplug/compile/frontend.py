"""From a bound call to compile requests: configurations, specialisation, TTIR and cache keys.

``expand_configs`` turns autotune/heuristics wrappers into concrete configurations;
``specialize`` computes Triton's signature, constexprs and attributes for one of them and
the runtime parameters of its launch; ``make_ir`` runs Triton's front end.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
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
from tritonplug.calls.user_code import call_user, describe
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
class Configuration:
    """One concrete configuration: every constexpr value and the options for it."""

    metaparams: tuple[tuple[str, Any], ...]
    call_options: tuple[tuple[str, Any], ...]
    description: str
    #: The autotune config it came from, as (name, value) pairs of its kwargs and options (tuning records
    #: name configurations by it); empty for a kernel without ``triton.autotune``.
    autotune_config: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Specialization:
    signature: dict
    constexprs: dict
    attrs: dict
    params: tuple[Any, ...]


def compatible_configs(kernel: KernelFacts, metaparams: Mapping[str, Any]) -> list[triton_compat.ConfigFields]:
    """The fields of the autotune configs that agree with the call's metaparameters (read once; ``triton_call``
    checks them early).

    A config with a ``pre_hook`` is refused: the hook runs Python between launches, which cannot
    happen inside an XLA program.
    """
    name = kernel.name
    fields = [triton_compat.config_fields(c) for c in triton_compat.autotune_configs(kernel.autotuner)]
    for field in fields:
        _check_config_names(kernel, field)
    compatible = [f for f in fields if all(f.kwargs.get(k, v) == v for k, v in metaparams.items())]
    if not compatible:
        raise ValueError(f"kernel {name!r}: no autotune configuration is compatible with the metaparameters "
                         f"{dict(metaparams)}")
    hooks = triton_compat.autotuner_hooks(kernel.autotuner)
    if hooks:
        raise NotImplementedError(f"kernel {name!r}: triton.autotune was given {' and '.join(hooks)}; autotune hooks "
                                  f"run Python between launches and cannot run inside an XLA program (jaxlib's "
                                  f"runtime restores aliased inputs between timed configurations itself)")
    for field in compatible:
        if field.pre_hook is not None:
            raise NotImplementedError(f"kernel {name!r}: autotune config {field.config} has a pre_hook; pre_hook "
                                      f"runs Python between launches and cannot run inside an XLA program")
    return compatible


def _check_config_names(kernel: KernelFacts, fields: triton_compat.ConfigFields) -> None:
    """A config may set only the kernel's ``tl.constexpr`` parameters: a runtime argument it sets is refused
    as Triton refuses it (``Conflicting meta-parameters``), a name the kernel lacks is named (misspelt)."""
    for key in fields.kwargs:
        _check_set_name(kernel, key, f"autotune config {fields.config}")


def check_dependencies(kernel: KernelFacts) -> None:
    """Refuse, at the call, a kernel that uses a global which could not be loaded (``kernels_of`` without one of
    its library's dependencies): the ``KernelImportError`` names the package and the import line, where Triton
    would only say "Unsupported function referenced"."""
    if kernel.missing is not None:
        raise kernel.missing.kernel_import_error(f" (kernel {kernel.name!r} uses it)")


def check_heuristic_names(kernel: KernelFacts) -> None:
    """``triton.heuristics`` may set only the kernel's ``tl.constexpr`` parameters (Triton passes what it sets
    as keyword arguments of the kernel, which refuses any other name)."""
    for heuristics in kernel.heuristics:
        for key in triton_compat.heuristic_rules(heuristics):
            _check_set_name(kernel, key, f"triton.heuristics({{{key!r}: ...}})")


#: Launch options a heuristic or a config's kwargs may set besides the kernel's constexprs.
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"})


def _check_set_name(kernel: KernelFacts, key: str, setter: str) -> None:
    if key in kernel.constexpr_names or (key in LAUNCH_OPTIONS and key not in kernel.param_names):
        return
    if key in kernel.param_names:
        raise ValueError(f"kernel {kernel.name!r}: {setter} sets {key!r}, a runtime argument of the kernel, not a "
                         f"tl.constexpr (Triton refuses it too: \"Conflicting meta-parameters: {key}\"); only "
                         f"{sorted(kernel.constexpr_names)} may be set")
    close = difflib.get_close_matches(key, sorted(kernel.constexpr_names), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"kernel {kernel.name!r}: {setter} sets {key!r}, which is not a parameter of the kernel{hint} "
                     f"(its tl.constexprs: {sorted(kernel.constexpr_names)})")


def expand_configs(kernel: KernelFacts, bound: BoundArgs, metaparams: Mapping[str, Any],
                   call_options: Mapping[str, Any], named_args: Mapping[str, Any]) -> list[Configuration]:
    """The configurations to compile: one per surviving autotune config, heuristics applied."""
    name = kernel.name
    if kernel.autotuner is None:
        raw = [({}, {})]
    else:
        fields = compatible_configs(kernel, metaparams)
        prune = triton_compat.early_prune_function(kernel.autotuner)
        if prune is not None:
            configs = [f.config for f in fields]
            pruned = call_user("early_config_prune", prune, name, (configs, dict(named_args)), available=named_args,
                               expects="as early_config_prune(configs, named_args)")
            if not isinstance(pruned, (str, bytes)) and isinstance(pruned, Iterable):
                pruned = list(pruned)
            if not isinstance(pruned, list) or not all(map(triton_compat.is_config, pruned)):
                raise TypeError(f"early_config_prune {describe(prune)} of kernel {name!r} must return a list of "
                                f"triton.Config, got {type(pruned).__name__}: {pruned!r:.200}")
            fields = [triton_compat.config_fields(config) for config in pruned]
            for field in fields:
                _check_config_names(kernel, field)
        if not fields:
            raise ValueError(f"kernel {name!r}: early_config_prune left no autotune configuration for the "
                             f"metaparameters {dict(metaparams)}")
        raw = [(f.kwargs, f.options) for f in fields]
    result = []
    for kwargs, options in raw:
        # Triton's autotuner passes a config's options as keywords too: a constexpr named like one takes it.
        values = {**metaparams, **kwargs,
                  **{k: v for k, v in options.items() if k in kernel.constexpr_names and v is not None}}
        for heuristics in kernel.heuristics:
            for key, rule in triton_compat.heuristic_rules(heuristics).items():
                given = {**named_args, **values}
                values[key] = call_user(f"heuristic for {key!r}", rule, name, (given,), available=given,
                                        expects="with one argument, the dict of the call's named arguments")
        require_constexprs(name, bound, values)
        # A heuristic may set a launch option (``{"num_warps": ...}``): Triton passes it to the launch.
        launch = {k: values.pop(k) for k in list(values) if k in LAUNCH_OPTIONS and k not in kernel.param_names}
        merged = {**call_options, **{k: v for k, v in options.items() if v is not None}, **launch}
        if not merged.get("debug") and triton_compat.launcher_debug(kernel.fn):
            merged["debug"] = True  # as Triton's launcher: @triton.jit(debug=True) or TRITON_DEBUG=1
        description = ", ".join(f"{k}={v}" for k, v in {**kwargs, **options}.items()) or "default"
        result.append(Configuration(tuple(values.items()), tuple(merged.items()), description,
                                    tuple({**kwargs, **options}.items()) if kernel.autotuner is not None else ()))
    return result


def require_constexprs(kernel_name: str, bound: BoundArgs, values: Mapping[str, Any]) -> None:
    """Every tl.constexpr parameter needs a value: from the call, a default, a config or a heuristic."""
    for param_name, node in zip(bound.names, bound.nodes, strict=True):
        if isinstance(node, UnsetConst) and param_name not in values:
            raise TypeError(f"kernel {kernel_name!r} is missing a value for its tl.constexpr parameter "
                            f"{param_name!r}: pass {param_name}=... to triton_call")


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
            value = metaparams[name] if name in metaparams else node.value
            signature[name] = "constexpr"
            constexprs[(i,)] = value
            params.append(ConstexprParam(value))
            continue
        sig, param = visit(node, (i,), name not in bound.do_not_specialize)
        signature[name] = sig
        params.append(param)
    return Specialization(signature, constexprs, attrs, tuple(params))


def cache_key(info: BackendInfo, target: Target, options: Options, fn: Any, spec: Specialization,
              argument_order: tuple[int, ...] | None = None) -> str:
    """Everything that changes the binary, hashed: versions, target, options, source, specialisation, and
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
        "env": triton_compat.environment_key(),
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


def named_args_for_heuristics(bound: BoundArgs, operands: Sequence[Any], results: Sequence[Any],
                              metaparams: Mapping[str, Any]) -> dict[str, Any]:
    """What ``triton.heuristics`` rules and ``early_config_prune`` see: arrays as shape/dtype records."""
    def value(node: Any) -> Any:
        if isinstance(node, tuple):
            return tuple(value(n) for n in node)
        if isinstance(node, ArrayArg):
            return operands[node.index]
        if isinstance(node, OutputArg):
            return results[node.index]
        if isinstance(node, (ScalarArg, ConstArg)):
            return node.value
        if isinstance(node, DescriptorArg):
            return node
        return None
    named = {n: value(node) for n, node in zip(bound.names, bound.nodes, strict=True)
             if not isinstance(node, UnsetConst)}
    named.update(metaparams)
    return named

