# Launchers ported from Liger-Kernel 0.8.5: BSD-2-Clause, Copyright 2024 LinkedIn Corporation, All Rights Reserved.
# Its conditions, and the licence's full text and disclaimer: THIRD_PARTY_NOTICES.md.
"""Liger-Kernel 0.8.5's cross entropy on JAX: ``liger_cross_entropy_kernel``, which writes the
gradient over the logits in place during the forward, and ``element_mul_kernel`` (in place, in the
backward), loaded from the installed ``liger_kernel.ops`` (never copied), launched by Liger's
``cross_entropy_forward`` / ``cross_entropy_backward`` ported with ``tritonplug.launch``; ``jax.custom_vjp``.

Where the launchers differ from Liger's (JAX requires it):

* ``@tritonplug.torch_launcher(writes="_input")`` hands the bodies torch-like handles of their arrays
  (``.stride``, ``.contiguous``), the logits over a ``jax.new_ref`` (the kernel writes the gradient
  over them), and returns arrays; arithmetic on the targets and weights reads their values (``[...]``);
  ``torch.zeros`` is ``tritonplug.zeros`` (predicted tokens are int32: JAX's default int width);
* ``n_non_ignore`` and ``sum_non_ignore_weight`` are ``.item()`` s of traced values, which a kernel
  scalar cannot take inside ``jit``: the kernel runs with ``reduction="sum"`` and the mean divides the
  loss afterwards and scales the gradient in the backward (``grad_output / n_non_ignore`` through
  ``element_mul_kernel``, which Liger skips when ``grad_output`` is exactly 1: one more pass over
  the logits); ``weight_sum`` (label smoothing with weights) must be concrete: eager only;
  ``HAS_GRADIENTS`` is an argument, not ``_input.requires_grad``;
* the target-range asserts read device values (``.max()``): left out; ``ce_num_warps`` is 32 (16 on
  ROCm), Liger's value for every GPU but Blackwell's bf16, which asks torch for the architecture;
* ``torch.equal(grad_output, 1)`` is a device read: the backward always multiplies.

In a sharded ``jit`` each launcher runs on its device's rows (``@tritonplug.partitioned``): the rows may be
split, the vocabulary stays whole (the softmax normalises over it). A mean over rows is not a sum of the
shards' means, so the forward's rule is for ``reduction="none"`` (per-row losses; the count of rows not
ignored is added over the shards) and the op reduces the per-row losses itself.

Differing lines (``tests/test_ports.py`` counts them, comments and blank lines aside): the forward
launcher changes or adds 21 of Liger's 102 lines and drops 30 (asserts, ``.item()`` s, the Blackwell
warps); the backward changes or adds 5 of 18 and drops 5; each adds its ``@tritonplug.partitioned`` rule.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import triton

import tritonplug

_lib = tritonplug.kernels_of("liger_kernel.ops.cross_entropy")
# inline="auto": launched, or inlined as XLA ops where tritonplug.tune measured that faster (docs/using.md)
liger_cross_entropy_kernel = tritonplug.launch(tritonplug.set_inline(_lib.liger_cross_entropy_kernel, "auto"))
element_mul_kernel = tritonplug.launch(tritonplug.kernels_of("liger_kernel.ops.utils").element_mul_kernel)
MAX_FUSED_SIZE = 65536 // 2
ROCM = jax.default_backend() == "gpu" and "rocm" in jax.devices()[0].client.platform_version.lower()


@tritonplug.partitioned("r v, r -> r, r v, ", need_replication=("v",), reduction_factors=("r",))
@tritonplug.torch_launcher(writes="_input")
def cross_entropy_forward(
    _input,
    target,
    weight,
    ignore_index,
    lse_square_scale,
    label_smoothing,
    reduction,
    softcap,
    return_z_loss,
    return_token_accuracy=False,
    return_predicted_tokens=False,
    requires_grad=True,
):
    assert isinstance(return_z_loss, bool), f"return_z_loss must be True or False. Got: {return_z_loss}"
    assert isinstance(return_token_accuracy, bool), (
        f"return_token_accuracy must be True or False. Got: {return_token_accuracy}"
    )
    assert isinstance(return_predicted_tokens, bool), (
        f"return_predicted_tokens must be True or False. Got: {return_predicted_tokens}"
    )

    BT, V = _input.shape
    n_rows = BT

    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(V))

    # unreduced loss
    loss_1d = tritonplug.zeros(n_rows, dtype=_input.dtype)
    z_loss_1d = tritonplug.zeros(n_rows, dtype=_input.dtype) if return_z_loss else None
    token_accuracy_1d = tritonplug.zeros(n_rows, dtype=jnp.float32) if return_token_accuracy else None
    predicted_tokens_1d = tritonplug.empty(n_rows, dtype=jnp.int32) if return_predicted_tokens else None

    target_mask = target[...] != ignore_index
    n_non_ignore = target_mask.sum()
    sum_non_ignore_weight = n_non_ignore
    weight_sum = 0.0
    if weight is not None:
        assert weight.shape[0] == V, f"If given, weight has to be a Tensor of size V. Got: {weight.shape}"
        assert jnp.issubdtype(weight.dtype, jnp.floating), (
            f"If given, weight has to be a Tensor of floating point dtype. Got: {weight.dtype}"
        )
        sum_non_ignore_weight = jnp.sum(jnp.where(target_mask, weight[...][jnp.where(target_mask, target[...], 0)], 0))
        weight_sum = weight[...].sum().item() if label_smoothing > 0 else 0.0
        # ensure weight is contiguous
        if weight.stride(-1) != 1:
            weight = weight.contiguous()

    # ensure _input and target are contiguous in the last dimension
    if _input.stride(-1) != 1:
        _input = _input.contiguous()
    if target.stride(-1) != 1:
        target = target.contiguous()

    ce_num_warps = 16 if ROCM else 32

    # Here we use a trick to store X_ptr gradient in X_ptr so we can save memory
    liger_cross_entropy_kernel[(n_rows,)](
        X_ptr=_input,
        X_stride=_input.stride(-2),
        Y_ptr=target,
        Y_stride=target.stride(-1),  # always 1
        weight_ptr=weight,  # dummy if None
        loss_ptr=loss_1d,
        z_loss_ptr=z_loss_1d,
        loss_stride=loss_1d.stride(-1),  # always 1
        token_accuracy_ptr=token_accuracy_1d,
        token_accuracy_stride=token_accuracy_1d.stride(-1)
        if return_token_accuracy
        else 0,  # always 1 if accuracy is enabled
        predicted_tokens_ptr=predicted_tokens_1d,
        predicted_tokens_stride=predicted_tokens_1d.stride(-1)
        if return_predicted_tokens
        else 0,  # always 1 if predicted tokens is enabled
        n_cols=V,
        n_non_ignore=1,
        sum_non_ignore_weight=1.0,
        ignore_index=ignore_index,
        weight_sum=weight_sum,
        lse_square_scale=lse_square_scale,
        label_smoothing=label_smoothing,
        reduction="sum" if reduction == "mean" else reduction,
        softcap=softcap,
        RETURN_Z_LOSS=return_z_loss,
        RETURN_TOKEN_ACCURACY=return_token_accuracy,
        RETURN_PREDICTED_TOKENS=return_predicted_tokens,
        BLOCK_SIZE=BLOCK_SIZE,
        HAS_WEIGHT=True if weight is not None else False,
        HAS_SOFTCAPPING=True if softcap is not None else False,
        HAS_GRADIENTS=requires_grad,
        num_warps=ce_num_warps,
    )

    if reduction == "none":
        loss = loss_1d
        z_loss = z_loss_1d if return_z_loss else None
        token_accuracy = token_accuracy_1d if return_token_accuracy else None
    else:
        loss = jnp.sum(loss_1d[...]) / (sum_non_ignore_weight if reduction == "mean" else 1)
        z_loss = jnp.sum(z_loss_1d[...]) / (n_non_ignore if reduction == "mean" else 1) if return_z_loss else None
        # For accuracy, we compute the mean across all non-ignored tokens
        token_accuracy = jnp.sum(token_accuracy_1d[...]) / n_non_ignore if return_token_accuracy else None

    predicted_tokens = predicted_tokens_1d if return_predicted_tokens else None

    return loss, z_loss, token_accuracy, predicted_tokens, _input, sum_non_ignore_weight


@tritonplug.partitioned("... v, ... -> ... v")
@tritonplug.torch_launcher(writes="_input")
def cross_entropy_backward(_input, grad_output):
    # If reduction is 'none'
    if grad_output.ndim > 0:
        _input = _input[...] * grad_output[...][:, None]
    # If reduction is ['mean', 'sum'], grad_output is just a scalar
    else:
        BT, V = _input.shape
        n_rows = BT
        BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(V))

        element_mul_kernel[(n_rows,)](
            _input,
            _input.stride(-2),
            grad_output,
            V,
            BLOCK_SIZE=BLOCK_SIZE,
            num_warps=32 if not ROCM else 16,
        )

    return _input


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def liger_cross_entropy(_input, target, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """``LigerCrossEntropyFunction.apply(_input, target, None, ignore_index, 0.0, label_smoothing, reduction)``."""
    return _loss(_input, target, ignore_index, label_smoothing, reduction, requires_grad=False)[0]


def _loss(_input, target, ignore_index, label_smoothing, reduction, requires_grad=True):
    """The launcher's per-row losses (``reduction="none"``), reduced here: a row shard's mean is not a piece of
    the mean, but its sum and its count of rows not ignored are (the rule adds them over the shards)."""
    loss, _, _, _, grad, divisor = cross_entropy_forward(_input, target, None, ignore_index, 0.0, label_smoothing,
                                                         "none", None, False, requires_grad=requires_grad)
    if reduction != "none":
        loss = jnp.sum(loss) / (divisor if reduction == "mean" else 1)
    return loss, grad, divisor


def _fwd(_input, target, ignore_index, label_smoothing, reduction):
    loss, grad, divisor = _loss(_input, target, ignore_index, label_smoothing, reduction)
    return loss, (grad, divisor)


def _bwd(ignore_index, label_smoothing, reduction, res, grad_output):
    grad, divisor = res
    scale = grad_output / divisor if reduction == "mean" else grad_output
    return cross_entropy_backward(grad, scale.astype(grad.dtype)), None


liger_cross_entropy.defvjp(_fwd, _bwd)


def cross_entropy_reference(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """torch.nn.functional.cross_entropy with ``ignore_index`` and ``label_smoothing``."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    valid = target != ignore_index
    nll = -jnp.take_along_axis(logp, jnp.where(valid, target, 0)[:, None], axis=-1)[:, 0]
    loss = (1 - label_smoothing) * nll - label_smoothing * jnp.mean(logp, axis=-1)
    loss = jnp.where(valid, loss, 0.0)
    if reduction == "none":
        return loss
    return jnp.sum(loss) / (jnp.sum(valid) if reduction == "mean" else 1)


def main(rows: int = 24, vocab: int = 200) -> None:
    kx, kt = jax.random.split(jax.random.key(4))
    logits = jax.random.normal(kx, (rows, vocab), jnp.float32)
    target = jax.random.randint(kt, (rows,), 0, vocab).at[::5].set(-100)
    for smoothing, reduction in ((0.0, "mean"), (0.1, "mean"), (0.0, "sum")):
        f = jax.jit(liger_cross_entropy, static_argnums=(2, 3, 4))
        np.testing.assert_allclose(f(logits, target, -100, smoothing, reduction),
                                   cross_entropy_reference(logits, target, -100, smoothing, reduction), rtol=1e-5)
        def loss(fn, smoothing=smoothing, reduction=reduction):
            return lambda x: 3.0 * fn(x, target, -100, smoothing, reduction)

        got = jax.jit(jax.grad(loss(liger_cross_entropy)))(logits)
        want = jax.grad(loss(cross_entropy_reference))(logits)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=f"{reduction}, {smoothing}")
    print(f"Liger cross entropy {logits.shape}: loss and its in-place gradient match jax.grad of the jnp reference")


if __name__ == "__main__":
    main()
