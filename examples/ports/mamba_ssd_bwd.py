# Launchers ported from mamba-ssm 2.3.2.post1: Apache-2.0, Copyright (c) 2024, Tri Dao, Albert Gu.
# The licence's text: LICENSE (Apache-2.0); the notice: THIRD_PARTY_NOTICES.md.
"""mamba-ssm's SSD backward launchers on JAX, those of ``ssd_chunk_state.py``, ``ssd_state_passing.py`` and
``ssd_bmm.py`` (``mamba_ssd_scan_bwd.py`` has ``ssd_chunk_scan.py``'s and ``ssd_combined.py``'s): each function
below ports the mamba-ssm function of the same name; the kernels are loaded from mamba-ssm's source
(:mod:`mamba_source`).

Where they differ from mamba-ssm's, besides what ``mamba_ssd_fwd.py`` lists (handles, ``tritonplug.empty``,
no ``cu_seqlens``, no ``.contiguous()``):

* the non-deterministic path only (``DETERMINISTIC_REDUCTION=False``; ``tl.atomic_add`` into buffers the
  kernels' ``pre_hook=init_to_zero([...])`` zero): ``alloc_tile_workspace`` / ``finalize_tile_workspace`` and
  the ``if deterministic`` branches are gone;
* buffers with one slot per row block of the minimum block size, of which the launcher sums the first
  ``best_config``'s blocks (``dD``, ``ddA_chunk_cumsum``, the stable ``ddA_cumsum``), are ``tritonplug.zeros``
  and summed whole: the blocks the chosen config does not write are zero, so the sum is the same without
  asking which config was chosen (JAX picks it when the program runs, after the launcher has returned);
* the SM count (``torch.cuda.get_device_properties``) is JAX's device's ``core_count`` (1 off the GPU);
* in-place updates (``ddA_cumsum_prev[..., -1] += ...``, ``torch.cumsum(..., out=)``, ``ddA += ...``) are
  ``jnp`` expressions; ``dx`` / ``ddt`` / ``dB`` / ``dC`` given by the caller (``dx=``, ``out=``) are fresh outputs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import triton

import tritonplug

from .mamba_source import launchable
from .mamba_ssd_fwd import AUTOTUNE, _bmm, _chunk_state, _state_passing, dot_dtype_of

_chunk_cumsum_bwd_kernel = launchable(_chunk_state._chunk_cumsum_bwd_kernel)
_chunk_state_bwd_db_kernel = launchable(_chunk_state._chunk_state_bwd_db_kernel, wide=True)
_state_passing_bwd_kernel = launchable(_state_passing._state_passing_bwd_kernel)
_bmm_chunk_bwd_kernel = launchable(_bmm._bmm_chunk_bwd_kernel)


def _sm_count():
    return getattr(jax.devices()[0], "core_count", 1) if jax.default_backend() == "gpu" else 1


def _nheads_per_program(batch, nchunks, nheads, ngroups):
    """mamba-ssm's split of a group's heads over programs (``_chunk_state_bwd_db``, ``_chunk_scan_bwd_dC`` …)."""
    nheads_ngroups_ratio = nheads // ngroups
    nheads_per_program = max(min(math.ceil(batch * nchunks * nheads / _sm_count()), nheads_ngroups_ratio), 1)
    return nheads_per_program, triton.cdiv(nheads_ngroups_ratio, nheads_per_program)


@tritonplug.torch_launcher
def _chunk_cumsum_bwd(ddA, ddt_out, dt, A, dt_bias=None, dt_softplus=False, dt_limit=(0.0, float("inf"))):
    """Ports ``ssd_chunk_state._chunk_cumsum_bwd``: ddt, dA and ddt_bias from the gradient of dA_cumsum and dt'."""
    batch, seqlen, nheads = dt.shape
    _, _, nchunks, chunk_size = ddA.shape
    assert ddA.shape == (batch, nheads, nchunks, chunk_size)
    assert ddt_out.shape == (batch, nheads, nchunks, chunk_size)
    assert A.shape == (nheads,)
    ddt_bias = tritonplug.empty_like(dt_bias, dtype=jnp.float32) if dt_bias is not None else None
    ddt = tritonplug.empty_like(dt)
    dA = tritonplug.empty_like(A, dtype=jnp.float32)
    grid_chunk_cs = lambda META: (batch, nchunks, triton.cdiv(nheads, META['BLOCK_SIZE_H']))  # noqa: E731
    _chunk_cumsum_bwd_kernel[grid_chunk_cs](
        ddA, ddt_out, dt, A, dt_bias, ddt, dA, ddt_bias,
        batch, seqlen, nheads, chunk_size,
        dt_limit[0], dt_limit[1],
        ddA.stride(0), ddA.stride(2), ddA.stride(1), ddA.stride(3),
        ddt_out.stride(0), ddt_out.stride(2), ddt_out.stride(1), ddt_out.stride(3),
        dt.stride(0), dt.stride(1), dt.stride(2),
        A.stride(0),
        dt_bias.stride(0) if dt_bias is not None else 0,
        ddt.stride(0), ddt.stride(1), ddt.stride(2),
        0, 0, dA.stride(-1),
        0, 0, (ddt_bias.stride(-1) if ddt_bias is not None else 0),
        dt_softplus,
        HAS_DT_BIAS=dt_bias is not None,
        BLOCK_SIZE_CHUNK=triton.next_power_of_2(chunk_size),
        DETERMINISTIC_REDUCTION=False, autotune=AUTOTUNE,
    )
    return ddt, dA, ddt_bias


