# Launchers ported from Liger-Kernel 0.8.5: BSD-2-Clause, Copyright 2024 LinkedIn Corporation, All Rights Reserved.
# Its conditions, and the licence's full text and disclaimer: THIRD_PARTY_NOTICES.md.
"""Liger-Kernel 0.8.5's SwiGLU (``silu(a) * b``) on JAX: its kernels, loaded from the installed
``liger_kernel.ops.swiglu`` (never copied), launched by its launchers ported with ``tritonplug.launch``;
the backward writes ``da``/``db`` over ``a``/``b`` in place, as Liger's does; ``jax.custom_vjp``.

Where the launchers differ from Liger's ``swiglu_forward`` / ``swiglu_backward`` (JAX requires it):

* ``@tritonplug.torch_launcher`` hands the body torch-like handles of its arrays (``.view``,
  ``.stride``) and returns arrays; the backward names ``a`` and ``b`` in ``writes``: the kernel
  updates them in place, and JAX arrays are immutable (they become ``jax.new_ref`` s);
* ``torch.empty_like`` is ``tritonplug.empty_like``; ``with device_context(a.device):`` is gone (JAX
  places the call);
* the Blackwell column-tiled branch (``_should_tile``) is left out: it asks torch for the device
  architecture.

In a sharded ``jit`` each launcher runs on its device's shard (``@tritonplug.partitioned``): SwiGLU is
elementwise, so both rows ``r`` and columns ``n`` may be split. The rules name the launchers' own (rows,
columns) view, so the op flattens the leading axes first (a reshape that keeps them split).

Differing lines (``tests/test_ports.py`` counts them, comments and blank lines aside): the forward
launcher changes or adds 3 of Liger's 35 lines (the two decorators, ``empty_like``) and drops 17; the
backward changes or adds 2 of 33 (the decorators) and drops 16: the Blackwell branch and ``with device_context``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import tritonplug

_lib = tritonplug.kernels_of("liger_kernel.ops.swiglu")
calculate_settings = tritonplug.kernels_of("liger_kernel.ops.utils").calculate_settings
# inline="auto": launched, or inlined as XLA ops where tritonplug.tune measured that faster (docs/using.md)
_swiglu_forward_kernel = tritonplug.launch(tritonplug.set_inline(_lib._swiglu_forward_kernel, "auto"))
_swiglu_backward_kernel = tritonplug.launch(tritonplug.set_inline(_lib._swiglu_backward_kernel, "auto"))


@tritonplug.partitioned("r n, r n -> r n, r n, r n")
@tritonplug.torch_launcher
def swiglu_forward(a, b, gate_multiplier: float = 1.0):
    ori_shape = a.shape

    n_cols = ori_shape[-1]
    a = a.view(-1, n_cols)
    b = b.view(-1, n_cols)
    c = tritonplug.empty_like(a)
    n_rows = a.shape[0]

    BLOCK_SIZE, num_warps = calculate_settings(n_cols)

    _swiglu_forward_kernel[(n_rows,)](
        a,
        b,
        c,
        c.stride(-2),
        float(gate_multiplier),
        n_cols=n_cols,
        BLOCK_SIZE=BLOCK_SIZE,
        num_warps=num_warps,
    )
    return a, b, c.view(*ori_shape)


@tritonplug.partitioned("r n, r n, r n -> r n, r n")
@tritonplug.torch_launcher(writes=("a", "b"))
def swiglu_backward(a, b, dc, gate_multiplier: float = 1.0):
    ori_shape = dc.shape
    n_cols = ori_shape[-1]
    dc = dc.view(-1, n_cols)
    n_rows = dc.shape[0]

    BLOCK_SIZE, num_warps = calculate_settings(n_cols)

    _swiglu_backward_kernel[(n_rows,)](
        dc,
        a,
        b,
        dc.stride(-2),
        float(gate_multiplier),
        n_cols=n_cols,
        BLOCK_SIZE=BLOCK_SIZE,
        num_warps=num_warps,
    )
    return a.view(*ori_shape), b.view(*ori_shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def liger_swiglu(a, b, gate_multiplier=1.0):
    """``LigerSiLUMulFunction.apply``: ``silu(gate_multiplier * a) * b``."""
    return swiglu_forward(_rows(a), _rows(b), gate_multiplier)[2].reshape(a.shape)


def _rows(x):
    """x as the launchers' (rows, columns) view: leading axes merged, which keeps them split in a sharded jit."""
    return x.reshape(-1, x.shape[-1])


def _fwd(a, b, gate_multiplier):
    a2, b2, c = swiglu_forward(_rows(a), _rows(b), gate_multiplier)
    return c.reshape(a.shape), (a2, b2)


def _bwd(gate_multiplier, res, dc):
    a, b = res
    da, db = swiglu_backward(a, b, _rows(dc), gate_multiplier)
    return da.reshape(dc.shape), db.reshape(dc.shape)


liger_swiglu.defvjp(_fwd, _bwd)


def swiglu_reference(a, b, gate_multiplier=1.0):
    x = gate_multiplier * a.astype(jnp.float32)
    return (x * jax.nn.sigmoid(x)).astype(b.dtype) * b


def main(rows: int = 48, cols: int = 80) -> None:
    ka, kb, kd = jax.random.split(jax.random.key(1), 3)
    a = jax.random.normal(ka, (rows, cols), jnp.float32)
    b = jax.random.normal(kb, (rows, cols), jnp.float32)
    dc = jax.random.normal(kd, (rows, cols), jnp.float32)
    for gate in (1.0, 0.5):
        np.testing.assert_allclose(jax.jit(liger_swiglu, static_argnums=2)(a, b, gate),
                                   swiglu_reference(a, b, gate), rtol=1e-5, atol=1e-5)
        loss = lambda fn, gate=gate: lambda a, b: jnp.sum(fn(a, b, gate) * dc)  # noqa: E731
        got = jax.jit(jax.grad(loss(liger_swiglu), argnums=(0, 1)))(a, b)
        want = jax.grad(loss(swiglu_reference), argnums=(0, 1))(a, b)
        for name, g, w in zip(("da", "db"), got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)
    print(f"Liger SwiGLU {a.shape}: c, da and db match jax.grad of the jnp reference")


if __name__ == "__main__":
    main()
