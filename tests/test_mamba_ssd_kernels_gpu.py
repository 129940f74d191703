"""Each of the SSD port's launchers (``examples/ports/mamba_ssd_*.py``: 15 mamba-ssm kernels) against mamba-ssm's own
launcher of the same kernel on torch tensors (Triton's own launch), on a GPU, one kernel at a time.

The chain follows ``ssd_combined``'s forward and backward. Every step runs mamba-ssm's function on torch tensors and
ours on the same values as JAX arrays, compares every output, and hands mamba-ssm's outputs to the next step: each
kernel is checked on the inputs it meets in training, and a difference is pinned to the kernel that made it.
``test_mamba_ssd_gpu.py`` checks the whole op. Runs where JAX sees a CUDA device and torch, einops and mamba-ssm's
source import."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from test_mamba_ssd_gpu import MAMBA, REASON

pytestmark = [pytest.mark.cuda, requires_backend("cuda"), pytest.mark.skipif(MAMBA is None, reason=REASON)]

SHAPES = {  # b, l, h, p, g, n, chunk, dtype of x, B, C, z, dout
    "small-fp32-g2": (2, 200, 8, 32, 2, 32, 64, "float32"),
    "model-bf16": (1, 1024, 64, 64, 1, 128, 256, "bfloat16"),
}


class Chain:
    """Runs one step on both sides and compares (``tol`` of the largest magnitude, by the output's dtype)."""

    def __init__(self, torch):
        self.torch = torch
        self.checked: list[str] = []

    def to_jax(self, value):
        low = {self.torch.bfloat16: jnp.bfloat16, self.torch.float16: jnp.float16}
        if isinstance(value, self.torch.dtype):
            return low.get(value, jnp.dtype(str(value).removeprefix("torch.")))
        if not isinstance(value, self.torch.Tensor):
            return value
        dtype = low.get(value.dtype)
        array = jnp.asarray(value.detach().float().cpu().numpy() if dtype else value.detach().cpu().numpy())
        return array.astype(dtype) if dtype else array

    def __call__(self, label, theirs, ours, *args, theirs_kw=None, **kwargs):
        want = theirs(*args, **kwargs, **(theirs_kw or {}))
        got = ours(*[self.to_jax(a) for a in args], **{k: self.to_jax(v) for k, v in kwargs.items()})
        wants = [w for w in (want if isinstance(want, tuple) else (want,)) if w is not None]
        gots = [g for g in (got if isinstance(got, tuple) else (got,)) if g is not None]
        assert len(gots) == len(wants), (label, len(gots), len(wants))
        for i, (g, w) in enumerate(zip(gots, wants, strict=True)):
            assert g.shape == tuple(w.shape), (label, i, g.shape, tuple(w.shape))
            assert str(g.dtype) == str(w.dtype).removeprefix("torch."), (label, i, g.dtype, w.dtype)
            w32 = w.detach().float().cpu().numpy()
            g32 = np.asarray(g.astype(jnp.float32))
            tol = 2e-2 if w.dtype in (self.torch.bfloat16, self.torch.float16) else 2e-3
            scale = max(float(np.abs(w32).max()), 1e-6)
            assert np.isfinite(g32).all(), (label, i)
            assert np.abs(g32 - w32).max() <= tol * scale, (label, i, float(np.abs(g32 - w32).max()), scale)
        self.checked.append(label)
        return want


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_kernel_matches_mamba_ssm(name):
    torch, _ = MAMBA
    from mamba_ssm.ops.triton import ssd_bmm, ssd_chunk_scan, ssd_chunk_state, ssd_combined, ssd_state_passing
    from ports import mamba_ssd_bwd, mamba_ssd_fwd, mamba_ssd_scan_bwd

    b, seqlen, h, p, g, n, chunk, dtype = SHAPES[name]
    low = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rand = lambda *shape, scale=1.0, dt=torch.float32: (  # noqa: E731
        scale * torch.randn(*shape, generator=gen, device="cuda")).to(dt)
    x, z, dout = (rand(b, seqlen, h, p, dt=low) for _ in range(3))
    B, C = (rand(b, seqlen, g, n, scale=0.3, dt=low) for _ in range(2))
    dt_in, dt_bias, D = rand(b, seqlen, h, scale=0.5), rand(h, scale=0.5), rand(h)
    A = -torch.empty(h, device="cuda").uniform_(0.5, 4, generator=gen)
    limit = (0.0, float("inf"))
    step = Chain(torch)
    nt = lambda t: t.reshape(*t.shape[:-1], -1, n)  # noqa: E731  "... (p n) -> ... p n"
    pn = lambda t: t.reshape(*t.shape[:-2], -1)  # noqa: E731

    # forward (ssd_combined._mamba_chunk_scan_combined_fwd)
    dA_cumsum, dt = step("chunk_cumsum_fwd", ssd_chunk_state._chunk_cumsum_fwd, mamba_ssd_fwd._chunk_cumsum_fwd,
                         dt_in, A, chunk, dt_bias=dt_bias, dt_softplus=True, dt_limit=limit)
    states = step("chunk_state_fwd", ssd_chunk_state._chunk_state_fwd, mamba_ssd_fwd._chunk_state_fwd,
                  B, x, dt, dA_cumsum, states_in_fp32=True)
    states, _ = step("state_passing_fwd", ssd_state_passing._state_passing_fwd, mamba_ssd_fwd._state_passing_fwd,
                     pn(states), dA_cumsum[:, :, :, -1], chunk_size=chunk, out_dtype=C.dtype)
    states = nt(states)
    CB = step("bmm_chunk_fwd", ssd_bmm._bmm_chunk_fwd, mamba_ssd_fwd._bmm_chunk_fwd,
              C, B, chunk, output_dtype=torch.float32)
    out, _ = step("chunk_scan_fwd", ssd_chunk_scan._chunk_scan_fwd, mamba_ssd_fwd._chunk_scan_fwd,
                  CB, x, dt, dA_cumsum, C, states, D=D, z=z)

    # backward (ssd_combined._mamba_chunk_scan_combined_bwd), from the forward's values
    _, dout_x, _ = step("chunk_scan_bwd_dz", ssd_chunk_scan._chunk_scan_bwd_dz, mamba_ssd_scan_bwd._chunk_scan_bwd_dz,
                        x, z, out, dout, chunk_size=chunk, D=D, theirs_kw={"has_ddAcs": False})
    dstates = step("chunk_scan_bwd_dstates", ssd_chunk_scan._chunk_scan_bwd_dstates,
                   mamba_ssd_scan_bwd._chunk_scan_bwd_dstates, C, dA_cumsum, dout_x, dtype=states.dtype)
    dstates, ddA_chunk_cumsum, _, states = step(  # mamba-ssm's third output (the initial states' gradient) is None
        "state_passing_bwd", ssd_state_passing._state_passing_bwd, mamba_ssd_bwd._state_passing_bwd,
        pn(states), dA_cumsum[:, :, :, -1], pn(dstates), dstates_dtype=x.dtype, states_dtype=x.dtype, chunk_size=chunk)
    states, dstates = nt(states), nt(dstates)
    _, ddt, _ = step("chunk_scan_chunk_state_bwd_dx", ssd_combined._chunk_scan_chunk_state_bwd_dx,
                     mamba_ssd_scan_bwd._chunk_scan_chunk_state_bwd_dx, x, dt, dA_cumsum, B, CB, dout_x, dstates, D=D)
    step("chunk_state_bwd_db", ssd_chunk_state._chunk_state_bwd_db, mamba_ssd_bwd._chunk_state_bwd_db,
         x, dt, dA_cumsum, dstates, B=B, ngroups=g)
    step("chunk_scan_bwd_dC", ssd_chunk_scan._chunk_scan_bwd_dC, mamba_ssd_scan_bwd._chunk_scan_bwd_dC,
         states.to(x.dtype), dA_cumsum, dout_x, C=C, ngroups=g)
    dCB = step("chunk_scan_bwd_dcb", ssd_chunk_scan._chunk_scan_bwd_dcb, mamba_ssd_scan_bwd._chunk_scan_bwd_dcb,
               x, dt, dA_cumsum, dout_x, ngroups=g).to(CB.dtype)
    residual = rand(b, seqlen, g, n, dt=low)
    step("bmm_chunk_bwd", ssd_bmm._bmm_chunk_bwd, mamba_ssd_bwd._bmm_chunk_bwd, C, dCB, residual=residual)
    ddA = step("chunk_scan_bwd_ddAcs_stable", ssd_chunk_scan._chunk_scan_bwd_ddAcs_stable,
               mamba_ssd_scan_bwd._chunk_scan_bwd_ddAcs_stable, x, dt, dA_cumsum, dout_x, CB)
    step("chunk_cumsum_bwd", ssd_chunk_state._chunk_cumsum_bwd, mamba_ssd_bwd._chunk_cumsum_bwd,
         ddA + ddA_chunk_cumsum.mean(), ddt, dt_in, A, dt_bias=dt_bias, dt_softplus=True, dt_limit=limit)
    assert len(step.checked) == 15
