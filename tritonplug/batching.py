"""vmap of a kernel call: run the kernel once per batch element inside the compiled program."""

from __future__ import annotations

from typing import Any

import jax
from jax.interpreters import batching


def batch_rule(args: Any, dims: Any, *, call: Any) -> Any:
    """Loop over the batch with ``lax.map``; unbatched operands are shared by every element."""
    from tritonplug.primitive import triton_call_p

    size = next(a.shape[d] for a, d in zip(args, dims) if d is not batching.not_mapped)
    moved = [a if d is batching.not_mapped else jax.numpy.moveaxis(a, d, 0) for a, d in zip(args, dims)]
    batched = [d is not batching.not_mapped for d in dims]

    def one(xs: Any) -> Any:
        it = iter(xs)
        operands = [next(it) if b else a for a, b in zip(moved, batched)]
        return triton_call_p.bind(*operands, call=call)

    outs = jax.lax.map(one, [a for a, b in zip(moved, batched) if b])
    del size
    return outs, [0] * len(outs)
