"""Vocabulary-parallel fused linear cross entropy (Megatron's; flash-attn's ``class_start_idx``): the loss of
``h @ W.T`` against the targets with the output projection ``W`` ``(vocab, hidden)`` split over the mesh's
``model`` axis along the vocabulary, never gathered, and the logits never whole.

Each device holds its rows of ``h`` (split over the other mesh axes: ``data``) and its block of ``W``'s
vocabulary, and runs, chunk by chunk of its rows (a ``jax.lax.scan``, as Liger's fused linear cross entropy
does), the chunk's logits ``h_chunk @ W_block.T`` and two Triton kernels of ours:

* ``partials_kernel``: per row, the block's max, its sum of ``exp(logit - max)`` (one pass, an online softmax
  over the block) and, where the target id falls in ``[offset, offset + block)``, the target's logit (else 0);
* the collectives: the row max ``pmax``-ed over ``model``, each block's sum rescaled to it and ``psum``-med, the
  target logit ``psum``-med: ``lse = max + log(sum)`` and the row's loss ``lse - target logit``;
* ``grad_kernel``: d loss / d logits of the block, ``exp(logit - lse) - [column is the target]`` (0 on rows
  whose target is ``ignore_index``), written over the chunk's logits (a ``jax.new_ref``, as the Liger port's
  kernel writes its gradient, so that no second chunk-sized buffer is asked for; not measured on a GPU, and
  the CPU's memory plan is the same either way), from which ``d h += grad @ W_block`` (a partial sum over the
  vocabulary, ``psum``-med over ``model`` once, after the chunks) and ``d W_block += grad.T @ h_chunk``
  (summed over ``data``; it stays split over ``model``).

As in Liger, the gradients are computed in the forward and the backward only scales them (``jax.custom_vjp``).
Liger's ``liger_cross_entropy_kernel`` cannot be used per block: it normalises over the whole row it is given
(its own online softmax, no external log-sum-exp) and compares the target with the block's local column index
(no vocabulary offset), hence the two kernels here. The offset is the device's ``jax.lax.axis_index("model")``
times the block size (this runs in a ``jax.shard_map``, where ``tritonplug.shard_offset`` is refused and
``axis_index`` is the way).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import triton
import triton.language as tl
from jax.sharding import PartitionSpec as P

import tritonplug

#: The mesh axis the vocabulary is split over (``step.PARAM_SPECS``'s tensor-parallel axis).
VOCAB_AXIS = "model"
MAX_BLOCK = 32768  # Liger's MAX_FUSED_SIZE: the columns one program holds at a time


@triton.jit
def partials_kernel(logits_ptr, target_ptr, offset_ptr, max_ptr, sum_ptr, picked_ptr, n_cols,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * n_cols
    m = float("-inf")
    d = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m), axis=0)
        m = new_m
    local = tl.load(target_ptr + row) - tl.load(offset_ptr)  # the target's column in this block, if it is here
    here = (local >= 0) & (local < n_cols)
    picked = tl.load(base + tl.where(here, local, 0)).to(tl.float32)
    tl.store(max_ptr + row, m)
    tl.store(sum_ptr + row, d)
    tl.store(picked_ptr + row, tl.where(here, picked, 0.0))


@triton.jit
def grad_kernel(logits_ptr, target_ptr, offset_ptr, lse_ptr, n_cols, ignore_index, BLOCK: tl.constexpr):
    """d loss / d logits written over the logits (as Liger's kernel does: one chunk's buffer, not two)."""
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(target_ptr + row)
    local = target - tl.load(offset_ptr)
    keep = (target != ignore_index).to(tl.float32)
    lse = tl.load(lse_ptr + row)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(logits_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        g = (tl.exp(x - lse) - tl.where(cols == local, 1.0, 0.0)) * keep
        tl.store(logits_ptr + row * n_cols + cols, g.to(logits_ptr.dtype.element_ty), mask=mask)


_partials = tritonplug.launch(partials_kernel)
_grad = tritonplug.launch(grad_kernel)


def block_partials(logits, target, offset):
    """Per row of ``logits`` ``(rows, block)`` (a ``jax.new_ref``, read): the block's max, sum of
    ``exp(logit - max)`` and target logit."""
    rows, n_cols = logits.shape
    outs = [tritonplug.empty(rows, dtype=jnp.float32) for _ in range(3)]
    _partials[(rows,)](logits, target, offset, *outs, n_cols, BLOCK=min(MAX_BLOCK, triton.next_power_of_2(n_cols)),
                       num_warps=32)
    return tuple(out[...] for out in outs)


def block_grad(logits, target, offset, lse, ignore_index):
    """d loss / d logits of the block (unscaled: each row's loss counts 1), written over ``logits`` (a
    ``jax.new_ref``) in its dtype, and read back."""
    rows, n_cols = logits.shape
    _grad[(rows,)](logits, target, offset, lse, n_cols, ignore_index,
                   BLOCK=min(MAX_BLOCK, triton.next_power_of_2(n_cols)), num_warps=32)
    return logits[...]


def vocab_split(mesh) -> bool:
    """Whether ``mesh`` (an abstract mesh, or None) splits the vocabulary: it has ``model`` of size > 1."""
    return mesh is not None and dict(mesh.shape).get(VOCAB_AXIS, 1) > 1


def _shard_body(h, w, target, *, row_axes, chunk_bytes, ignore_index, gradients):
    """One device's rows and vocabulary block; the collectives over ``model`` (the block) and ``row_axes``."""
    rows, hidden = h.shape
    block = w.shape[0]
    offset = (jax.lax.axis_index(VOCAB_AXIS) * block).astype(jnp.int32)
    budget = max(1, chunk_bytes // (block * h.dtype.itemsize))  # rows of logits; a power of two, as Liger's
    chunk = min(rows, 1 << (budget.bit_length() - 1))
    n_chunks = -(-rows // chunk)
    pad = n_chunks * chunk - rows
    chunks = (jnp.pad(h, ((0, pad), (0, 0))).reshape(n_chunks, chunk, hidden),
              jnp.pad(target, (0, pad), constant_values=ignore_index).reshape(n_chunks, chunk))

    def step(grad_w, xs):
        h_chunk, t_chunk = xs
        logits = jax.new_ref(h_chunk @ w.T)  # (chunk, block), in the compute dtype; its gradient written over it
        block_max, block_sum, picked = block_partials(logits, t_chunk, offset)
        row_max = jax.lax.pmax(block_max, VOCAB_AXIS)
        total = jax.lax.psum(block_sum * jnp.exp(block_max - row_max), VOCAB_AXIS)
        lse = row_max + jnp.log(total)
        loss = jnp.where(t_chunk != ignore_index, lse - jax.lax.psum(picked, VOCAB_AXIS), 0.0)
        if not gradients:
            return grad_w, (loss, None)
        grad = block_grad(logits, t_chunk, offset, lse, ignore_index)
        grad_h = jnp.dot(grad, w, preferred_element_type=jnp.float32)  # this block's part of d h
        grad_w = grad_w + jnp.dot(grad.T, h_chunk, preferred_element_type=jnp.float32)
        return grad_w, (loss, grad_h)

    grad_w, (loss, grad_h) = jax.lax.scan(step, jnp.zeros(w.shape, jnp.float32) if gradients else None, chunks)
    loss_sum = jax.lax.psum(jnp.sum(loss), row_axes) if row_axes else jnp.sum(loss)
    count = jnp.sum(target != ignore_index).astype(jnp.float32)
    count = jax.lax.psum(count, row_axes) if row_axes else count
    if not gradients:
        return loss_sum, count
    grad_h = jax.lax.psum(grad_h.reshape(-1, hidden)[:rows], VOCAB_AXIS).astype(h.dtype)
    grad_w = (jax.lax.psum(grad_w, row_axes) if row_axes else grad_w).astype(w.dtype)
    return loss_sum, count, grad_h, grad_w


def _sharded(h, w, target, chunk_bytes, ignore_index, gradients):
    mesh = jax.sharding.get_abstract_mesh()
    row_axes = tuple(a for a in mesh.axis_names if a != VOCAB_AXIS)
    rows = P(row_axes or None)
    body = functools.partial(_shard_body, row_axes=row_axes, chunk_bytes=chunk_bytes, ignore_index=ignore_index,
                             gradients=gradients)
    out_specs = (P(), P(), P(row_axes or None, None), P(VOCAB_AXIS, None)) if gradients else (P(), P())
    return jax.shard_map(body, in_specs=(P(row_axes or None, None), P(VOCAB_AXIS, None), rows),
                         out_specs=out_specs, check_vma=False)(h, w, target)


def vocab_parallel_cross_entropy(h: jax.Array, w: jax.Array, target: jax.Array, *, chunk_bytes: int,
                                 ignore_index: int = -100) -> jax.Array:
    """The mean cross entropy of ``h @ w.T`` (h ``(tokens, hidden)``, w ``(vocab, hidden)``, integer target
    ``(tokens,)``, ``ignore_index`` left out of the mean), in fp32, inside a ``jit`` traced under a mesh
    (``jax.set_mesh``) with a ``model`` axis of size > 1 that divides the vocabulary. Each device holds at most
    ``chunk_bytes`` of its block's logits at a time. Differentiable in ``h`` and ``w``."""
    mesh = jax.sharding.get_abstract_mesh()
    if not vocab_split(mesh):
        raise ValueError(f"vocab_parallel_cross_entropy: needs a mesh with a {VOCAB_AXIS!r} axis of size > 1 set "
                         f"while tracing (jax.set_mesh); the mesh is {dict(mesh.shape) if mesh else None}")
    if h.ndim != 2 or w.ndim != 2 or target.shape != h.shape[:1] or w.shape[1] != h.shape[1]:
        raise ValueError(f"vocab_parallel_cross_entropy: want h (tokens, hidden), w (vocab, hidden), target "
                         f"(tokens,); got h {h.shape}, w {w.shape}, target {target.shape}")
    if w.shape[0] % mesh.shape[VOCAB_AXIS]:
        raise ValueError(f"vocab_parallel_cross_entropy: the vocabulary ({w.shape[0]}) must be a multiple of the "
                         f"mesh's {VOCAB_AXIS!r} axis ({mesh.shape[VOCAB_AXIS]})")
    if not jnp.issubdtype(target.dtype, jnp.integer):
        raise TypeError(f"vocab_parallel_cross_entropy: target must be integers, got {target.dtype}")
    return _loss(h, w, target.astype(jnp.int32), chunk_bytes, ignore_index)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _loss(h, w, target, chunk_bytes, ignore_index):
    loss_sum, count = _sharded(h, w, target, chunk_bytes, ignore_index, False)
    return loss_sum / count


def _fwd(h, w, target, chunk_bytes, ignore_index):
    loss_sum, count, grad_h, grad_w = _sharded(h, w, target, chunk_bytes, ignore_index, True)
    return loss_sum / count, (grad_h, grad_w, count)


def _bwd(chunk_bytes, ignore_index, res, cotangent):
    grad_h, grad_w, count = res
    scale = cotangent.astype(jnp.float32) / count
    return (grad_h * scale).astype(grad_h.dtype), (grad_w * scale).astype(grad_w.dtype), None


_loss.defvjp(_fwd, _bwd)
