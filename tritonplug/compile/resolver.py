"""One resolver of a call's configurations, used by the call's checks and by the lowering's plan alike.

For a bound call (``CallSpec``) and the shapes of its operands, :func:`resolve` derives, in this order:

1. the **named arguments**, what ``triton.heuristics`` rules, ``early_config_prune`` and a grid callable see
   (arrays as shape/dtype records);
2. the **constexprs** of each configuration: the call's metaparameters, each surviving ``triton.autotune``
   config (pruned), the heuristics applied, every ``tl.constexpr`` required to have a value;
3. the **grid** of each configuration (a callable grid is called with the named arguments and constexprs);
4. the **zeroed outputs** of each, likewise, and those its autotune hooks zero (``calls.autotune_hooks``: run once,
   here, against stand-ins);
5. the **compile options** of each: the call's, the config's, a heuristic's launch options, Triton's debug rule.

``triton_call`` resolves its call once; the result is kept on the ``CallSpec`` (by operand shapes), so the lowering,
an early compile and ``tritonplug.tune`` read it instead of deriving it again. What depends on the kernel alone
(:func:`check_kernel`: the names heuristics and configs set) is checked once per kernel. :data:`DERIVATIONS` counts
each derivation that runs, for the tests that hold each to once.
"""

from __future__ import annotations

import collections
import difflib
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonplug.adapters import triton_compat
from tritonplug.adapters.triton_compat import KernelFacts
from tritonplug.calls import autotune_hooks
from tritonplug.calls.call import (
    ArrayArg,
    BoundArgs,
    CallSpec,
    ConstArg,
    DescriptorArg,
    OutputArg,
    ScalarArg,
    UnsetConst,
)
from tritonplug.calls.options import grid_for, zeroed_for
from tritonplug.calls.user_code import call_user, describe
from tritonplug.records import BufferSpec

#: How often each derivation ran in this process: ``kernel_checks`` (per kernel), ``resolutions`` (per call and
#: operand shapes), and ``environment`` (the environment's fingerprint, read by ``lowering.pipeline``).
DERIVATIONS: collections.Counter[str] = collections.Counter()

#: Launch options a heuristic or a config's kwargs may set besides the kernel's constexprs.
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"})


@dataclass(frozen=True)
class Configuration:
    """One concrete configuration of a call: every constexpr value, the compile options, the launch grid and the
    outputs to zero."""

    metaparams: tuple[tuple[str, Any], ...]
    call_options: tuple[tuple[str, Any], ...]
    description: str
    #: The autotune config it came from, as (name, value) pairs of its kwargs and options (tuning records
    #: name configurations by it); empty for a kernel without ``triton.autotune``.
    autotune_config: tuple[tuple[str, Any], ...] = ()
    grid: tuple[int, int, int] = (1, 1, 1)
    zeroed: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Resolution:
    named: Mapping[str, Any]
    configs: tuple[Configuration, ...]


def resolve(call: CallSpec, operands: Sequence[BufferSpec]) -> Resolution:
    """The call's configurations for operands of these shapes, derived once per call and shapes."""
    operands = tuple(operands)
    kept: dict[tuple[BufferSpec, ...], Resolution] = call.__dict__.setdefault("_resolutions", {})
    resolution = kept.get(operands)
    if resolution is None:
        DERIVATIONS["resolutions"] += 1
        resolution = kept[operands] = _resolve(call, operands)
    return resolution


def _resolve(call: CallSpec, operands: tuple[BufferSpec, ...]) -> Resolution:
    kernel, options = call.kernel, call.options
    metaparams = dict(call.metaparams)
    named = named_arguments(call.bound, operands, call.out_specs, metaparams)
    compile_options = options.compiler_options()
    configs = []
    for kwargs, config_options, pre_hook in _candidates(kernel, metaparams, named):
        values = _constexprs(kernel, call.bound, metaparams, kwargs, config_options, named)
        # A heuristic may set a launch option (``{"num_warps": ...}``): Triton passes it to the launch.
        launch = {k: values.pop(k) for k in list(values) if k in LAUNCH_OPTIONS and k not in kernel.param_names}
        meta = {**named, **values}  # as Triton's launcher: the grid sees every argument, defaults included
        grid = options.grid
        if not isinstance(grid, tuple) or len(grid) != 3 or 0 in grid:  # a static grid is normalised by CallOptions
            grid = grid_for(grid, meta, kernel)
        zeroed = options.zeroed_outputs
        zeroed = (zeroed_for(zeroed, meta, len(call.out_specs), kernel) if callable(zeroed) else frozenset(zeroed))
        zeroed |= _hook_zeroed(call, {**named, **kwargs, **config_options}, pre_hook)
        merged = {**compile_options, **{k: v for k, v in config_options.items() if v is not None}, **launch}
        if not merged.get("debug") and triton_compat.launcher_debug(kernel.fn):
            merged["debug"] = True  # as Triton's launcher: @triton.jit(debug=True) or TRITON_DEBUG=1
        given = {**kwargs, **config_options}
        configs.append(Configuration(tuple(values.items()), tuple(merged.items()),
                                     ", ".join(f"{k}={v}" for k, v in given.items()) or "default",
                                     tuple(given.items()) if kernel.autotuner is not None else (), grid, zeroed))
    return Resolution(named, tuple(configs))


