# Launchers ported from mamba-ssm 2.3.2.post1: Apache-2.0, Copyright (c) 2024, Tri Dao, Albert Gu.
# The licence's text: LICENSE (Apache-2.0); the notice: THIRD_PARTY_NOTICES.md.
"""mamba-ssm's SSD backward launchers on JAX, those of ``ssd_chunk_scan.py`` and ``ssd_combined.py``'s
``_chunk_scan_chunk_state_bwd_dx``: each function below ports the mamba-ssm function of the same name. How they
differ from mamba-ssm's is said in ``mamba_ssd_fwd.py`` and ``mamba_ssd_bwd.py``'s docstrings (the same
changes, nothing else).
"""

from __future__ import annotations

import jax.numpy as jnp
import triton

import tritonplug

from .mamba_source import kernels, launchable
from .mamba_ssd_bwd import _nheads_per_program
from .mamba_ssd_fwd import AUTOTUNE, _chunk_scan

_combined = kernels("ssd_combined")
TRITON_22 = _combined.TRITON_22
_chunk_scan_bwd_dz_kernel = launchable(_chunk_scan._chunk_scan_bwd_dz_kernel)
_chunk_scan_bwd_dstates_kernel = launchable(_chunk_scan._chunk_scan_bwd_dstates_kernel, wide=True)
_chunk_scan_bwd_dc_kernel = launchable(_chunk_scan._chunk_scan_bwd_dc_kernel, wide=True)
_chunk_scan_bwd_dcb_kernel = launchable(_chunk_scan._chunk_scan_bwd_dcb_kernel, wide=True)
_chunk_scan_bwd_ddAcs_stable_kernel = launchable(_chunk_scan._chunk_scan_bwd_ddAcs_stable_kernel, wide=True)
_chunk_scan_chunk_state_bwd_dx_kernel = launchable(_combined._chunk_scan_chunk_state_bwd_dx_kernel, wide=True)


@tritonplug.torch_launcher
def _chunk_scan_bwd_dz(x, z, out, dout, chunk_size, D=None):
    """Ports ``ssd_chunk_scan._chunk_scan_bwd_dz`` with ``has_ddAcs=False``, ``recompute_output=False`` (as the
    combined backward calls it): dz, the gradient of the ungated output, and dD recomputed in fp32."""
    batch, seqlen, nheads, headdim = x.shape
    assert z.shape == x.shape
    assert out.shape == x.shape
    assert dout.shape == out.shape
    nchunks = triton.cdiv(seqlen, chunk_size)
    if D is not None:
        assert D.shape == (nheads, headdim) or D.shape == (nheads,)
        BLOCK_SIZE_min = 32
        dD = tritonplug.zeros(triton.cdiv(chunk_size, BLOCK_SIZE_min), batch, nchunks, nheads,
                              headdim if D.dim() == 2 else 1, dtype=jnp.float32)
    else:
        dD = None
    dz = tritonplug.empty_like(z)
    dout_x = tritonplug.empty_like(dout)
    dD_strides = ((dD.stride(0), dD.stride(1), dD.stride(2), dD.stride(3), dD.stride(4))
                  if D is not None else (0, 0, 0, 0, 0))
    grid_dz = lambda META: (triton.cdiv(chunk_size, META['BLOCK_SIZE_M']), batch * nchunks, nheads)  # noqa: E731
    _chunk_scan_bwd_dz_kernel[grid_dz](
        dout, out, z, x, D, None,
        dz, dout_x, dD, None,
        chunk_size, headdim,
        batch, seqlen,
        dout.stride(0), dout.stride(1), dout.stride(2), dout.stride(3),
        out.stride(0), out.stride(1), out.stride(2), out.stride(3),
        z.stride(0), z.stride(1), z.stride(2), z.stride(3),
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        D.stride(0) if D is not None else 0,
        0, 0, 0, 0,
        dz.stride(0), dz.stride(1), dz.stride(2), dz.stride(3),
        dout_x.stride(0), dout_x.stride(1), dout_x.stride(2), dout_x.stride(3),
        dD_strides[1], dD_strides[2], dD_strides[3], dD_strides[0], dD_strides[4],
        0, 0, 0, 0,
        D is not None,
        D.dim() == 2 if D is not None else True,
        False,
        BLOCK_SIZE_N=max(triton.next_power_of_2(headdim), 16),
        RECOMPUTE_OUTPUT=False, autotune=AUTOTUNE,
    )
    if D is not None:
        dD = jnp.sum(dD[...], axis=(0, 1, 2)).astype(D.dtype)
        if D.dim() == 1:
            dD = dD.reshape(nheads)  # rearrange(dD, "h 1 -> h")
    return dz, dout_x, dD


