"""``triton_call``: the public entry point, source-compatible with ``jax_triton.triton_call``."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Any

import jax
import numpy as np

from tritonplug.adapters import jax_compat
from tritonplug.adapters.triton_compat import KernelFacts
from tritonplug.calls import annotation_checks, binding, inline_mode, user_warnings
from tritonplug.calls.call import CallSpec, pointer_type
from tritonplug.calls.options import (
    TRITON_COMPILE_OPTIONS,
    CallOptions,
    check_option_names,
    grid_for,
    signature_parameters,
)
from tritonplug.compile import resolver
from tritonplug.debug import OutOfBoundsError
from tritonplug.eager import keys, runners
from tritonplug.eager import memo as call_memo
from tritonplug.lowering import early_compile
from tritonplug.lowering.primitive import eager_dispatcher, ensure_lowering_rules, triton_call_p
from tritonplug.process.state import state
from tritonplug.records import BufferSpec
from tritonplug.tuning.select import active_session

#: ``state.memo.recent``, read on every eager call: one global instead of three lookups through the process state
#: (the memo clears it in place, never replaces it).
_RECENT = state.memo.recent


def triton_call(*args: Any, kernel: Any, out_shape: Any = None, out_type: Any = None, **kwargs: Any) -> Any:
    """Call a Triton kernel on JAX arrays, eagerly or inside ``jax.jit``.

    Positional ``args`` (and keywords naming non-constexpr kernel parameters) are the
    kernel's operands: arrays become pointers, ``TensorDescriptor``s host-side TMA descriptors,
    Python/NumPy scalars are passed by value. Pointers to the outputs described by ``out_type``
    (any pytree of objects with ``shape`` and ``dtype``; ``out_shape``, its jax-triton 0.3 name,
    still works with a ``DeprecationWarning``) fill the remaining non-constexpr parameters in order.
    ``grid`` is an int, up to three ints, or a callable of the metaparameters; the other options are
    the fields of
    :class:`tritonplug.calls.options.CallOptions` (``num_warps``, ``num_stages``, ``num_ctas``,
    ``compute_capability``, ``backend_options``, ``input_output_aliases`` (an operand index,
    scalars counted, to an output index; deprecated as in jax-triton 0.4: prefer ``jax.new_ref``
    operands), ``zeroed_outputs`` (deprecated likewise), ``name``, ``debug``,
    ``serialized_metadata``, ``cost_estimate``, ``has_side_effect``, ``custom_call_target_name``
    (jax-triton 0.3: jaxlib's ``triton_kernel_call_ffi`` or the legacy ``triton_kernel_call``), ``vmap_method``
    (how ``jax.vmap`` batches the call, in ``jax.ffi.ffi_call``'s words: ``"sequential"``, the default,
    ``"sequential_unrolled"``, ``"expand_dims"``, ``"broadcast_all"``; docs/vmap.md), ``autotune`` (what an
    autotuned call without a tuning record compiles: ``"runtime"``, the default, every configuration, timed by
    jaxlib at the first run; ``"first"``, the first that survives pruning, until ``tritonplug.tune`` records one),
    ``inline`` (``True``: lowered as its translation to XLA ops on every platform, with no custom call, so
    XLA may fuse it with its neighbours; needs the CPU backend's plugin; ``False``: launched; ``"auto"``: inlined
    where the translation fuses and a tuning record measured it faster; ``None``, the default: the kernel's
    default (:func:`set_inline`), else ``TRITONPLUG_INLINE``; docs/using.md)).
    Every other keyword is a ``tl.constexpr`` value; missing ones take the kernel's defaults or
    come from ``triton.autotune``/``triton.heuristics``.
    """
    if out_shape is None:  # the eager loop's repeat: its memoised program at once
        recent = _RECENT.get(id(kernel))
        if recent is not None:  # the kernel's recent calls, each behind its guard (``eager.runners``)
            try:
                result = recent.run(kernel, args, kwargs, out_type)
            except jax.errors.JaxRuntimeError as exc:
                _reraise_out_of_bounds(exc)
                raise
            if result is not None:
                return result
        if active_session.get() is None:  # else its quick key (``eager.keys``)
            memo = state.memo
            entry = memo.entries.get(keys.quick_key(kernel, args, kwargs, out_type, True))
            if entry is not None and entry.kernel is kernel:  # the key holds id(kernel), which may be reused
                runners.remember(memo, entry, kernel, args, kwargs, out_type)
                return _dispatch(entry, entry.gather(args, kwargs))
    _warn_deprecated(out_shape, kwargs)
    return _call(args, kernel, out_shape, out_type, kwargs)


def set_inline(kernel: Any, mode: bool | str | None) -> Any:
    """Give ``kernel`` a default inline mode (``True``, ``False``, ``"auto"``; ``None`` removes it): its calls that
    pass no ``inline=`` take it, before ``TRITONPLUG_INLINE``. Returns ``kernel`` (usable as a decorator's call)."""
    inline_mode.set_kernel_default(kernel, mode)
    state.memo.clear()  # memoised calls of the kernel resolved their mode without it
    return kernel


def call_kernel(*args: Any, kernel: Any, out_shape: Any = None, out_type: Any = None, **kwargs: Any) -> Any:
    """:func:`triton_call` without its deprecation warnings, for the host's own layers (``launcher``), whose
    use of ``zeroed_outputs`` or ``input_output_aliases`` is no user's choice to warn about."""
    return _call(args, kernel, out_shape, out_type, kwargs)


def _call(args: tuple[Any, ...], kernel: Any, out_shape: Any, out_type: Any, kwargs: dict[str, Any]) -> Any:
    """The story of a call: a repeat of a call already made runs its program at once (``eager.memo``). A new one:
    the kernel's facts and its kernel-only checks (once per kernel); the outputs and options; the arguments bound
    to the parameters (``calls.binding``); the configurations resolved — named arguments, constexprs, grid,
    zeroed outputs, compile options (``compile.resolver``: the call's checks, which the lowering reads back);
    then the call is memoised and run."""
    out_value = _pick_out_shape(out_shape, out_type)
    repeat = call_memo.find(state.memo, kernel, args, kwargs, out_value, out_shape is None)
    if repeat is not None:
        return _run_memoised(*repeat, args, kwargs)

    facts = state.kernels.get(kernel)
    resolver.check_dependencies(facts)
    out_leaves, out_tree = jax.tree_util.tree_flatten(out_value)
    spelled = "out_type" if out_shape is None else "out_shape"  # errors name the keyword the caller used
    out_specs = tuple(_buffer_spec(leaf, i, spelled) for i, leaf in enumerate(out_leaves))
    options, operand_kwargs, constexprs = _options_and_keywords(facts, kwargs, len(out_specs))
    mode, inline_from = inline_mode.resolve(options.inline, kernel)  # call > kernel > TRITONPLUG_INLINE
    options = dataclasses.replace(options, inline=mode)
    sources: list[tuple[str, tuple[int, ...]]] = []
    bound, arrays = binding.bind(facts, args, operand_kwargs, out_specs, dict(options.input_output_aliases),
                                 constexprs, sources, aliases_count_scalars=out_shape is None)
    annotation_checks.check(facts, bound)
    if not out_specs and not bound.refs:
        raise ValueError(f"{spelled} is empty and no operand is a Ref (jax.new_ref): the call would have no effect")
    resolver.check_kernel(facts)
    nothing = _results_of_an_empty_grid(options, bound, out_specs, arrays, facts)
    if nothing is not None:  # as Triton: an empty grid launches nothing (refs keep their values)
        return jax.tree_util.tree_unflatten(out_tree, nothing)
    call = CallSpec(kernel=facts, bound=bound, metaparams=tuple(sorted(constexprs.items())),
                    out_specs=out_specs, options=options, inline_from=inline_from)
    resolver.resolve(call, binding.operand_specs(arrays))  # the call's checks; its lowering reads the result
    ensure_lowering_rules(state.host().lowered_platforms())
    dispatch = None
    if not bound.refs:
        dispatch = eager_dispatcher(call)
        call_memo.remember(state.memo, kernel, args, kwargs, out_value, out_shape is None,
                           call_memo.Entry(call, bound.names, frozenset(operand_kwargs), tuple(sources), out_tree,
                                           dispatch, inline_mode.setting()))
    early_compile.on_bind(call, arrays)
    return jax.tree_util.tree_unflatten(out_tree, _run(call, arrays, dispatch))


def _options_and_keywords(facts: KernelFacts, kwargs: dict[str, Any],
                          n_outputs: int) -> tuple[CallOptions, dict[str, Any], dict[str, Any]]:
    """The call's options, checked, and its other keywords: (options, operands by keyword, constexprs)."""
    rest = dict(kwargs)
    # As in Triton's launcher, a keyword naming both a kernel parameter and a compile option sets both.
    shared = {k: rest[k] for k in TRITON_COMPILE_OPTIONS if k in rest and k in facts.param_names}
    options = CallOptions.take(rest, n_outputs)
    rest.update(shared)
    check_option_names(options, (b.info for b in state.host().backends.values()))
    operand_kwargs, constexprs = binding.split_keywords(facts, rest)
    return options, operand_kwargs, constexprs


def _run_memoised(entry: call_memo.Entry, concrete: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A repeat call: its arrays gathered as the memoised binding placed them, its program run (at once when the
    quick key found it: its arrays are concrete)."""
    arrays = entry.gather(args, kwargs)
    if concrete and active_session.get() is None:
        return _dispatch(entry, arrays)
    return _results(entry, _run(entry.call, arrays, entry.dispatch))


def _dispatch(entry: call_memo.Entry, arrays: Any) -> Any:
    """A memoised call's jitted program run on concrete arrays (JAX's C++ dispatch), its results as the call's."""
    try:
        return _results(entry, entry.dispatch(*arrays))
    except jax.errors.JaxRuntimeError as exc:
        _reraise_out_of_bounds(exc)
        raise


def _results(entry: call_memo.Entry, results: Any) -> Any:
    return results[0] if entry.single else jax.tree_util.tree_unflatten(entry.out_tree, results)


def _results_of_an_empty_grid(options: Any, bound: Any, out_specs: tuple[BufferSpec, ...], arrays: list[Any],
                              facts: KernelFacts) -> list[Any] | None:
    """The results of a call whose static grid has a zero dimension, when every output is defined without the
    kernel: zeroed (``zeroed_outputs``), or an input updated in place (its value); such a call with a fresh
    output is refused here (it would be returned uninitialised). None for a grid with work."""
    grid, zeroed = options.grid, options.zeroed_outputs
    if callable(grid) or callable(zeroed):
        return None
    dims = grid if isinstance(grid, (tuple, list)) else (grid,)
    if not any(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d == 0 for d in dims):
        return None
    hooks = resolver.hook_names(facts)
    if hooks:  # Triton runs them before launching nothing: a buffer they zero would be returned unzeroed here
        raise NotImplementedError(f"kernel {facts.name!r}: the grid {grid!r} is empty and the kernel's autotune "
                                  f"hooks ({', '.join(hooks)}) may zero its buffers; tritonplug zeroes them only "
                                  f"with a launch: skip the call for an empty grid")
    aliased = {out: arg for arg, out in bound.aliases}
    if not all(i in aliased or i in zeroed for i in range(len(out_specs))):
        grid_for(grid, {}, facts)  # raises, naming the grid, the kernel and the way out
    return [arrays[aliased[i]] if i in aliased else jax.numpy.zeros(spec.shape, spec.dtype)
            for i, spec in enumerate(out_specs)]


def _run(call: CallSpec, arrays: list[Any], dispatch: Any) -> Any:
    """Bind the call; an eager call with concrete arrays goes through its jitted ``dispatch`` (JAX's C++
    dispatch, the function ``apply_primitive`` would reach through per-call Python), the first call and
    its repeats alike, so the program is compiled once. Tracers, refs and ``tritonplug.tune`` bind."""
    try:
        if dispatch is not None and call_memo.all_concrete(arrays) and active_session.get() is None:
            return dispatch(*arrays)
        return triton_call_p.bind(*arrays, call=call)
    except jax.errors.JaxRuntimeError as exc:
        _reraise_out_of_bounds(exc)
        raise


def _reraise_out_of_bounds(exc: jax.errors.JaxRuntimeError) -> None:
    """Checked mode's one-line report, raised as ``OutOfBoundsError``, when ``exc`` carries one."""
    fault = _out_of_bounds_report(str(exc))
    if fault is not None:
        raise OutOfBoundsError(fault) from None


class _DropCheckedModeTraceback(logging.Filter):
    """JAX logs a traceback for every exception raised in a ``jax.debug.callback`` before XLA reports it again
    (as ``CpuCallback error``); checked mode's report is one line and reaches the caller in the error itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or type(exc).__name__ != "OutOfBoundsAccess"


logging.getLogger("jax._src.debugging").addFilter(_DropCheckedModeTraceback())


def _out_of_bounds_report(message: str) -> str | None:
    """The one-line report of checked mode (``OutOfBoundsAccess: kernel 'k': out-of-bounds load ...``) that XLA
    buries under a ``CpuCallback error`` traceback when the check runs inside the compiled program."""
    for line in reversed(message.splitlines()):
        if line.startswith("OutOfBoundsAccess: "):
            return line.split(": ", 1)[1]
    return None


triton_call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
     inspect.Parameter("kernel", inspect.Parameter.KEYWORD_ONLY),
     inspect.Parameter("out_shape", inspect.Parameter.KEYWORD_ONLY, default=None),
     inspect.Parameter("out_type", inspect.Parameter.KEYWORD_ONLY, default=None),
     *signature_parameters(),
     inspect.Parameter("metaparams", inspect.Parameter.VAR_KEYWORD)])


def _pick_out_shape(out_shape: Any, out_type: Any) -> Any:
    if out_shape is not None and out_type is not None:
        raise TypeError("pass out_shape or out_type, not both (out_type is an alias of out_shape)")
    value = out_shape if out_shape is not None else out_type
    if value is None:
        raise TypeError("triton_call() missing required keyword argument: 'out_type' (or its deprecated spelling "
                        "'out_shape')")
    return value


def _warn_deprecated(out_shape: Any, kwargs: dict[str, Any]) -> None:
    """jax-triton 0.4's deprecation warnings, for the 0.3 spellings that keep working; at the line that
    called ``triton_call`` (two frames up)."""
    if out_shape is not None:
        user_warnings.warn_caller("out_shape= is deprecated in favor of out_type= (as in jax-triton 0.4)",
                                  DeprecationWarning, 2)
    if kwargs.get("input_output_aliases"):
        user_warnings.warn_caller("input_output_aliases is deprecated (as in jax-triton 0.4): pass the inputs to "
                                  "update in place as Ref arguments (jax.new_ref) instead", DeprecationWarning, 2)
    zeroed = kwargs.get("zeroed_outputs")
    if zeroed is not None and (callable(zeroed) or _nonempty(zeroed)):
        user_warnings.warn_caller("zeroed_outputs is deprecated (as in jax-triton 0.4): zero the buffer explicitly "
                                  "and pass it as a Ref argument (jax.new_ref) instead", DeprecationWarning, 2)


def _nonempty(value: Any) -> bool:
    try:
        return len(value) > 0
    except TypeError:
        return True  # not a sequence: CallOptions reports it


def _buffer_spec(leaf: Any, index: int, spelled: str = "out_type") -> BufferSpec:
    what = f"{spelled} leaf {index}"
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        raise TypeError(f"{what} must have .shape and .dtype (e.g. jax.ShapeDtypeStruct), "
                        f"got {type(leaf).__name__}: {leaf!r}")
    shape = tuple(leaf.shape)
    if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        raise TypeError(f"{what} has a non-static or negative shape {shape}")
    try:
        dtype = np.dtype(leaf.dtype)
    except TypeError:
        raise TypeError(f"{what} has dtype {leaf.dtype!r}, which is no NumPy/JAX dtype (a torch dtype?): use "
                        f"jax.ShapeDtypeStruct(shape, jnp.float32) and the like") from None
    pointer_type(dtype, what)
    if dtype.itemsize == 8 and not jax_compat.ENABLE_X64.value:
        narrow = {"i": "int32", "u": "uint32", "f": "float32"}[dtype.kind]
        raise TypeError(f"{what} is {dtype.name}, but 64-bit types are disabled in JAX "
                        f"(jax_enable_x64 is off: JAX would make the buffer {narrow}, and the kernel would write "
                        f"{dtype.name} values into it); enable them with jax.config.update('jax_enable_x64', True) "
                        f"or use {narrow}")
    return BufferSpec(tuple(int(d) for d in shape), dtype.name)
