"""``triton_call``: the public entry point, source-compatible with ``jax_triton.triton_call``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from tritonplug import binding, call_memo, frontend, jaxlib_compat, triton_compat
from tritonplug.call import CallSpec
from tritonplug.primitive import triton_call_p
from tritonplug.records import BufferSpec

GridSpec = int | tuple[int, ...] | Callable[[Mapping[str, Any]], tuple[int, ...]]


def triton_call(
    *args: Any,
    kernel: Any,
    out_shape: Any = None,
    grid: GridSpec,
    name: str = "",
    num_warps: int | None = None,
    num_stages: int | None = None,
    num_ctas: int = 1,
    compute_capability: int | None = None,
    enable_fp_fusion: bool = True,
    backend_options: Mapping[str, Any] | None = None,
    input_output_aliases: Mapping[int, int] | None = None,
    zeroed_outputs: Sequence[int] | Callable[[Mapping[str, Any]], Sequence[int]] = (),
    debug: bool = False,
    serialized_metadata: bytes = b"",
    cost_estimate: Mapping[str, Any] | None = None,
    has_side_effect: bool = False,
    out_type: Any = None,
    custom_call_target_name: str | None = None,
    **metaparams: Any,
) -> Any:
    """Call a Triton kernel on JAX arrays, eagerly or inside ``jax.jit``.

    Positional ``args`` (and keywords naming non-constexpr kernel parameters) are the
    kernel's operands: arrays become pointers, Python/NumPy scalars are passed by value.
    Pointers to the outputs described by ``out_shape`` (any pytree of objects with
    ``shape`` and ``dtype``; ``out_type`` is an alias) fill the remaining non-constexpr
    parameters in order. Other keywords are ``tl.constexpr`` values; missing ones take the
    kernel's defaults or come from ``triton.autotune``/``triton.heuristics``. ``grid`` is
    an int, up to three ints, or a callable of the metaparameters.
    ``input_output_aliases`` maps an operand index (scalars counted) to an output index.
    ``custom_call_target_name`` (jax-triton 0.3) picks jaxlib's ``triton_kernel_call_ffi`` or the
    legacy ``triton_kernel_call`` target on GPUs; by default the FFI one where registered.
    """
    options_seen = {"grid": grid, "name": name, "num_warps": num_warps, "num_stages": num_stages,
                    "num_ctas": num_ctas, "compute_capability": compute_capability,
                    "enable_fp_fusion": enable_fp_fusion, "backend_options": backend_options,
                    "input_output_aliases": input_output_aliases, "zeroed_outputs": zeroed_outputs, "debug": debug,
                    "serialized_metadata": serialized_metadata, "cost_estimate": cost_estimate,
                    "has_side_effect": has_side_effect, "out_shape_given": out_shape is not None,
                    "custom_call_target_name": custom_call_target_name}
    memo_key = None if (out_shape is None) == (out_type is None) else call_memo.signature(
        kernel, args, metaparams, out_shape if out_shape is not None else out_type, options_seen)
    memo = call_memo.lookup(memo_key)
    if memo is not None:
        results = triton_call_p.bind(*call_memo.arrays_of(memo, args, metaparams), call=memo.call)
        return jax.tree_util.tree_unflatten(memo.out_tree, results)

    kernel_parts = triton_compat.unwrap(kernel)
    out_tree_value = _pick_out_shape(out_shape, out_type)
    out_leaves, out_tree = jax.tree_util.tree_flatten(out_tree_value)
    out_specs = tuple(_buffer_spec(leaf, i) for i, leaf in enumerate(out_leaves))
    _check_grid(grid)
    if custom_call_target_name not in (None, *jaxlib_compat.GPU_TARGETS):
        raise ValueError(f"custom_call_target_name must be one of {jaxlib_compat.GPU_TARGETS}, "
                         f"got {custom_call_target_name!r}")
    _check_misc(name, serialized_metadata, cost_estimate, has_side_effect, input_output_aliases)
    options = _call_options(num_warps, num_stages, num_ctas, compute_capability, enable_fp_fusion,
                            backend_options, debug)
    param_names, constexpr_names = triton_compat.parameter_names(kernel_parts.fn)
    operand_kwargs = {k: v for k, v in metaparams.items() if k in param_names and k not in constexpr_names}
    constexpr_kwargs = {k: v for k, v in metaparams.items() if k not in operand_kwargs}
    _check_metaparams(kernel_parts, constexpr_kwargs, param_names)
    sources: list[tuple[str, tuple[int, ...]]] = []
    bound, arrays = binding.bind(kernel_parts.fn, args, operand_kwargs, out_specs,
                                 dict(input_output_aliases or {}), constexpr_kwargs, sources)
    if not out_specs and not bound.refs:
        raise ValueError("out_shape is empty and no operand is a Ref (jax.new_ref): the call would have no effect")
    zeroed_outputs = _check_zeroed_outputs(zeroed_outputs, len(out_specs))
    if kernel_parts.autotuner is not None:
        frontend.compatible_configs(kernel_parts, constexpr_kwargs)
    elif not kernel_parts.heuristics:
        _check_complete(kernel_parts, bound, constexpr_kwargs, grid, zeroed_outputs, len(out_specs))
    call = CallSpec(
        kernel=kernel, bound=bound, metaparams=tuple(sorted(constexpr_kwargs.items())), out_specs=out_specs,
        grid=tuple(grid) if isinstance(grid, list) else grid, zeroed_outputs=zeroed_outputs,
        call_options=tuple(sorted(options.items())), name=name, serialized_metadata=bytes(serialized_metadata),
        cost_estimate=tuple(sorted(cost_estimate.items())) if cost_estimate else None,
        has_side_effect=bool(has_side_effect), custom_call_target=custom_call_target_name)
    if not bound.refs:
        call_memo.store(memo_key, call_memo.Entry(call, bound.names, frozenset(operand_kwargs), tuple(sources),
                                                  out_tree))
    results = triton_call_p.bind(*arrays, call=call)
    return jax.tree_util.tree_unflatten(out_tree, results)


def _pick_out_shape(out_shape: Any, out_type: Any) -> Any:
    if out_shape is not None and out_type is not None:
        raise TypeError("pass out_shape or out_type, not both (out_type is an alias of out_shape)")
    value = out_shape if out_shape is not None else out_type
    if value is None:
        raise TypeError("triton_call() missing required keyword argument: 'out_shape'")
    return value


def _buffer_spec(leaf: Any, index: int) -> BufferSpec:
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        raise TypeError(f"out_shape leaf {index} must have .shape and .dtype (e.g. jax.ShapeDtypeStruct), "
                        f"got {type(leaf).__name__}: {leaf!r}")
    shape = tuple(leaf.shape)
    if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        raise TypeError(f"out_shape leaf {index} has a non-static or negative shape {shape}")
    dtype = np.dtype(leaf.dtype)
    binding.pointer_type(dtype, f"out_shape leaf {index}")
    return BufferSpec(tuple(int(d) for d in shape), dtype.name)


def _check_grid(grid: Any) -> None:
    """Check a literal grid here; a callable grid is checked once its metaparameters are known."""
    if callable(grid):
        return
    frontend.grid_for(tuple(grid) if isinstance(grid, list) else grid, {})


def _check_misc(name: Any, serialized_metadata: Any, cost_estimate: Any, has_side_effect: Any,
                input_output_aliases: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (the custom call's name), got {type(name).__name__}: {name!r}")
    if not isinstance(serialized_metadata, (bytes, bytearray, memoryview)):
        raise TypeError(f"serialized_metadata must be bytes, got {type(serialized_metadata).__name__}")
    if cost_estimate is not None:
        if not isinstance(cost_estimate, Mapping):
            raise TypeError(f"cost_estimate must be a mapping such as {{'flops': 1e9}}, got "
                            f"{type(cost_estimate).__name__}")
        for key, value in cost_estimate.items():
            if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"cost_estimate entries must map str to a number, got {key!r}: {value!r}")
    if not isinstance(has_side_effect, (bool, np.bool_)):
        raise TypeError(f"has_side_effect must be a bool, got {has_side_effect!r}")
    if input_output_aliases is not None and not isinstance(input_output_aliases, Mapping):
        raise TypeError(f"input_output_aliases must be a dict {{input index: output index}}, got "
                        f"{type(input_output_aliases).__name__}: {input_output_aliases!r}")


def _check_zeroed_outputs(zeroed_outputs: Any, n_outputs: int) -> Any:
    """A literal ``zeroed_outputs`` becomes a tuple of checked indices; a callable is kept for later."""
    if callable(zeroed_outputs):
        return zeroed_outputs
    if isinstance(zeroed_outputs, (list, tuple, range)):
        zeroed_outputs = tuple(zeroed_outputs)
    return tuple(sorted(frontend.zeroed_for(zeroed_outputs, {}, n_outputs)))


def _check_complete(kernel: triton_compat.UnwrappedKernel, bound: binding.BoundArgs, constexprs: Mapping[str, Any],
                    grid: Any, zeroed_outputs: Any, n_outputs: int) -> None:
    """Without autotune or heuristics every metaparameter is known here: check what depends on them now."""
    frontend.require_constexprs(triton_compat.kernel_name(kernel.fn), bound, constexprs)
    if callable(grid):
        frontend.grid_for(grid, constexprs)
    if callable(zeroed_outputs):
        frontend.zeroed_for(zeroed_outputs, constexprs, n_outputs)


def _check_metaparams(kernel: triton_compat.UnwrappedKernel, constexprs: Mapping[str, Any],
                      param_names: set[str]) -> None:
    name = triton_compat.kernel_name(kernel.fn)
    for key, value in constexprs.items():
        if key not in param_names:
            raise TypeError(f"triton_call() got an unexpected keyword argument {key!r}: it is neither a "
                            f"parameter of kernel {name!r} nor an option of triton_call")
        if binding.is_ref(value):
            raise TypeError(f"argument {key!r} of kernel {name!r} is a tl.constexpr, but a Ref (jax.new_ref) was "
                            f"passed; constexprs must be hashable Python values")
        if binding.is_array(value):
            raise TypeError(f"argument {key!r} of kernel {name!r} is a tl.constexpr, but an array was passed; "
                            f"constexprs must be hashable Python values")
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"metaparameter {key!r} of kernel {name!r} must be hashable, got "
                            f"{type(value).__name__}") from None


# triton_call's own arguments that backend_options must not smuggle in under another spelling.
_CALL_ARGUMENTS = {"compute_capability", "grid", "out_shape", "out_type", "kernel", "name",
                   "input_output_aliases", "zeroed_outputs"}


def _call_options(num_warps: Any, num_stages: Any, num_ctas: Any, compute_capability: Any,
                  enable_fp_fusion: Any, backend_options: Mapping[str, Any] | None, debug: Any) -> dict[str, Any]:
    """Check the options every backend shares here; backends check the rest (ranges, arch) at lowering."""
    num_warps = _int_option("num_warps", num_warps, minimum=1, power_of_two=True)
    num_stages = _int_option("num_stages", num_stages, minimum=0)
    num_ctas = _int_option("num_ctas", num_ctas, minimum=1)
    for flag, value in (("enable_fp_fusion", enable_fp_fusion), ("debug", debug)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{flag} must be a bool, got {type(value).__name__}: {value!r}")
    explicit = {"num_warps": num_warps, "num_stages": num_stages, "num_ctas": num_ctas if num_ctas != 1 else None,
                "enable_fp_fusion": False if not enable_fp_fusion else None, "debug": True if debug else None}
    if backend_options is not None and not isinstance(backend_options, Mapping):
        raise TypeError(f"backend_options must be a mapping, got {type(backend_options).__name__}")
    extra = dict(backend_options or {})
    for key, value in extra.items():
        if not isinstance(key, str):
            raise TypeError(f"backend_options keys must be option names (str), got {key!r}")
        if key in _CALL_ARGUMENTS:
            raise ValueError(f"backend_options[{key!r}] is an argument of triton_call: pass {key}=... instead")
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"backend_options[{key!r}] must be hashable, got {type(value).__name__}") from None
    conflicts = sorted(k for k, v in explicit.items() if v is not None and k in extra)
    if conflicts:
        raise ValueError(f"backend_options sets {conflicts}, also passed as triton_call arguments: set each once")
    if compute_capability is not None and (isinstance(compute_capability, bool)
                                           or not isinstance(compute_capability, (int, np.integer))):
        raise TypeError(f"compute_capability must be an int such as 90, got {compute_capability!r}")
    defaults = {"num_ctas": 1, "enable_fp_fusion": True, "debug": False}
    merged = {**defaults, **{k: v for k, v in explicit.items() if v is not None}, **extra}
    merged.setdefault("num_warps", None)
    merged.setdefault("num_stages", None)
    merged["compute_capability"] = None if compute_capability is None else int(compute_capability)
    return merged


def _int_option(name: str, value: Any, minimum: int, power_of_two: bool = False) -> int | None:
    """``None`` stays unset; anything else must be an int (NumPy ints become Python ints) in range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")
    value = int(value)
    if value < minimum or (power_of_two and value & (value - 1)):
        kind = "a power of two" if power_of_two else "an int"
        raise ValueError(f"{name} must be {kind} >= {minimum}, got {value}")
    return value