@tritonplug.torch_launcher
def _chunk_scan_bwd_dstates(C, dA_cumsum, dout, seq_idx=None, dtype=None):
    """Ports ``ssd_chunk_scan._chunk_scan_bwd_dstates``: the gradient of the state entering each chunk."""
    batch, seqlen, nheads, headdim = dout.shape
    _, _, nchunks, chunk_size = dA_cumsum.shape
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen)
    _, _, ngroups, dstate = C.shape
    assert nheads % ngroups == 0
    assert C.shape == (batch, seqlen, ngroups, dstate)
    assert dA_cumsum.shape == (batch, nheads, nchunks, chunk_size)
    dtype = C.dtype if dtype is None else dtype
    dprev_states = tritonplug.empty(batch, nchunks, nheads, headdim, dstate, dtype=dtype)
    grid_dstates = lambda META: (triton.cdiv(headdim, META['BLOCK_SIZE_M']) * triton.cdiv(dstate, META['BLOCK_SIZE_N']),  # noqa: E731
                                 batch * nchunks, nheads)
    _chunk_scan_bwd_dstates_kernel[grid_dstates](
        dout, C, dprev_states, dA_cumsum, seq_idx,
        headdim, dstate, chunk_size,
        batch, seqlen, nchunks, nheads // ngroups,
        dout.stride(0), dout.stride(1), dout.stride(2), dout.stride(3),
        C.stride(0), C.stride(1), C.stride(2), C.stride(3),
        dprev_states.stride(0), dprev_states.stride(1), dprev_states.stride(2), dprev_states.stride(3),
        dprev_states.stride(4),
        dA_cumsum.stride(0), dA_cumsum.stride(2), dA_cumsum.stride(1), dA_cumsum.stride(3),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        HAS_SEQ_IDX=seq_idx is not None, autotune=AUTOTUNE,
    )
    return dprev_states


@tritonplug.torch_launcher
def _chunk_scan_bwd_dC(prev_states, dA_cumsum, dout, seq_idx=None, C=None, ngroups=1):
    """Ports ``ssd_chunk_scan._chunk_scan_bwd_dC``: dC through the states (and, given C, ddA_cumsum_prev)."""
    batch, nchunks, nheads, headdim, dstate = prev_states.shape
    _, seqlen, _, _ = dout.shape
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen)
    _, _, _, chunk_size = dA_cumsum.shape
    assert prev_states.shape == (batch, nchunks, nheads, headdim, dstate)
    assert dA_cumsum.shape == (batch, nheads, nchunks, chunk_size)
    assert dout.shape == (batch, seqlen, nheads, headdim)
    if C is not None:
        assert C.shape == (batch, seqlen, ngroups, dstate)
        C_strides = (C.stride(0), C.stride(1), C.stride(2), C.stride(3))
        ddA_cumsum_prev = tritonplug.empty(batch, nheads, nchunks, chunk_size, dtype=jnp.float32)
        ddA_cumsum_prev_strides = (ddA_cumsum_prev.stride(0), ddA_cumsum_prev.stride(2), ddA_cumsum_prev.stride(1),
                                   ddA_cumsum_prev.stride(3))
    else:
        C_strides = (0, 0, 0, 0)
        ddA_cumsum_prev = None
        ddA_cumsum_prev_strides = (0, 0, 0, 0)
    nheads_per_program, nsplits = _nheads_per_program(batch, nchunks, nheads, ngroups)
    dC = tritonplug.empty(batch, seqlen, nsplits, ngroups, dstate, dtype=jnp.float32)
    grid_dc = lambda META: (triton.cdiv(chunk_size, META['BLOCK_SIZE_M']) * triton.cdiv(dstate, META['BLOCK_SIZE_N']),  # noqa: E731
                            batch * nchunks, nsplits * ngroups)
    _chunk_scan_bwd_dc_kernel[grid_dc](
        dout, prev_states, C, dA_cumsum, seq_idx, dC, ddA_cumsum_prev,
        chunk_size, dstate, headdim,
        batch, seqlen, nheads, nheads_per_program, ngroups,
        dout.stride(0), dout.stride(1), dout.stride(2), dout.stride(3),
        prev_states.stride(0), prev_states.stride(1), prev_states.stride(2), prev_states.stride(3),
        prev_states.stride(4),
        *C_strides,
        dA_cumsum.stride(0), dA_cumsum.stride(2), dA_cumsum.stride(1), dA_cumsum.stride(3),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        dC.stride(0), dC.stride(1), dC.stride(2), dC.stride(3), dC.stride(4),
        *ddA_cumsum_prev_strides, 0,
        HAS_DDA_CS=ddA_cumsum_prev is not None,
        HAS_SEQ_IDX=seq_idx is not None,
        DETERMINISTIC_REDUCTION=False,
        BLOCK_SIZE_K=max(triton.next_power_of_2(headdim), 16), autotune=AUTOTUNE,
    )
    dC = jnp.sum(dC[...], axis=2)
    return dC if C is None else (dC, ddA_cumsum_prev)


