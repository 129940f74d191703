"""The ``tritonplug_call`` JAX primitive: abstract evaluation, lowering, transformation rules."""

from __future__ import annotations

from typing import Any

import jax
from jax._src import dispatch
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.interpreters import partial_eval as pe

from tritonplug.call import CallSpec

triton_call_p = Primitive("tritonplug_call")
triton_call_p.multiple_results = True

LOWERED_PLATFORMS = ("cuda", "rocm", "cpu")


def _impl(*args: Any, call: CallSpec) -> Any:
    return dispatch.apply_primitive(triton_call_p, *args, call=call)


def _abstract_eval(*avals: Any, call: CallSpec) -> list[jax.core.ShapedArray]:
    return [jax.core.ShapedArray(s.shape, s.dtype) for s in call.out_specs]


def _dce(used_outputs: list[bool], eqn: Any) -> tuple[list[bool], Any]:
    """Drop a call whose results are unused, unless it declared side effects."""
    if any(used_outputs) or eqn.params["call"].has_side_effect:
        return [True] * len(eqn.invars), eqn
    return [False] * len(eqn.invars), None


def _no_autodiff(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(
        "tritonplug.triton_call has no automatic differentiation rule: a Triton kernel is opaque to JAX. "
        "Wrap the call in jax.custom_vjp (or jax.custom_jvp) with a backward kernel; see examples/layer_norm.py.")


def _lowering(platform: str):
    def rule(ctx: Any, *args: Any, call: CallSpec) -> Any:
        from tritonplug.lowering import lower_call

        return lower_call(ctx, args, call, platform)
    return rule


triton_call_p.def_impl(_impl)
triton_call_p.def_abstract_eval(_abstract_eval)
pe.dce_rules[triton_call_p] = _dce
ad.primitive_jvps[triton_call_p] = _no_autodiff
ad.primitive_transposes[triton_call_p] = _no_autodiff
for _platform in LOWERED_PLATFORMS:
    mlir.register_lowering(triton_call_p, _lowering(_platform), platform=_platform)


def _register_batching() -> None:
    from tritonplug.batching import batch_rule

    batching.primitive_batchers[triton_call_p] = batch_rule


_register_batching()
