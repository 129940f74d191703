"""Why XLA:GPU keeps SwiGLU's inlined forward and backward in two fusions where its own op is one (issue 38): the
forward + backward program of ``bench/fusion.py`` (the cotangent a function of the output) written five ways, each
compiled and timed side by side in one process, with its fusion count.

    python bench/fusion_swiglu_forms.py --out bench/results/fusion-h200/swiglu-forms.json

The inlined translation (``inline``, the port's kernels cut to their live lanes) differs from XLA's op (``xla``) in
two things: the port views the activations as rows (``reshape(-1, n)``, and back) around each kernel, and the
kernels' arithmetic is Liger's (``silu`` in fp32, rounded to the input's dtype, times ``b``; the backward's
products in fp32). The ``jnp`` forms (``jax.custom_vjp``, as the port) take one of those each:

* ``rows``: XLA's op's arithmetic, the forward and the backward each on the rows view;
* ``kernel arithmetic``: Liger's arithmetic in ``jnp`` on the activations as they are;
* ``rows, kernel arithmetic``: both, the port's structure written in ``jnp``;
* ``rows, forward only`` / ``rows, backward only``: the rows view around one of the two; ``flat``: a 1-D view
  around each (which reshape, and where, keeps XLA:GPU from one fusion).

Every form's outputs are compared with ``xla``'s (``_forms.run``). ``--tokens`` gives the activations as one row per
token, ``(batch * seq, ffn)``: the rows view is then no reshape at all.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import _forms  # noqa: E402


def forms() -> dict:
    """``name -> swiglu(a, b)``, each differentiable in both."""
    import jax
    import jax.numpy as jnp

    from examples.llama import ops

    def xla_fwd(a, b):
        return jax.nn.silu(a) * b

    def xla_bwd(a, b, dc):
        return jax.vjp(xla_fwd, a, b)[1](dc)

    def kernel_fwd(a, b):
        s = a.astype(jnp.float32)
        return (s * jax.nn.sigmoid(s)).astype(b.dtype) * b

    def kernel_bwd(a, b, dc):
        s32, dc32, b32 = (v.astype(jnp.float32) for v in (a, dc, b))
        sig = jax.nn.sigmoid(s32)
        silu = s32 * sig
        db = (dc32 * silu).astype(a.dtype)
        da = (dc32 * (silu * (1 - sig) + sig) * b32).astype(a.dtype)
        return da, db

    def rows_view(x):
        return x.reshape(-1, x.shape[-1])

    def flat_view(x):
        return x.reshape(-1)

    def same(x):
        return x

    def structured(fwd, bwd, rows: bool = False, *, fwd_view=None, bwd_view=None):
        fwd_view = fwd_view or (rows_view if rows else same)
        bwd_view = bwd_view or (rows_view if rows else same)

        @jax.custom_vjp
        def swiglu(a, b):
            return fwd(fwd_view(a), fwd_view(b)).reshape(a.shape)

        def swiglu_fwd(a, b):
            return swiglu(a, b), (a, b)

        def swiglu_bwd(res, dc):
            a, b = res
            da, db = bwd(bwd_view(a), bwd_view(b), bwd_view(dc))
            return da.reshape(a.shape), db.reshape(b.shape)

        swiglu.defvjp(swiglu_fwd, swiglu_bwd)
        return swiglu

    return {"xla": ops.swiglu_jax, "inline": ops.swiglu_tritonplug,
            "rows": structured(xla_fwd, xla_bwd, True),
            "kernel arithmetic": structured(kernel_fwd, kernel_bwd, False),
            "rows, kernel arithmetic": structured(kernel_fwd, kernel_bwd, True),
            "rows, forward only": structured(xla_fwd, xla_bwd, fwd_view=rows_view, bwd_view=same),
            "rows, backward only": structured(xla_fwd, xla_bwd, fwd_view=same, bwd_view=rows_view),
            "flat": structured(xla_fwd, xla_bwd, fwd_view=flat_view, bwd_view=flat_view)}


def main(argv=None) -> None:
    opts = _forms.options(__doc__, argv, tokens="the activations as (tokens, ffn), not (batch, seq, ffn)")
    import fusion

    cfg = _forms.config(opts)
    fusion.set_mode(("swiglu",), True)
    args, n_diff, _ = fusion.inputs("swiglu", cfg, tokens=opts.tokens)
    programs = {name: fusion.programs("swiglu", fn, n_diff)["forward+backward"] for name, fn in forms().items()}
    layout = " tokens" if opts.tokens else ""
    _forms.run(opts, cfg, f"swiglu forward+backward {opts.config} b={cfg.batch}{layout}", programs, args)


if __name__ == "__main__":
    main()