@tritonplug.torch_launcher
def _chunk_scan_bwd_dcb(x, dt, dA_cumsum, dout, seq_idx=None, ngroups=1):
    """Ports ``ssd_chunk_scan._chunk_scan_bwd_dcb`` without ``CB`` (as the combined backward calls it): the
    gradient of ``C_i · B_j`` within each chunk."""
    batch, seqlen, nheads, headdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen)
    assert dt.shape == (batch, nheads, nchunks, chunk_size)
    assert dA_cumsum.shape == dt.shape
    assert dout.shape == x.shape
    nheads_per_program, nsplits = _nheads_per_program(batch, nchunks, nheads, ngroups)
    dcb = tritonplug.empty(batch, nchunks, nsplits, ngroups, chunk_size, chunk_size, dtype=jnp.float32)
    grid_dcb = lambda META: (  # noqa: E731
        triton.cdiv(chunk_size, META['BLOCK_SIZE_M']) * triton.cdiv(chunk_size, META['BLOCK_SIZE_N']),
        batch * nchunks, nsplits * ngroups)
    _chunk_scan_bwd_dcb_kernel[grid_dcb](
        x, dout, None, dt, dA_cumsum, seq_idx, dcb, None,
        chunk_size, headdim,
        batch, seqlen, nheads, nheads_per_program, ngroups,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        dout.stride(0), dout.stride(1), dout.stride(2), dout.stride(3),
        0, 0, 0, 0, 0,
        dt.stride(0), dt.stride(2), dt.stride(1), dt.stride(3),
        dA_cumsum.stride(0), dA_cumsum.stride(2), dA_cumsum.stride(1), dA_cumsum.stride(3),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        dcb.stride(0), dcb.stride(1), dcb.stride(2), dcb.stride(3), dcb.stride(4), dcb.stride(5),
        0, 0, 0, 0, 0,
        HAS_DDA_CS=False,
        HAS_SEQ_IDX=seq_idx is not None,
        BLOCK_SIZE_K=max(triton.next_power_of_2(headdim), 16), autotune=AUTOTUNE,
    )
    return jnp.sum(dcb[...], axis=2)


@tritonplug.torch_launcher
def _chunk_scan_bwd_ddAcs_stable(x, dt, dA_cumsum, dout, cb):
    """Ports ``ssd_chunk_scan._chunk_scan_bwd_ddAcs_stable``: the in-chunk part of the gradient of dA_cumsum."""
    batch, seqlen, nheads, headdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    assert dt.shape == (batch, nheads, nchunks, chunk_size)
    assert dout.shape == x.shape
    assert dA_cumsum.shape == dt.shape
    ngroups = cb.shape[2]
    assert nheads % ngroups == 0
    assert cb.shape == (batch, nchunks, ngroups, chunk_size, chunk_size)
    BLOCK_SIZE_M_min = 32
    ddA_cumsum = tritonplug.zeros(batch, nheads, nchunks, triton.cdiv(chunk_size, BLOCK_SIZE_M_min), chunk_size,
                                  dtype=jnp.float32)
    grid_ddtcs = lambda META: (triton.cdiv(chunk_size, META['BLOCK_SIZE_M']), batch * nchunks, nheads)  # noqa: E731
    _chunk_scan_bwd_ddAcs_stable_kernel[grid_ddtcs](
        x, dout, dt, dA_cumsum, cb, ddA_cumsum,
        chunk_size, headdim,
        batch, seqlen, nheads // ngroups,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        dout.stride(0), dout.stride(1), dout.stride(2), dout.stride(3),
        dt.stride(0), dt.stride(2), dt.stride(1), dt.stride(3),
        dA_cumsum.stride(0), dA_cumsum.stride(2), dA_cumsum.stride(1), dA_cumsum.stride(3),
        cb.stride(0), cb.stride(1), cb.stride(2), cb.stride(3), cb.stride(4),
        ddA_cumsum.stride(0), ddA_cumsum.stride(2), ddA_cumsum.stride(1), ddA_cumsum.stride(3),
        ddA_cumsum.stride(4),
        BLOCK_SIZE_K=max(triton.next_power_of_2(headdim), 16), autotune=AUTOTUNE,
    )
    return jnp.sum(ddA_cumsum[...], axis=3)


