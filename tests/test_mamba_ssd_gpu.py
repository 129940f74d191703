"""The SSD port (``examples/ports/mamba_ssd.py``) against mamba-ssm's own ``mamba_chunk_scan_combined`` on torch
tensors (Triton's own launch of the same kernels), forward and backward, on a GPU: a small shape and a Mamba-2
model's (h 64, p 64, n 128, chunk 256, l 2048).

Runs where JAX sees a CUDA device and torch, einops and mamba-ssm's source import (mamba-ssm's package
``__init__`` needs its CUDA extensions, so ``mamba_source.register_bare_packages`` enters its packages bare)."""

from __future__ import annotations

import importlib
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import gpu_platforms, requires_backend

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU with JAX (if JAX starts here)


def _mamba():
    """mamba-ssm's ``ssd_combined`` and torch, or the reason they cannot run here."""
    if "cuda" not in gpu_platforms():
        return None, "no CUDA device is visible to JAX"
    try:
        torch = importlib.import_module("torch")
        if not torch.cuda.is_available():
            return None, "torch sees no CUDA device"
        from ports.mamba_source import register_bare_packages
        register_bare_packages()
        return (torch, importlib.import_module("mamba_ssm.ops.triton.ssd_combined")), ""
    except ImportError as error:
        return None, f"torch or mamba-ssm cannot be imported: {error}"


MAMBA, REASON = _mamba()
pytestmark = [pytest.mark.cuda, requires_backend("cuda"), pytest.mark.skipif(MAMBA is None, reason=REASON)]

SHAPES = {  # b, l, h, p, g, n, chunk, dtype
    "small": (2, 200, 8, 32, 2, 32, 64, np.float32),
    "model": (2, 2048, 64, 64, 1, 128, 256, jnp.bfloat16),
}


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("gated, states, packed", [(False, False, False), (True, False, False),
                                                   (True, True, False), (True, True, True)],
                         ids=["plain", "z_D_bias", "z_D_bias_initial_final_states", "z_D_bias_states_seq_idx"])