@tritonplug.torch_launcher
def _chunk_state_bwd_db(x, dt, dA_cumsum, dstates, seq_idx=None, B=None, ngroups=1):
    """Ports ``ssd_chunk_state._chunk_state_bwd_db``: dB through the chunk states (and, given B, its ddA_cumsum)."""
    batch, seqlen, nheads, headdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen)
    dstate = dstates.shape[-1]
    assert dt.shape == (batch, nheads, nchunks, chunk_size)
    assert dA_cumsum.shape == dt.shape
    assert dstates.shape == (batch, nchunks, nheads, headdim, dstate)
    if B is not None:
        assert B.shape == (batch, seqlen, ngroups, dstate)
        B_strides = (B.stride(0), B.stride(1), B.stride(2), B.stride(3))
        # Use torch.empty since the Triton kernel will call init_to_zero
        ddA_cumsum = tritonplug.empty(batch, nheads, nchunks, chunk_size, dtype=jnp.float32)
        ddA_cumsum_strides = (ddA_cumsum.stride(0), ddA_cumsum.stride(2), ddA_cumsum.stride(1), ddA_cumsum.stride(3))
    else:
        B_strides = (0, 0, 0, 0)
        ddA_cumsum = None
        ddA_cumsum_strides = (0, 0, 0, 0)
    nheads_per_program, nsplits = _nheads_per_program(batch, nchunks, nheads, ngroups)
    dB = tritonplug.empty(batch, seqlen, nsplits, ngroups, dstate, dtype=jnp.float32)
    grid_db = lambda META: (triton.cdiv(chunk_size, META['BLOCK_SIZE_M']) * triton.cdiv(dstate, META['BLOCK_SIZE_N']),  # noqa: E731
                            batch * nchunks, nsplits * ngroups)
    _chunk_state_bwd_db_kernel[grid_db](
        x, dstates, B, dt, dA_cumsum, seq_idx, dB, ddA_cumsum,
        chunk_size, dstate, headdim,
        batch, seqlen, nheads, nheads_per_program, ngroups,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        dstates.stride(0), dstates.stride(1), dstates.stride(2), dstates.stride(3), dstates.stride(4),
        *B_strides,
        dt.stride(0), dt.stride(2), dt.stride(1), dt.stride(3),
        dA_cumsum.stride(0), dA_cumsum.stride(2), dA_cumsum.stride(1), dA_cumsum.stride(3),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        dB.stride(0), dB.stride(1), dB.stride(2), dB.stride(3), dB.stride(4),
        *ddA_cumsum_strides, 0,
        HAS_DDA_CS=ddA_cumsum is not None,
        HAS_SEQ_IDX=seq_idx is not None,
        DETERMINISTIC_REDUCTION=False,
        BLOCK_SIZE_K=max(triton.next_power_of_2(headdim), 16), autotune=AUTOTUNE,
    )
    dB = jnp.sum(dB[...], axis=2)
    if ddA_cumsum is not None:
        # The first element of ddA_cumsum is always zero (mamba-ssm's comment): cumsum over all of them.
        ddA_cumsum = jnp.cumsum(ddA_cumsum[...], axis=-1)
    return dB if B is None else (dB, ddA_cumsum)