@tritonplug.torch_launcher
def _chunk_scan_chunk_state_bwd_dx(x, dt, dA_cumsum, B, CB, dout, dstates, D=None, seq_idx=None):
    """Ports ``ssd_combined._chunk_scan_chunk_state_bwd_dx``: dx, ddt' and dD through both the in-chunk scan
    and the chunk states."""
    batch, seqlen, nheads, headdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen)
    _, _, ngroups, dstate = B.shape
    assert nheads % ngroups == 0
    assert B.shape == (batch, seqlen, ngroups, dstate)
    assert CB.shape == (batch, nchunks, ngroups, chunk_size, chunk_size)
    assert dt.shape == (batch, nheads, nchunks, chunk_size)
    assert dA_cumsum.shape == dt.shape
    assert dout.shape == x.shape
    assert dstates.shape == (batch, nchunks, nheads, headdim, dstate)
    if D is not None:
        assert D.shape == (nheads, headdim) or D.shape == (nheads,)
        BLOCK_SIZE_min = 32
        pid_m_tiles = triton.cdiv(chunk_size, BLOCK_SIZE_min)
        dD_hdim = headdim if D.dim() == 2 else 1
        dD = tritonplug.zeros(pid_m_tiles, batch, nchunks, nheads, dD_hdim, dtype=jnp.float32)
        dD_strides = (dD.stride(0), dD.stride(1), dD.stride(2), dD.stride(3), dD.stride(4))
    else:
        dD = None
        dD_strides = (0, 0, 0, 0, 0)
    dx = tritonplug.empty_like(x)
    ddt = tritonplug.empty(batch, nheads, nchunks, chunk_size, dtype=jnp.float32)
    grid_dx = lambda META: (triton.cdiv(chunk_size, META['BLOCK_SIZE_M']) * triton.cdiv(headdim, META['BLOCK_SIZE_N']),  # noqa: E731
                            batch * nchunks, nheads)
    _chunk_scan_chunk_state_bwd_dx_kernel[grid_dx](
        x, CB, dout, dt, dA_cumsum, seq_idx, D, B, dstates, dx, ddt, dD,
        chunk_size, headdim, dstate,
        batch, seqlen, nheads // ngroups,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        CB.stride(0), CB.stride(1), CB.stride(2), CB.stride(-1), CB.stride(-2),
        dout.stride(0), dout.stride(1), dout.stride(2), dout.stride(3),
        dt.stride(0), dt.stride(2), dt.stride(1), dt.stride(3),
        dA_cumsum.stride(0), dA_cumsum.stride(2), dA_cumsum.stride(1), dA_cumsum.stride(3),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        D.stride(0) if D is not None else 0,
        B.stride(0), B.stride(1), B.stride(2), B.stride(3),
        dstates.stride(0), dstates.stride(1), dstates.stride(2), dstates.stride(3), dstates.stride(4),
        dx.stride(0), dx.stride(1), dx.stride(2), dx.stride(3),
        ddt.stride(0), ddt.stride(2), ddt.stride(1), ddt.stride(3), 0,
        dD_strides[1], dD_strides[2], dD_strides[3], dD_strides[0], dD_strides[4],
        D is not None,
        D.dim() == 2 if D is not None else True,
        HAS_SEQ_IDX=seq_idx is not None,
        BLOCK_SIZE_DSTATE=max(triton.next_power_of_2(dstate), 16),
        IS_TRITON_22=TRITON_22,
        DETERMINISTIC_REDUCTION=False, autotune=AUTOTUNE,
    )
    if D is not None:
        dD = jnp.sum(dD[...], axis=(0, 1, 2))
        if D.dim() == 1:
            dD = jnp.sum(dD, axis=-1)
        dD = dD.astype(D.dtype)
    return dx, ddt, dD
