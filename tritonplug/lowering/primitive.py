"""The ``tritonplug_call`` JAX primitive: abstract evaluation, lowering, transformation rules."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

import jax

from tritonplug import version
from tritonplug.adapters import jax_compat
from tritonplug.calls import user_warnings
from tritonplug.calls.call import CallSpec, refs_as_outputs
from tritonplug.lowering.batching import batch_rule
from tritonplug.lowering.pipeline import lower_call
from tritonplug.records import BufferSpec
from tritonplug.tuning.select import active_session

# One line when jax, jaxlib or Triton is newer than the tested range; an error only for a release known to break.
version.warn_if_untested()

triton_call_p = jax_compat.Primitive("tritonplug_call")
triton_call_p.multiple_results = True


def _impl(*args: Any, call: CallSpec) -> Any:
    session = active_session.get()
    if session is not None and call.kernel.autotuner is not None and call.pinned_config is None:
        session.observe(args, call)  # tritonplug.tune: time every configuration first
    if session is not None and call.options.inline == "auto":
        session.observe_path(args, call)  # then the launched path against the inlined one
    if call.bound.refs:  # refs are discharged into aliased outputs, which needs tracing
        with jax.disable_jit(False):
            return jax.jit(functools.partial(triton_call_p.bind, call=call))(*args)
    return jax_compat.apply_primitive(triton_call_p, *args, call=call)


def eager_dispatcher(call: CallSpec) -> Callable[..., Any]:
    """A jitted function of the call's arrays, for repeated eager calls of one memoised spec.

    Calling it goes through JAX's C++ dispatch of a jitted function directly. ``bind`` gets to the same
    kind of function through ``apply_primitive``, which costs several microseconds of Python per call
    (hashing the parameters to find its cached jit). Only for concrete arrays outside
    ``tritonplug.tune``: see :func:`tritonplug.api.triton_call`.
    """
    return jax.jit(functools.partial(triton_call_p.bind, call=call))


def _abstract_eval(*avals: Any, call: CallSpec) -> tuple[list[jax.core.ShapedArray], set]:
    effects = jax_compat.ref_effects(call.bound.refs)
    return [jax.core.ShapedArray(s.shape, s.dtype) for s in call.out_specs], effects


def _discharge(in_avals: Any, out_avals: Any, *args: Any, call: CallSpec) -> tuple[list, list]:
    """Each ref becomes an extra output aliased to its operand; the kernel writes it in place."""
    refs = call.bound.refs
    specs = [BufferSpec(*jax_compat.ref_shape_dtype(in_avals[i])) for i in refs]
    first = len(call.out_specs)
    outs = triton_call_p.bind(*args, call=refs_as_outputs(call, specs))
    new_invals: list[Any] = [None] * len(in_avals)
    for k, i in enumerate(refs):
        new_invals[i] = outs[first + k]
    return new_invals, outs[:first]


def _dce(used_outputs: list[bool], eqn: Any) -> tuple[list[bool], Any]:
    """Never drop a call, as jax-triton 0.4: a kernel may write through aliased buffers or have effects
    its outputs do not show. (``has_side_effect=True`` also keeps XLA from removing it.)"""
    return [True] * len(eqn.invars), eqn


def _no_autodiff(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(
        "A Triton kernel is opaque to JAX, so tritonplug's drop-in for jax_triton.triton_call does not support "
        "automatic differentiation. Use jax.custom_jvp or jax.custom_vjp to give the call a derivative, "
        "typically a backward kernel (see examples/layer_norm.py).")


def _lowering(platform: str):
    def rule(ctx: Any, *args: Any, call: CallSpec) -> Any:
        return lower_call(ctx, args, call, platform)
    return rule


_lowered_platforms: set[str] = set()
_refused_platforms: set[str] = set()
_registration_lock = threading.Lock()


def ensure_lowering_rules(platforms: Iterable[str]) -> None:
    """Register the primitive's lowering for every platform a loaded backend declares.

    JAX accepts lowering rules only for the platforms it knows (cpu, cuda, rocm, tpu, oneapi …);
    a platform it refuses is reported once with a warning naming it, and the others still work.
    """
    new = set(platforms) - _lowered_platforms - _refused_platforms
    if not new:
        return
    with _registration_lock:
        for platform in sorted(new - _lowered_platforms - _refused_platforms):
            try:
                jax_compat.register_lowering(triton_call_p, _lowering(platform), platform)
            except NotImplementedError as exc:
                _refused_platforms.add(platform)
                user_warnings.warn(f"tritonplug: a backend declares the platform {platform!r}, which JAX cannot lower "
                              f"for; calls are not lowered for it ({exc})", RuntimeWarning)
                continue
            _lowered_platforms.add(platform)


triton_call_p.def_impl(_impl)
triton_call_p.def_effectful_abstract_eval(_abstract_eval)
jax_compat.register_discharge_rule(triton_call_p, _discharge)
jax_compat.register_dce_rule(triton_call_p, _dce)
# The lowering detects the target of the device the program runs on (not device 0), so it
# needs the real device assignment; this also keys JAX's lowering cache by device.
jax_compat.require_devices_during_lowering(triton_call_p)
jax_compat.register_autodiff(triton_call_p, _no_autodiff, _no_autodiff)
jax_compat.register_batching_rule(triton_call_p, functools.partial(batch_rule, triton_call_p))
