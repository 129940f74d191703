"""Emit kernel objects into the program being lowered.

``GpuKernel``s become one call of jaxlib's Triton custom-call target (an autotuned call when there
are several configurations), with operands and results ordered so that each pointer parameter gets
its own buffer (:func:`buffer_layout`); a ``HostKernel`` becomes an XLA FFI call on the CPU that runs
it on XLA's buffers in place; a ``JaxKernel`` (a kernel translated to JAX operations) is inlined into
the program.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from tritonplug.adapters import host_ffi, jax_compat, jaxlib_compat
from tritonplug.calls.call import CallSpec, buffer_nbytes
from tritonplug.lowering import payload as launch_payload
from tritonplug.lowering.kernel_call import encode_kernel_call
from tritonplug.records import ArrayParam, GpuKernel, HostKernel, JaxKernel, Launch, TmaDescriptorParam, param_leaves


def emit(ctx: Any, args: Sequence[Any], kernels: Sequence[Any], call: CallSpec, platform: str,
         environment: Sequence[tuple[str, str]]) -> Sequence[Any]:
    """The kernels' call in the program; ``environment``, the ``TRITONPLUG_*`` variables the lowering read
    (``pipeline.fingerprint``), enters a host kernel's identity."""
    if all(isinstance(k, GpuKernel) for k in kernels):
        return _emit_gpu(ctx, args, kernels, call)
    if len(kernels) == 1 and isinstance(kernels[0], HostKernel):
        return _emit_host(ctx, args, kernels[0], call, environment)
    if len(kernels) == 1 and isinstance(kernels[0], JaxKernel):
        results = _emit_jax(ctx, args, kernels[0])
        if call.options.cost_estimate:  # no custom call to carry it: the op producing the results does
            cost = json.dumps(dict(call.options.cost_estimate))
            jax_compat.set_frontend_attributes(results, {"cost_estimate_json": cost})
        return results
    raise TypeError(f"backend for {platform!r} returned unsupported kernel objects: "
                    f"{sorted({type(k).__name__ for k in kernels})}")


def _emit_gpu(ctx: Any, args: Sequence[Any], kernels: Sequence[GpuKernel], call: CallSpec) -> Sequence[Any]:
    scratch = max(k.global_scratch_size for k in kernels)
    problem = jaxlib_compat.global_scratch_problem() if scratch else None
    if problem:
        raise NotImplementedError(f"kernel {kernels[0].launch.kernel_name!r} needs {scratch} bytes of global scratch "
                                  f"memory per launch: {problem}")
    kernels = launch_payload.lean_gpu_kernels(kernels, call.options.debug)
    launch = kernels[0].launch
    operand_order, result_order = buffer_layout(kernels, len(args), len(ctx.avals_out))
    operand_at = {old: new for new, old in enumerate(operand_order)}
    result_at = {old: new for new, old in enumerate(result_order)}
    operand_output_aliases = {operand_at[i]: result_at[o] for i, o in launch.aliases}
    # jaxlib compares buffers[input] with buffers[output] to save an aliased input while it autotunes:
    # both indices count in its one list of buffers, the operands, then the results.
    aliases = [(i, len(args) + o, buffer_nbytes(launch.operands[operand_order[i]]))
               for i, o in sorted(operand_output_aliases.items())]
    name = call.options.name or launch.kernel_name
    proto = encode_kernel_call(kernels, name=name, metadata=call.options.serialized_metadata,
                               descriptions=[k.launch.description for k in kernels], aliases=aliases)
    opaque = zlib.compress(proto)
    args = [args[i] for i in operand_order]
    ctx = ctx.replace(avals_in=[ctx.avals_in[i] for i in operand_order],
                      avals_out=[ctx.avals_out[o] for o in result_order])
    target = call.options.custom_call_target_name or jaxlib_compat.FFI_TARGET
    if target == jaxlib_compat.FFI_TARGET:
        attributes: dict[str, Any] = {"opaque": opaque}
        if call.options.cost_estimate and jaxlib_compat.accepts_cost_estimate():
            attributes["cost_estimate_json"] = json.dumps(dict(call.options.cost_estimate))
        rule = jax.ffi.ffi_lowering(target, api_version=4, operand_output_aliases=operand_output_aliases,
                                    has_side_effect=call.options.has_side_effect)
        results = rule(ctx, *args, **attributes)
    else:
        # jax annotates backend_config without bytes, which mlir.custom_call (where it goes) takes: the opaque payload
        rule = jax.ffi.ffi_lowering(target, api_version=2, backend_config=opaque,  # type: ignore[arg-type]
                                    operand_output_aliases=operand_output_aliases,
                                    has_side_effect=call.options.has_side_effect)
        results = rule(ctx, *args)
    if call.options.cost_estimate:
        _annotate(results, call.options.cost_estimate)
    return [results[result_at[o]] for o in range(len(result_order))]


