"""How the form of a translated kernel's stores decides what XLA:GPU makes of it (issue 38): RoPE's forward at the
Llama 1b config's shapes, written six ways, timed side by side in one process.

    python bench/fusion_store_forms.py --out bench/results/fusion-h200/store-forms.json

Liger's RoPE kernel loads each row's two halves under a mask (heads below ``n_qh``, columns below half the rotary
width: at these shapes always true) and stores each rotated half under that mask. The translator gives each masked
load a ``select`` and each store a ``select`` of the padded half over the buffer, two chained per buffer
(``inline``: the real translation). The ``jnp`` forms take the same arithmetic and change one thing each:

* ``selects``: the translation's form by hand (the masks computed from ``iota``, loads and stores as selects);
* ``selects, static masks``: the masks dropped from the loads, the stores still selects of padded halves;
* ``concatenate``: the two halves written as one ``concatenate`` (a dense write: no select, no old buffer);
* ``xla``: XLA's own op (``examples/llama/ops.py``'s ``rope_jax``), the reference.

Every form's result is compared with ``xla``'s (``_forms.run``). The figures decide which change to the translator pays.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import _forms  # noqa: E402


def forms(cfg):
    """``name -> fn(q, k, cos, sin)``, each returning ``(q', k')`` in the model's ``(batch, seq, heads, dim)``."""
    import jax.numpy as jnp

    from examples.llama import ops

    def halves(x, cos, sin):
        n = x.shape[0] * x.shape[1]
        rows = x.reshape(n, x.shape[2], x.shape[3])
        half = x.shape[3] // 2
        c = jnp.tile(cos[:, :half], (x.shape[0], 1)).astype(x.dtype)[:, None, :]  # each program's row of the table
        s = jnp.tile(sin[:, :half], (x.shape[0], 1)).astype(x.dtype)[:, None, :]
        return rows, half, c, s

    def by_selects(x, cos, sin, masked_loads: bool):
        rows, half, c, s = halves(x, cos, sin)
        heads = x.shape[2]
        mask = (jnp.arange(heads)[:, None] < heads) & (jnp.arange(half)[None, :] < half)
        a, b = rows[..., :half], rows[..., half:]
        if masked_loads:
            a, b = jnp.where(mask, a, 0), jnp.where(mask, b, 0)
        first, second = a * c - b * s, b * c + a * s
        pad = ((0, 0), (0, 0), (0, half))
        out = jnp.where(jnp.pad(mask, ((0, 0), (0, half))), jnp.pad(first, pad), rows)
        out = jnp.where(jnp.pad(mask, ((0, 0), (half, 0))), jnp.pad(second, ((0, 0), (0, 0), (half, 0))), out)
        return out.reshape(x.shape)

    def by_concatenate(x, cos, sin):
        rows, half, c, s = halves(x, cos, sin)
        a, b = rows[..., :half], rows[..., half:]
        return jnp.concatenate([a * c - b * s, b * c + a * s], axis=-1).reshape(x.shape)

    def both(one):
        return lambda q, k, cos, sin: (one(q, cos, sin), one(k, cos, sin))

    return {"xla": ops.rope_jax, "inline": ops.rope_tritonplug,
            "selects": both(lambda x, c, s: by_selects(x, c, s, True)),
            "selects, static masks": both(lambda x, c, s: by_selects(x, c, s, False)),
            "concatenate": both(by_concatenate)}


def main(argv=None) -> None:
    opts = _forms.options(__doc__, argv)
    import fusion

    cfg = _forms.config(opts)
    fusion.set_mode(("rope",), True)
    args, _, _ = fusion.inputs("rope", cfg)
    _forms.run(opts, cfg, f"rope forward {opts.config} b={cfg.batch}", forms(cfg), args)


if __name__ == "__main__":
    main()