def named_arguments(bound: BoundArgs, operands: Sequence[Any], results: Sequence[Any],
                    metaparams: Mapping[str, Any]) -> dict[str, Any]:
    """What ``triton.heuristics`` rules, ``early_config_prune`` and grid callables see: every argument by name,
    arrays as shape/dtype records, then the metaparameters."""
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


def _candidates(kernel: KernelFacts, metaparams: Mapping[str, Any],
                named: Mapping[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any], Any]]:
    """(kwargs, options, pre_hook) of each configuration to resolve: the surviving autotune configs, or one empty
    one."""
    if kernel.autotuner is None:
        return [({}, {}, None)]
    fields = compatible_configs(kernel, metaparams)
    prune = triton_compat.early_prune_function(kernel.autotuner)
    if prune is not None:
        configs = [f.config for f in fields]
        pruned = call_user("early_config_prune", prune, kernel.name, (configs, dict(named)), available=named,
                           expects="as early_config_prune(configs, named_args)")
        if not isinstance(pruned, (str, bytes)) and isinstance(pruned, Iterable):
            pruned = list(pruned)
        if not isinstance(pruned, list) or not all(map(triton_compat.is_config, pruned)):
            raise TypeError(f"early_config_prune {describe(prune)} of kernel {kernel.name!r} must return a list of "
                            f"triton.Config, got {type(pruned).__name__}: {pruned!r:.200}")
        fields = [triton_compat.config_fields(config) for config in pruned]
        for field in fields:
            _check_config_names(kernel, field)
    if not fields:
        raise ValueError(f"kernel {kernel.name!r}: early_config_prune left no autotune configuration for the "
                         f"metaparameters {dict(metaparams)}")
    return [(f.kwargs, f.options, f.pre_hook) for f in fields]


def _constexprs(kernel: KernelFacts, bound: BoundArgs, metaparams: Mapping[str, Any], kwargs: Mapping[str, Any],
                options: Mapping[str, Any], named: Mapping[str, Any]) -> dict[str, Any]:
    """Every constexpr value of one configuration: the call's, the config's, then the heuristics'."""
    # Triton's autotuner passes a config's options as keywords too: a constexpr named like one takes it.
    values = {**metaparams, **kwargs,
              **{k: v for k, v in options.items() if k in kernel.constexpr_names and v is not None}}
    for heuristics in kernel.heuristics:
        for key, rule in triton_compat.heuristic_rules(heuristics).items():
            given = {**named, **values}
            values[key] = call_user(f"heuristic for {key!r}", rule, kernel.name, (given,), available=given,
                                    expects="with one argument, the dict of the call's named arguments")
    require_constexprs(kernel.name, bound, values)
    return values


def require_constexprs(kernel_name: str, bound: BoundArgs, values: Mapping[str, Any]) -> None:
    """Every tl.constexpr parameter needs a value: from the call, a default, a config or a heuristic."""
    for param_name, node in zip(bound.names, bound.nodes, strict=True):
        if isinstance(node, UnsetConst) and param_name not in values:
            raise TypeError(f"kernel {kernel_name!r} is missing a value for its tl.constexpr parameter "
                            f"{param_name!r}: pass {param_name}=... to triton_call")


_CHECKED: weakref.WeakKeyDictionary[KernelFacts, tuple[triton_compat.ConfigFields, ...]] = \
    weakref.WeakKeyDictionary()


def check_kernel(kernel: KernelFacts) -> tuple[triton_compat.ConfigFields, ...]:
    """What depends on the kernel alone, once per kernel: the names its ``triton.heuristics`` set and the names its
    autotune configs set. Returns the configs' fields."""
    checked = _CHECKED.get(kernel)
    if checked is None:
        DERIVATIONS["kernel_checks"] += 1
        for heuristics in kernel.heuristics:
            for key in triton_compat.heuristic_rules(heuristics):
                _check_set_name(kernel, key, f"triton.heuristics({{{key!r}: ...}})")
        configs = triton_compat.autotune_configs(kernel.autotuner) if kernel.autotuner is not None else []
        checked = tuple(map(triton_compat.config_fields, configs))
        for field in checked:
            _check_config_names(kernel, field)
        _CHECKED[kernel] = checked
    return checked


