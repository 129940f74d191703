# Launchers ported from Liger-Kernel 0.8.5: BSD-2-Clause, Copyright 2024 LinkedIn Corporation, All Rights Reserved.
# Its conditions, and the licence's full text and disclaimer: THIRD_PARTY_NOTICES.md.
"""Liger-Kernel 0.8.5's fused linear cross entropy on JAX: the loss of ``x @ W.T`` against the targets
without the (BT, V) logits ever existing whole. ``liger_cross_entropy_kernel`` (the loss, and the gradient
written over each chunk's logits in place) and ``element_mul_kernel`` (the backward's scaling, in place) are
loaded from the installed ``liger_kernel.ops`` (never copied), launched by Liger's
``fused_linear_cross_entropy_forward`` / ``_backward`` ported with ``tritonplug.launch``; ``jax.custom_vjp``.

As in Liger, the tokens are cut into chunks of ``chunk_size`` rows (Liger's default: about ``BT * H``
logits at a time); per chunk the logits ``x_chunk @ W.T`` (in the input dtype), the kernel's loss and
d loss / d logits, then ``grad_x_chunk = grad_logits @ W`` and ``grad_W += grad_logits.T @ x_chunk``, all
in the forward; the backward only scales the saved ``grad_x`` / ``grad_W`` by the cotangent. Where the
launchers differ from Liger's (JAX requires it):

* the chunk loop is a ``jax.lax.scan`` (``BT`` padded to a multiple of the chunk, padded targets
  ``ignore_index``: the kernel zeroes their gradient and loss), so XLA keeps one chunk's logits alive, not all;
  the slices ``loss_1d[start_idx:end_idx]`` / ``grad_input[start_idx:end_idx]`` are the scan's stacked outputs;
* the logits chunk is a ``jax.new_ref`` (the kernel writes the gradient over it); ``torch.zeros`` is
  ``tritonplug.zeros``;
* ``total_n_non_ignore`` is an ``.item()`` of a traced value, which a kernel scalar cannot take inside
  ``jit``: the kernel runs with ``reduction="sum"``, the mean divides the summed loss afterwards, and the
  backward's ``element_mul_kernel`` scales by ``grad_output / n_non_ignore`` (which it does anyway);
* ``grad_weight`` always accumulates in fp32 (Liger's ``accum_dtype=torch.float32``), cast to ``W``'s dtype at
  the end of the forward as Liger does; ``grad_bias`` and ``ce_weight`` are gone (no bias, no class weights);
* left out: token scaling, z-loss, label smoothing, softcapping, token accuracy, predicted tokens, the
  ``ce_impl`` dispatch, the ``torch.mm(out=)`` / ``addmm`` buffer reuse (XLA places buffers itself), and
  ``reduction="none"`` (Liger recomputes the chunks in the backward for it; refused here);
* ``torch.equal(grad_output, 1)`` is a device read: the backward always multiplies; ``is_hip()`` asks torch,
  ``ROCM`` asks JAX.

In a sharded ``jit`` each launcher runs on its device's rows (``@tritonplug.partitioned``): the tokens ``r``
may be split, the vocabulary ``v`` and hidden ``h`` stay whole (the softmax normalises over ``v``, the logits
contract ``h``); each shard's ``grad_W`` is a partial sum over its rows, added over the row shards. The forward
returns per-row losses and the op reduces them; the backward's scaling is elementwise.

Differing lines (``tests/test_ports.py`` counts them, comments and blank lines aside): the forward launcher
changes or adds 48 of Liger's 266 lines and drops 241 (the options left out above, the loop's slicing and
buffer reuse; what it keeps is the chunk-size rule, the matmuls and the kernel launch); the backward changes or
adds 3 of 38 and drops 13 (``torch.equal``, the ``grad_bias`` branch); each adds its ``@tritonplug.partitioned``
rule.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import triton

import tritonplug

# inline="auto": launched, or inlined as XLA ops where tritonplug.tune measured that faster (docs/using.md)
liger_cross_entropy_kernel = tritonplug.launch(tritonplug.set_inline(
    tritonplug.kernels_of("liger_kernel.ops.cross_entropy").liger_cross_entropy_kernel, "auto"))
element_mul_kernel = tritonplug.launch(tritonplug.kernels_of("liger_kernel.ops.utils").element_mul_kernel)
MAX_FUSED_SIZE = 65536 // 2
_CHUNK_MEM_CONST = 1
ROCM = jax.default_backend() == "gpu" and "rocm" in jax.devices()[0].client.platform_version.lower()


def is_hip() -> bool:
    """Liger's ``is_hip`` asks torch (``torch.version.hip``); JAX's backend says the same."""
    return ROCM


def _forward_rule(_input, weight, target, ignore_index, chunk_size, compute_gradients, chunk_mem_const):
    """Rows ``r`` split, ``v`` and ``h`` whole; ``grad_W`` (no ``r``) is the sum of the row shards' ones."""
    results = "r, r h, v h" if compute_gradients else "r"
    return tritonplug.sharding_rule(f"r h, v h, r -> {results}", need_replication=("v", "h"),
                                    reduction_factors=("r",))