@tritonplug.torch_launcher
def _state_passing_bwd(states, dA_chunk_cumsum, dout, dfinal_states=None, seq_idx=None, has_initial_states=None,
                       dstates_dtype=None, states_dtype=None, chunk_size=None):
    """Ports ``ssd_state_passing._state_passing_bwd``: the gradient of each chunk's state, of
    ``dA_cumsum``'s last entries and of the initial states (``None`` without them), and the states in
    ``states_dtype``; ``states[:, 0]`` holds the initial states."""
    batch, nchunks, nheads, dim = states.shape
    assert dA_chunk_cumsum.shape == (batch, nheads, nchunks)
    assert dout.shape == (batch, nchunks, nheads, dim)
    if seq_idx is not None:
        assert chunk_size is not None
        seqlen = seq_idx.shape[-1]
        assert seq_idx.shape == (batch, seqlen)
    if dfinal_states is not None:
        assert dfinal_states.shape == (batch, nheads, dim)
    dstates = tritonplug.empty_like(dout, dtype=dstates_dtype if dstates_dtype is not None else dout.dtype)
    if states_dtype is not None and states_dtype != states.dtype:
        states_converted = tritonplug.empty_like(states, dtype=dstates_dtype if dstates_dtype is not None
                                                 else dout.dtype)
        assert states_converted.stride() == states.stride()
    else:
        states_converted = None
    dinitstates = tritonplug.empty(batch, nheads, dim, dtype=dstates.dtype) if has_initial_states else None
    BLOCK_SIZE_min = 64
    n_blocks = (dim + BLOCK_SIZE_min - 1) // BLOCK_SIZE_min
    ddA_chunk_cumsum = tritonplug.zeros(batch, nheads, nchunks, n_blocks, dtype=jnp.float32)
    grid = lambda META: (triton.cdiv(dim, META['BLOCK_SIZE']), batch, nheads)  # noqa: E731
    _state_passing_bwd_kernel[grid](
        dout, states, dA_chunk_cumsum, dfinal_states, seq_idx,
        dstates, ddA_chunk_cumsum, dinitstates, states_converted,
        dim, nchunks, seqlen if seq_idx is not None else 0, chunk_size if seq_idx is not None else 0,
        dout.stride(0), dout.stride(1), dout.stride(2), dout.stride(3),
        states.stride(0), states.stride(1), states.stride(2), states.stride(3),
        dA_chunk_cumsum.stride(0), dA_chunk_cumsum.stride(2), dA_chunk_cumsum.stride(1),
        *((dfinal_states.stride(0), dfinal_states.stride(1), dfinal_states.stride(2))
          if dfinal_states is not None else (0, 0, 0)),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        dstates.stride(0), dstates.stride(1), dstates.stride(2), dstates.stride(3),
        ddA_chunk_cumsum.stride(0), ddA_chunk_cumsum.stride(2), ddA_chunk_cumsum.stride(1),
        *((dinitstates.stride(0), dinitstates.stride(1), dinitstates.stride(2))
          if dinitstates is not None else (0, 0, 0)),
        CONVERT_STATES=states_converted is not None,
        HAS_DFINAL_STATES=dfinal_states is not None,
        HAS_DINITSTATES=dinitstates is not None,
        HAS_SEQ_IDX=seq_idx is not None, autotune=AUTOTUNE,
    )
    ddA_chunk_cumsum = jnp.sum(ddA_chunk_cumsum[...], axis=-1).astype(dA_chunk_cumsum.dtype)
    if states_dtype is not None and states_dtype == states.dtype:
        states_converted = states
    return ((dstates, ddA_chunk_cumsum, dinitstates) if states_dtype is None
            else (dstates, ddA_chunk_cumsum, dinitstates, states_converted))


@tritonplug.torch_launcher
def _bmm_chunk_bwd(a, dout, residual=None):
    """Ports ``ssd_bmm._bmm_chunk_bwd`` (with groups): ``dout @ a`` within each chunk, plus ``residual``."""
    batch, seqlen, ngroups, k = a.shape
    nchunks, chunk_size = dout.shape[1], dout.shape[-1]
    if residual is not None:
        assert residual.shape == (batch, seqlen, ngroups, k)
    out = tritonplug.empty_like(a)
    dot_dtype = dot_dtype_of(a, dout)
    grid = lambda META: (triton.cdiv(chunk_size, META['BLOCK_SIZE_M']) * triton.cdiv(k, META['BLOCK_SIZE_N']),  # noqa: E731
                         batch, nchunks * ngroups)
    residual_strides = ((residual.stride(0), residual.stride(1), residual.stride(2), residual.stride(-1))
                        if residual is not None else (0, 0, 0, 0))
    _bmm_chunk_bwd_kernel[grid](
        a, dout, out, residual,
        seqlen, chunk_size, k, ngroups,
        a.stride(0), a.stride(1), a.stride(2), a.stride(-1),
        dout.stride(0), dout.stride(1), dout.stride(2), dout.stride(-2), dout.stride(-1),
        out.stride(0), out.stride(1), out.stride(2), out.stride(-1),
        residual_strides[0], residual_strides[1], residual_strides[2], residual_strides[3],
        dot_dtype,
        HAS_RESIDUAL=residual is not None, autotune=AUTOTUNE,
    )
    return out
