"""vmap of a kernel call, by the call's ``vmap_method`` (``jax.ffi.ffi_call``'s names; docs/vmap.md).

A Triton kernel is written for one problem instance, so the default, ``sequential``, is a loop
(``lax.map``) whose body is the unbatched call: correct for every kernel, sequential in the batch;
``sequential_unrolled`` unrolls it (one launch per element, no loop). ``broadcast_all`` and ``expand_dims``
launch the kernel once for the whole batch: every array gets the batch as its leading dimension (an
unbatched operand broadcast to it, or, with ``expand_dims``, given a leading dimension of 1), every output
too, and the configuration is resolved again from these shapes — the named arguments a grid callable,
``triton.heuristics`` and ``zeroed_outputs`` see are batched. That is what "the kernel can take a batch
dimension" means here: its grid covers its arrays' leading dimensions, which it addresses contiguously (a
row kernel whose grid is the number of rows). A batched launch identical to one element's (same grid, same
constexprs in every configuration) could not see the batch and is refused. A kernel that wants a batch grid
axis of its own can still say so with ``jax.custom_batching.custom_vmap`` (``examples/batched_add.py``).

What every method has to get right:

* an unbatched operand aliased to an output (``input_output_aliases``) is broadcast to the batch first, so
  every element updates its own copy, exactly as a Python loop of calls would;
* a ``jax.new_ref`` operand with a batch dimension is read, updated per element as an aliased output and
  written back; a ref *without* one cannot take the per-element writes of a batched call, and is refused as
  JAX refuses ``ref[...] = batched_value``;
* scalars are static in the ``CallSpec`` and never batched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from tritonplug.calls.call import CallSpec, DescriptorArg, refs_as_outputs
from tritonplug.compile import resolver
from tritonplug.records import BufferSpec


def batch_rule(triton_call_p: Any, axis_data: Any, args: Sequence[Any], dims: Sequence[int | None], *,
               call: CallSpec) -> tuple[list[Any], list[int | None]]:
    """The ``fancy_primitive_batchers`` rule of ``triton_call_p`` (bound with ``functools.partial``)."""
    if all(d is None for d in dims):
        outs = triton_call_p.bind(*args, call=call)
        return list(outs), [None] * len(outs)
    size = axis_data.size
    refs = call.bound.refs
    unbatched_refs = [i for i in refs if dims[i] is None]
    if unbatched_refs:
        raise ValueError(
            f"jax.vmap of a triton_call: the Ref operand(s) at array position(s) {unbatched_refs} are not batched, "
            f"but other operands are, so every batch element would write the same Ref. Create the Ref inside the "
            f"vmapped function from a batched value, or pass a plain array if the kernel only reads it.")

    values = [a[...] if i in refs else a for i, a in enumerate(args)]  # a Ref's current value, batch dim kept
    n_results = len(call.out_specs)
    if refs:
        call = refs_as_outputs(call, [BufferSpec(_without(jnp.shape(values[i]), dims[i]),
                                                 jnp.result_type(values[i]).name) for i in refs])
    if call.options.vmap_method in ("sequential", "sequential_unrolled"):
        outs = _loop(triton_call_p, size, values, dims, call)
    else:
        outs = _one_launch(triton_call_p, size, values, dims, call)
    for k, i in enumerate(refs):
        # full slices, not ``[...]``: JAX's swap batching rule moves the value's batch axis to the
        # Ref's only when indexers are present, which matters under an enclosing vmap
        dim = dims[i]
        assert dim is not None  # an unbatched Ref was refused above
        args[i][(slice(None),) * jnp.ndim(values[i])] = jnp.moveaxis(outs[n_results + k], 0, dim)
    return list(outs[:n_results]), [0] * n_results


def _loop(triton_call_p: Any, size: int, values: list[Any], dims: Sequence[int | None], call: CallSpec) -> Any:
    """One launch per batch element, in a loop (``lax.map``) or unrolled."""
    aliased = {i for i, _ in call.bound.aliases}
    batched: list[Any] = []  # operands the loop slices, batch first
    sliced = []
    for i, (value, d) in enumerate(zip(values, dims, strict=True)):
        if d is None and i in aliased:
            value, d = jnp.broadcast_to(value, (size, *jnp.shape(value))), 0
        sliced.append(d is not None)
        if d is not None:
            batched.append(jnp.moveaxis(value, d, 0))

    def one(xs: Sequence[Any]) -> list[Any]:
        it = iter(xs)
        return list(triton_call_p.bind(*[next(it) if s else v for v, s in zip(values, sliced, strict=True)], call=call))

    if call.options.vmap_method == "sequential_unrolled":
        return jax.lax.scan(lambda carry, xs: (carry, one(xs)), None, batched, unroll=True)[1]
    return jax.lax.map(one, batched)


def _one_launch(triton_call_p: Any, size: int, values: list[Any], dims: Sequence[int | None],
                call: CallSpec) -> Any:
    """One launch over a leading batch dimension of every array (``broadcast_all``, ``expand_dims``)."""
    method, name = call.options.vmap_method, call.kernel.name
    if _has_descriptor(call.bound.nodes):
        raise NotImplementedError(f"jax.vmap of a triton_call of kernel {name!r} with vmap_method={method!r}: a "
                                  f"TensorDescriptor's shape and strides are fixed at the call and cannot take the "
                                  f"batch dimension; use vmap_method='sequential'")
    aliased = {i for i, _ in call.bound.aliases}
    operands = []
    for i, (value, d) in enumerate(zip(values, dims, strict=True)):
        if d is not None:
            operands.append(jnp.moveaxis(value, d, 0))
        elif method == "broadcast_all" or i in aliased:
            operands.append(jnp.broadcast_to(value, (size, *jnp.shape(value))))
        else:
            operands.append(jnp.expand_dims(value, 0))
    batched = dataclasses.replace(call, out_specs=tuple(BufferSpec((size, *s.shape), s.dtype) for s in call.out_specs))
    _check_the_launch_sees_the_batch(call, _specs(values, dims), batched, _specs(operands, [None] * len(operands)),
                                     size)
    return triton_call_p.bind(*operands, call=batched)


def _check_the_launch_sees_the_batch(call: CallSpec, operands: tuple[BufferSpec, ...], batched: CallSpec,
                                     batched_operands: tuple[BufferSpec, ...], size: int) -> None:
    """Refuse a batched launch that is the launch of one element: with the same grid and constexprs, the kernel
    makes the same accesses, and every element but the first would be left unwritten."""
    one = [(c.grid, c.metaparams) for c in resolver.resolve(call, operands).configs]
    many = [(c.grid, c.metaparams) for c in resolver.resolve(batched, batched_operands).configs]
    if size > 1 and one == many:
        method = call.options.vmap_method
        raise ValueError(
            f"jax.vmap of a triton_call of kernel {call.kernel.name!r} with vmap_method={method!r}: the launch for "
            f"the batch of {size} is the launch for one element (grid {one[0][0]}, the same constexprs), so the "
            f"kernel would compute the first element only. With {method!r} the kernel takes the batch as the leading "
            f"dimension of its arrays: pass grid as a callable of the named arguments that covers their leading "
            f"dimensions (e.g. grid=lambda meta: (math.prod(meta['x_ptr'].shape[:-1]),) for a kernel of rows), or "
            f"use vmap_method='sequential'")


def _specs(values: Sequence[Any], dims: Sequence[int | None]) -> tuple[BufferSpec, ...]:
    """The operands' shapes and dtypes with their batch dimension (if any) left out."""
    return tuple(BufferSpec(_without(jnp.shape(v), d), jnp.result_type(v).name)
                 for v, d in zip(values, dims, strict=True))


def _without(shape: tuple[int, ...], axis: int | None) -> tuple[int, ...]:
    return tuple(shape) if axis is None else tuple(shape[:axis]) + tuple(shape[axis + 1:])


def _has_descriptor(nodes: Sequence[Any]) -> bool:
    return any(_has_descriptor(n) if isinstance(n, tuple) else isinstance(n, DescriptorArg) for n in nodes)