@tritonplug.partitioned(_forward_rule)
def fused_linear_cross_entropy_forward(
    _input,
    weight,
    target,
    ignore_index=-100,
    chunk_size=None,
    compute_gradients=True,
    chunk_mem_const: int = _CHUNK_MEM_CONST,
):
    if isinstance(chunk_mem_const, bool) or not isinstance(chunk_mem_const, int) or chunk_mem_const < 1:
        raise ValueError(f"chunk_mem_const must be a positive integer. Got: {chunk_mem_const!r}")
    input_requires_grad = compute_gradients

    BT, H = _input.shape
    V = weight.shape[0]

    # Bound transient logits to C x BT x H.
    if chunk_size is None:
        inc_factor = triton.cdiv(V, chunk_mem_const * H)
        chunk_size = triton.next_power_of_2(triton.cdiv(BT, inc_factor))  # (BT + inc_factor - 1) // inc_factor
        chunk_size = min(chunk_size, BT)  # a single chunk covers BT when the budget allows; never exceed BT
    num_chunks = triton.cdiv(BT, chunk_size)  # (BT + chunk_size - 1) // chunk_size

    # JAX: the chunks are a scan's steps, so the rows are padded to whole chunks (targets ignored there)
    pad = num_chunks * chunk_size - BT
    chunks = (jnp.pad(_input, ((0, pad), (0, 0))).reshape(num_chunks, chunk_size, H),
              jnp.pad(target, (0, pad), constant_values=ignore_index).reshape(num_chunks, chunk_size))
    grad_weight = jnp.zeros(weight.shape, jnp.float32) if input_requires_grad else None

    block_size = min(MAX_FUSED_SIZE, triton.next_power_of_2(V))

    def chunk(grad_weight, chunk):
        _input_chunk, target_chunk = chunk
        # when doing matmul, use the original precision
        logits_chunk = jax.new_ref(_input_chunk @ weight.T)  # chunk_size x V
        loss_1d_slice = tritonplug.zeros(chunk_size, dtype=jnp.float32)

        liger_cross_entropy_kernel[(chunk_size,)](
            X_ptr=logits_chunk,
            X_stride=V,
            Y_ptr=target_chunk,
            Y_stride=1,
            weight_ptr=None,
            loss_ptr=loss_1d_slice,
            z_loss_ptr=None,
            loss_stride=1,
            token_accuracy_ptr=None,
            token_accuracy_stride=0,
            predicted_tokens_ptr=None,
            predicted_tokens_stride=0,
            n_cols=V,
            n_non_ignore=1,
            sum_non_ignore_weight=1.0,
            weight_sum=0.0,
            ignore_index=ignore_index,
            lse_square_scale=0.0,
            label_smoothing=0.0,
            reduction="sum",
            softcap=None,
            RETURN_Z_LOSS=False,
            RETURN_TOKEN_ACCURACY=False,
            RETURN_PREDICTED_TOKENS=False,
            HAS_WEIGHT=False,
            HAS_SOFTCAPPING=False,
            HAS_GRADIENTS=input_requires_grad,
            BLOCK_SIZE=block_size,
            num_warps=32 if not is_hip() else 16,
        )
        if not input_requires_grad:
            return grad_weight, (loss_1d_slice[...], None)
        grad_logits_chunk = logits_chunk[...]
        grad_input_chunk = (grad_logits_chunk @ weight).astype(_input.dtype)  # grad_input is _input's dtype
        grad_weight = grad_weight + jnp.dot(grad_logits_chunk.T, _input_chunk, preferred_element_type=jnp.float32)
        return grad_weight, (loss_1d_slice[...], grad_input_chunk)

    grad_weight, (loss_1d, grad_input) = jax.lax.scan(chunk, grad_weight, chunks)
    loss_1d = loss_1d.reshape(-1)[:BT]
    if not input_requires_grad:
        return loss_1d
    grad_input = grad_input.reshape(-1, H)[:BT]

    # Cast back to original dtype
    grad_weight = grad_weight.astype(weight.dtype) if grad_weight is not None else None

    return loss_1d, grad_input, grad_weight


@tritonplug.partitioned(", r h, v h -> r h, v h")
@tritonplug.torch_launcher(writes=("grad_input", "grad_weight"))
def fused_linear_cross_entropy_backward(grad_output, grad_input, grad_weight, grad_bias):
    BT, H = grad_input.shape
    n_rows = BT
    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(H))

    element_mul_kernel[(n_rows,)](
        grad_input,
        grad_input.stride(-2),
        grad_output,
        H,
        BLOCK_SIZE=BLOCK_SIZE,
        X_col_stride=grad_input.stride(-1),
        num_warps=32 if not is_hip() else 16,
    )

    # handle grad_weight
    if grad_weight is not None:
        V, H = grad_weight.shape
        n_rows = V

        element_mul_kernel[(n_rows,)](
            grad_weight,
            grad_weight.stride(-2),
            grad_output,
            H,
            BLOCK_SIZE=BLOCK_SIZE,
            X_col_stride=grad_weight.stride(-1),
            num_warps=32 if not is_hip() else 16,
        )

    return grad_input, grad_weight