def test_port_matches_mamba_ssm_forward_and_backward(name, gated, states, packed):
    torch, ssd_combined = MAMBA
    from ports.mamba_ssd import mamba_chunk_scan_combined

    b, seqlen, h, p, g, n, chunk, dtype = SHAPES[name]
    rng = np.random.default_rng(0)
    f = lambda *shape, scale=1.0: (scale * rng.standard_normal(shape)).astype(np.float32)  # noqa: E731
    arrays = {"x": f(b, seqlen, h, p), "dt": f(b, seqlen, h, scale=0.5),
              "A": -rng.uniform(0.5, 4, h).astype(np.float32), "B": f(b, seqlen, g, n, scale=0.3),
              "C": f(b, seqlen, g, n, scale=0.3)}
    if gated:
        arrays.update(D=f(h), z=f(b, seqlen, h, p), dt_bias=f(h, scale=0.5))
    if states:
        arrays.update(initial_states=f(b, h, p, n))
    low = {"x", "B", "C", "z"}
    jx = {k: jnp.asarray(v, dtype if k in low else jnp.float32) for k, v in arrays.items()}
    options = dict(dt_softplus=True, dt_limit=(0.0, float("inf")), return_final_states=states)
    # packed: row 0 starts sequences inside the first chunk and at the third chunk's first step, row 1 at its middle
    starts = np.array([[chunk // 3, 2 * chunk], [seqlen // 2, seqlen]])
    seq_idx = np.stack([np.searchsorted(row, np.arange(seqlen), side="right") for row in starts]).astype(np.int32)
    dout = rng.standard_normal((b, seqlen, h, p)).astype(np.float32)
    dlast = rng.standard_normal((b, h, p, n)).astype(np.float32)

    names = list(jx)
    out, vjp = jax.vjp(lambda *a: mamba_chunk_scan_combined(**dict(zip(names, a, strict=True)), chunk_size=chunk,
                                                            seq_idx=seq_idx if packed else None, **options),
                       *jx.values())
    y, last = out if states else (out, None)
    grads = vjp((jnp.asarray(dout, y.dtype), jnp.asarray(dlast)) if states else jnp.asarray(dout, y.dtype))

    tdtype = torch.bfloat16 if dtype == jnp.bfloat16 else torch.float32
    tx = {k: torch.tensor(np.asarray(v.astype(jnp.float32)), device="cuda").to(tdtype if k in low else torch.float32)
          .requires_grad_() for k, v in jx.items()}
    tseq = torch.tensor(seq_idx, device="cuda") if packed else None
    tout = ssd_combined.mamba_chunk_scan_combined(**tx, chunk_size=chunk, seq_idx=tseq, **options)
    ty, tlast = tout if states else (tout, None)
    if states:
        torch.autograd.backward([ty, tlast], [torch.tensor(dout, device="cuda").to(ty.dtype),
                                              torch.tensor(dlast, device="cuda")])
    else:
        ty.backward(torch.tensor(dout, device="cuda").to(ty.dtype))

    tol = 2e-2 if dtype == jnp.bfloat16 else 2e-3
    finals = [("final_states", last, tlast)] if states else []
    for label, got, want in [("y", y, ty), *finals] + [(f"d{k}", gr, tx[k].grad)
                                                       for k, gr in zip(names, grads, strict=True)]:
        want = want.detach().float().cpu().numpy()
        got = np.asarray(got.astype(jnp.float32))
        scale = max(np.abs(want).max(), 1e-6)
        assert np.abs(got - want).max() <= tol * scale, (label, np.abs(got - want).max(), scale)


@pytest.mark.parametrize("name", list(SHAPES))
def test_varlen_states_match_mamba_ssm(name):
    """``return_varlen_states`` (batch 1, ``cu_seqlens`` with the ``seq_idx`` it bounds): the output and each
    sequence's final state against mamba-ssm's (its ``chunk_state_varlen`` kernel launched by Triton)."""
    torch, ssd_combined = MAMBA
    from ports.mamba_ssd import mamba_chunk_scan_combined

    _, seqlen, h, p, g, n, chunk, dtype = SHAPES[name]
    rng = np.random.default_rng(1)
    f = lambda *shape, scale=1.0: (scale * rng.standard_normal(shape)).astype(np.float32)  # noqa: E731
    arrays = {"x": f(1, seqlen, h, p), "dt": f(1, seqlen, h, scale=0.5), "A": -rng.uniform(0.5, 4, h).astype(
        np.float32), "B": f(1, seqlen, g, n, scale=0.3), "C": f(1, seqlen, g, n, scale=0.3), "D": f(h)}
    low = {"x", "B", "C"}
    bounds = np.array([0, chunk // 3, chunk, 2 * chunk + 5, seqlen - 7, seqlen], np.int32)
    seq_idx = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))[None].astype(np.int32)
    jx = {k: jnp.asarray(v, dtype if k in low else jnp.float32) for k, v in arrays.items()}
    y, varlen = mamba_chunk_scan_combined(**jx, chunk_size=chunk, seq_idx=seq_idx, cu_seqlens=bounds,
                                          dt_softplus=True, return_varlen_states=True)
    tdtype = torch.bfloat16 if dtype == jnp.bfloat16 else torch.float32
    tx = {k: torch.tensor(v, device="cuda").to(tdtype if k in low else torch.float32) for k, v in arrays.items()}
    ty, tvarlen = ssd_combined.mamba_chunk_scan_combined(
        **tx, chunk_size=chunk, seq_idx=torch.tensor(seq_idx, device="cuda"),
        cu_seqlens=torch.tensor(bounds, device="cuda"), dt_softplus=True, return_varlen_states=True)
    tol = 2e-2 if dtype == jnp.bfloat16 else 2e-3
    for label, got, want in (("y", y, ty), ("varlen_states", varlen, tvarlen)):
        want = want.detach().float().cpu().numpy()
        got = np.asarray(got.astype(jnp.float32))
        assert got.shape == want.shape, (label, got.shape, want.shape)
        assert np.abs(got - want).max() <= tol * max(np.abs(want).max(), 1e-6), (label, np.abs(got - want).max())
