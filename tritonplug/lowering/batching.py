"""vmap of a kernel call: run the kernel once per batch element inside the compiled program.

A Triton kernel is written for one problem instance, so the general rule is a loop
(``lax.map``) whose body is the unbatched call: correct for every kernel, sequential in
the batch. Kernels that can take the batch as a grid axis should say so with
``jax.custom_batching.custom_vmap`` (see ``examples/batched_add.py``): that rule wins
over this one, because vmap never reaches the primitive.

What the loop has to get right:

* unbatched operands are shared by every iteration, except an operand aliased to an
  output (``input_output_aliases``): it is broadcast to the batch first, so every
  iteration updates its own copy, exactly as a Python loop of calls would;
* a ``jax.new_ref`` operand with a batch dimension is read, updated per element as an
  aliased output of the loop and written back; a ref *without* one cannot take the
  per-element writes of a batched call, and is refused as JAX refuses
  ``ref[...] = batched_value``;
* scalars are static in the ``CallSpec`` and never batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from tritonplug.calls.call import CallSpec, refs_as_outputs
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
        per_element = [BufferSpec(tuple(jnp.shape(values[i]))[:dims[i]] + tuple(jnp.shape(values[i]))[dims[i] + 1:],
                                  jnp.result_type(values[i]).name) for i in refs]
        call = refs_as_outputs(call, per_element)
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

    outs = jax.lax.map(one, batched)
    for k, i in enumerate(refs):
        # full slices, not ``[...]``: JAX's swap batching rule moves the value's batch axis to the
        # Ref's only when indexers are present, which matters under an enclosing vmap
        args[i][(slice(None),) * jnp.ndim(values[i])] = jnp.moveaxis(outs[n_results + k], 0, dims[i])
    return list(outs[:n_results]), [0] * n_results