def fused_linear_cross_entropy(x: jax.Array, weight: jax.Array, target: jax.Array, *, ignore_index: int = -100,
                               reduction: str = "mean", chunk_size: int | None = None) -> jax.Array:
    """``LigerFusedLinearCrossEntropyFunction.apply(x, weight, target, None, None, ignore_index)``: the cross
    entropy of the logits ``x @ weight.T`` (x ``(BT, H)``, weight ``(V, H)``, integer target ``(BT,)``), averaged
    over the targets that are not ``ignore_index`` (``reduction="mean"``) or summed (``"sum"``), in fp32 (as
    Liger's); differentiable in ``x`` and ``weight``. The logits exist ``chunk_size`` rows at a time (default:
    Liger's choice)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"fused_linear_cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r} "
                         "(Liger's 'none' recomputes the chunks in its backward; this port does not)")
    if x.ndim != 2 or weight.ndim != 2 or target.shape != x.shape[:1] or weight.shape[1] != x.shape[1]:
        raise ValueError(f"fused_linear_cross_entropy: want x (BT, H), weight (V, H), target (BT,); got x "
                         f"{x.shape}, weight {weight.shape}, target {target.shape}")
    if not jnp.issubdtype(target.dtype, jnp.integer):
        raise TypeError(f"fused_linear_cross_entropy: target must be integers, got {target.dtype}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"fused_linear_cross_entropy: chunk_size must be a positive int, got {chunk_size!r}")
    return _flce(x, weight, target, ignore_index, reduction, chunk_size)


def _divisor(target, ignore_index, reduction):
    return jnp.sum(target != ignore_index).astype(jnp.float32) if reduction == "mean" else jnp.float32(1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _flce(x, weight, target, ignore_index, reduction, chunk_size):
    loss_1d = fused_linear_cross_entropy_forward(x, weight, target, ignore_index, chunk_size, False)
    return jnp.sum(loss_1d) / _divisor(target, ignore_index, reduction)


def _fwd(x, weight, target, ignore_index, reduction, chunk_size):
    loss_1d, grad_input, grad_weight = fused_linear_cross_entropy_forward(x, weight, target, ignore_index,
                                                                          chunk_size, True)
    divisor = _divisor(target, ignore_index, reduction)
    return jnp.sum(loss_1d) / divisor, (grad_input, grad_weight, divisor)


def _bwd(ignore_index, reduction, chunk_size, res, grad_output):
    grad_input, grad_weight, divisor = res
    scale = grad_output.astype(jnp.float32) / divisor
    grad_input, grad_weight = fused_linear_cross_entropy_backward(scale, grad_input, grad_weight, None)
    return grad_input, grad_weight, None


_flce.defvjp(_fwd, _bwd)


def fused_linear_cross_entropy_reference(x, weight, target, ignore_index=-100, reduction="mean"):
    """The (BT, V) logits whole, ``log_softmax`` in fp32, the mean (or sum) negative log-likelihood."""
    logits = (x @ weight.T).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    valid = target != ignore_index
    nll = -jnp.take_along_axis(logp, jnp.where(valid, target, 0)[:, None], axis=-1)[:, 0]
    return jnp.sum(jnp.where(valid, nll, 0.0)) / (jnp.sum(valid) if reduction == "mean" else 1)


def main(rows: int = 50, hidden: int = 16, vocab: int = 300) -> None:
    kx, kw, kt = jax.random.split(jax.random.key(6), 3)
    x = jax.random.normal(kx, (rows, hidden), jnp.float32)
    weight = jax.random.normal(kw, (vocab, hidden), jnp.float32) / hidden ** 0.5
    target = jax.random.randint(kt, (rows,), 0, vocab).at[::7].set(-100)
    for reduction, chunk_size in (("mean", None), ("mean", 16), ("sum", 8)):
        f = functools.partial(fused_linear_cross_entropy, reduction=reduction, chunk_size=chunk_size)
        ref = functools.partial(fused_linear_cross_entropy_reference, reduction=reduction)
        np.testing.assert_allclose(jax.jit(f)(x, weight, target), ref(x, weight, target), rtol=1e-5)
        got = jax.jit(jax.grad(lambda x, w, f=f: 3.0 * f(x, w, target), argnums=(0, 1)))(x, weight)
        want = jax.grad(lambda x, w, ref=ref: 3.0 * ref(x, w, target), argnums=(0, 1))(x, weight)
        for name, g, w in zip(("grad x", "grad W"), got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=f"{name}, {reduction}, {chunk_size}")
    print(f"Liger fused linear cross entropy x{x.shape} W{weight.shape}: loss, grad x and grad W match jax.grad "
          "of the jnp reference, chunked")


if __name__ == "__main__":
    main()