def buffer_layout(kernels: Sequence[GpuKernel], n_operands: int, n_results: int) -> tuple[tuple[int, ...],
                                                                                           tuple[int, ...]]:
    """The custom call's operand order and result order that hand each pointer parameter its own buffer.

    jaxlib's runtime gives the k-th pointer parameter the k-th buffer of (operands..., results...), so
    the operands are ordered as the parameters consume them, then the results they consume, then the
    results no parameter names (outputs aliased to an input's parameter). A result consumed before an
    operand cannot be laid out (``kernel_abi`` compiles such kernels with their outputs last) and is
    refused here rather than launched with the wrong buffers; so is a layout that differs between
    autotune configurations, which share one custom call.
    """
    layouts = {_layout(k.launch, n_operands, n_results) for k in kernels}
    if len(layouts) != 1:
        raise RuntimeError(f"kernel {kernels[0].launch.kernel_name!r}: its autotune configurations take their "
                           f"buffers in different orders, which one custom call cannot serve")
    return layouts.pop()


def _layout(launch: Launch, n_operands: int, n_results: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    consumed = [p.buffer for p in param_leaves(launch.params) if isinstance(p, (ArrayParam, TmaDescriptorParam))]
    operands = [b for b in consumed if b < n_operands]
    results = [b - n_operands for b in consumed if b >= n_operands]
    where = f"kernel {launch.kernel_name!r} (parameters {list(launch.arg_names)})"
    if consumed[:len(operands)] != operands:
        raise RuntimeError(f"{where}: a pointer parameter writing a result comes before one reading an operand; "
                           f"jaxlib's runtime would hand it the wrong buffer (the backend must declare "
                           f"buffer_order='operands_first' so the host reorders the compiled kernel's arguments)")
    if sorted(operands) != list(range(n_operands)) or len(set(results)) != len(results) \
            or not all(0 <= r < n_results for r in results):
        raise RuntimeError(f"{where}: its pointer parameters name buffers {consumed}, not each of the "
                           f"{n_operands} operands once and each result at most once")
    return tuple(operands), tuple(results + [o for o in range(n_results) if o not in results])


def _annotate(results: Sequence[Any], cost_estimate: Any) -> None:
    """Record the cost estimate as a frontend attribute, visible to profilers on every jaxlib."""
    jax_compat.set_frontend_attributes(results, {f"tritonplug_{k}": v for k, v in cost_estimate})


def _emit_host(ctx: Any, args: Sequence[Any], kernel: HostKernel, call: CallSpec,
               environment: Sequence[tuple[str, str]]) -> Sequence[Any]:
    """An XLA FFI call on the CPU whose handler runs the kernel on the buffers in place, so
    aliasing and donation behave as on a GPU (a ``pure_callback`` would copy every result)."""
    launch = kernel.launch
    zero_buffers = _zeroed_buffers(launch)

    def run_on_host(operands: list[np.ndarray], results: list[np.ndarray]) -> None:
        for b in zero_buffers:
            results[_result_of(launch, b)][...] = 0
        kernel.run(operands, results)

    extra = {"cost_estimate_json": json.dumps(dict(call.options.cost_estimate))} if call.options.cost_estimate else None
    function_id = host_ffi.register_function(run_on_host, launch_payload.host_kernel_key(kernel, zero_buffers,
                                                                                         environment))
    return host_ffi.lower_host_call(ctx, args, function_id=function_id,
                                    operand_output_aliases=dict(launch.aliases),
                                    has_side_effect=call.options.has_side_effect, extra_attributes=extra)


def _emit_jax(ctx: Any, args: Sequence[Any], kernel: JaxKernel) -> Sequence[Any]:
    """Inline a kernel written in JAX's array API: XLA compiles it with the rest of the program.

    Buffers with ``bytes_to_zero`` (``zeroed_outputs``) start as zeros, an output aliased to an input
    included, as on the GPU, where the runtime clears them before the launch."""
    from jax.interpreters import mlir

    launch = kernel.launch
    alias_of = {o: i for i, o in launch.aliases}
    n = len(launch.operands)
    zeroed = set(_zeroed_buffers(launch))
    zeroed |= {alias_of[b - n] for b in zeroed if b - n in alias_of}  # one buffer on a GPU: zero both

    def run(*operands: Any) -> list[Any]:
        import jax.numpy as jnp

        operands = tuple(jnp.zeros_like(a) if i in zeroed else a for i, a in enumerate(operands))
        results = [operands[alias_of[o]] if o in alias_of else jnp.zeros(spec.shape, spec.dtype)
                   for o, spec in enumerate(launch.results)]
        return list(kernel.fn(list(operands), results))

    return mlir.lower_fun(run, multiple_results=True)(ctx, *args)


def _zeroed_buffers(launch: Launch) -> list[int]:
    return [p.buffer for p in param_leaves(launch.params) if isinstance(p, ArrayParam) and p.bytes_to_zero]


def _result_of(launch: Launch, buffer: int) -> int:
    """The result index a buffer is written through (an aliased operand writes its result)."""
    if buffer >= len(launch.operands):
        return buffer - len(launch.operands)
    return dict(launch.aliases)[buffer]