def check_dependencies(kernel: KernelFacts) -> None:
    """Refuse, at the call, a kernel that uses a global which could not be loaded (``kernels_of`` without one of
    its library's dependencies): the ``KernelImportError`` names the package and the import line, where Triton
    would only say "Unsupported function referenced"."""
    if kernel.missing is not None:
        raise kernel.missing.kernel_import_error(f" (kernel {kernel.name!r} uses it)")


def compatible_configs(kernel: KernelFacts, metaparams: Mapping[str, Any]) -> list[triton_compat.ConfigFields]:
    """The fields of the autotune configs that agree with the call's metaparameters."""
    name = kernel.name
    compatible = [f for f in check_kernel(kernel) if all(f.kwargs.get(k, v) == v for k, v in metaparams.items())]
    if not compatible:
        raise ValueError(f"kernel {name!r}: no autotune configuration is compatible with the metaparameters "
                         f"{dict(metaparams)}")
    return compatible


def hook_names(kernel: KernelFacts) -> list[str]:
    """The autotune hooks a kernel carries, by what Triton calls them (for an error); none without autotune."""
    if kernel.autotuner is None:
        return []
    names = list(triton_compat.autotuner_hooks(kernel.autotuner))
    if triton_compat.autotune_resets(kernel.autotuner)[0]:
        names.append("reset_to_zero")
    if any(field.pre_hook is not None for field in check_kernel(kernel)):
        names.append("a config's pre_hook")
    return names


def _hook_zeroed(call: CallSpec, nargs: Mapping[str, Any], config_hook: Any) -> frozenset[int]:
    """The outputs one configuration's autotune hooks zero before the launch, in the order Triton's autotuner
    runs them: the config's ``pre_hook``, then the autotuner's (a user's, or Triton's default one zeroing
    ``reset_to_zero``); a user's ``post_hook`` must do nothing. ``restore_value`` is no effect here: Triton
    restores those arguments after each *timed* run, never after the launch itself, and the GPU runtime's timing
    of configurations already restores the buffers it times on."""
    kernel = call.kernel
    if kernel.autotuner is None:
        return frozenset()
    hooks = triton_compat.autotuner_hooks(kernel.autotuner)
    fills: dict[str, str] = {}  # argument label -> the hook that zeroes it
    if config_hook is not None:
        fills |= autotune_hooks.record("autotune config pre_hook", config_hook, kernel.name, nargs)
    if "pre_hook" in hooks:
        fills |= autotune_hooks.record("triton.autotune pre_hook", hooks["pre_hook"], kernel.name, nargs)
    else:
        resets, _ = triton_compat.autotune_resets(kernel.autotuner)
        fills |= {name: f"triton.autotune reset_to_zero of kernel {kernel.name!r}" for name in resets
                  if nargs.get(name) is not None}
    if "post_hook" in hooks:
        autotune_hooks.record("triton.autotune post_hook", hooks["post_hook"], kernel.name, nargs, after=True)
    return frozenset(_zeroed_output(call, label, who) for label, who in fills.items())


def _zeroed_output(call: CallSpec, label: str, who: str) -> int:
    """The output a hook's zeroing of argument ``label`` (``name`` or ``name[i]``) zeroes: an output's own, an
    aliased input's output, a Ref's (the output it becomes, ``calls.call.refs_as_outputs``)."""
    bound = call.bound
    leaves = {}
    for name, node in zip(bound.names, bound.nodes, strict=True):
        stack = [(name, node)]
        while stack:
            at, node = stack.pop()
            if isinstance(node, tuple):
                stack.extend((f"{at}[{i}]", n) for i, n in enumerate(node))
            else:
                leaves[at] = node
    node = leaves.get(label)
    if isinstance(node, OutputArg):
        return node.index
    if isinstance(node, ArrayArg):
        aliased = dict(bound.aliases)
        if node.index in aliased:
            return aliased[node.index]
        if node.index in bound.refs:
            return len(call.out_specs) + bound.refs.index(node.index)
        raise autotune_hooks.HookRefused(
            f"{who} zeroes {label!r}, an input the call does not update in "
            f"place; pass it as a jax.new_ref, alias it to an output (input_output_aliases) or make it an output "
            f"(out_type) so the zeroed buffer is the call's result")
    raise autotune_hooks.HookRefused(f"{who} zeroes {label!r}, which is not an array argument of the call")


def _check_config_names(kernel: KernelFacts, fields: triton_compat.ConfigFields) -> None:
    """A config may set only the kernel's ``tl.constexpr`` parameters: a runtime argument it sets is refused
    as Triton refuses it (``Conflicting meta-parameters``), a name the kernel lacks is named (misspelt)."""
    for key in fields.kwargs:
        _check_set_name(kernel, key, f"autotune config {fields.config}")


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
