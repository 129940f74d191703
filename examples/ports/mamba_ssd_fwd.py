# Launchers ported from mamba-ssm 2.3.2.post1: Apache-2.0, Copyright (c) 2024, Tri Dao, Albert Gu.
# The licence's text: LICENSE (Apache-2.0); the notice: THIRD_PARTY_NOTICES.md.
"""mamba-ssm's SSD forward launchers on JAX (``mamba_ssm/ops/triton/ssd_*.py``): each function below ports the
mamba-ssm function of the same name line for line; its kernels are loaded from mamba-ssm's source
(:mod:`mamba_source`, never copied) and launched with ``tritonplug.launch``. ``mamba_ssd.py`` is the public op.

Where the launchers differ from mamba-ssm's (JAX requires it, or the port leaves a path out):

* ``@tritonplug.torch_launcher`` hands the bodies torch-like handles and returns arrays; ``torch.empty`` is
  ``tritonplug.empty``, ``torch.float32`` ``jnp.float32``; ``with torch.cuda.device(...)`` is gone (JAX places
  the call); einops' ``rearrange`` of ``(p n)`` is a reshape;
* ``cu_seqlens`` reaches only :func:`chunk_state_varlen` (as in mamba-ssm: it gives the varlen states, nothing else);
* the ``.contiguous()`` calls are gone: JAX arrays are row-major, the strides are always the contiguous ones;
* ``_mamba_chunk_scan_combined_fwd`` also returns what its backward would recompute (``ForwardResiduals``).
* with ``mamba_source.CONFIGS = "wide"`` (not the default) the matmul kernels are tuned over more configurations
  than mamba-ssm lists: its block shapes at more warps and pipeline stages, the kernels' code unchanged.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

import tritonplug

from .mamba_source import kernels, launchable

_chunk_state = kernels("ssd_chunk_state")
_state_passing = kernels("ssd_state_passing")
_bmm = kernels("ssd_bmm")
_chunk_scan = kernels("ssd_chunk_scan")
TRITON_22 = _chunk_scan.TRITON_22

#: Every launch of the port asks for ``autotune="first"`` (``triton_call``'s option, as ``examples/moe`` does):
#: the configuration a tuning record names (``tritonplug.tune``: ``bench/mamba2.py`` tunes each shape first),
#: else the first that survives pruning. Under ``"runtime"`` jaxlib would compile each of a dozen kernels'
#: configurations at the first lowering and time them all on the device: on an H200 the GPU test's model-shape
#: case did not finish within 200 s that way.
AUTOTUNE = "first"

_chunk_cumsum_fwd_kernel = launchable(_chunk_state._chunk_cumsum_fwd_kernel)
_chunk_state_fwd_kernel = launchable(_chunk_state._chunk_state_fwd_kernel, wide=True)
_state_passing_fwd_kernel = launchable(_state_passing._state_passing_fwd_kernel)
_bmm_chunk_fwd_kernel = launchable(_bmm._bmm_chunk_fwd_kernel)
_chunk_scan_fwd_kernel = launchable(_chunk_scan._chunk_scan_fwd_kernel, wide=True)
_chunk_state_varlen_kernel = launchable(_chunk_state._chunk_state_varlen_kernel)


@tritonplug.torch_launcher
def _chunk_cumsum_fwd(dt, A, chunk_size, dt_bias=None, dt_softplus=False, dt_limit=(0.0, float("inf"))):
    """Ports ``ssd_chunk_state._chunk_cumsum_fwd``: dt' (softplus, clamp) and its in-chunk cumsum times A."""
    batch, seqlen, nheads = dt.shape
    assert A.shape == (nheads,)
    if dt_bias is not None:
        assert dt_bias.shape == (nheads,)
    nchunks = triton.cdiv(seqlen, chunk_size)
    dt_out = tritonplug.empty(batch, nheads, nchunks, chunk_size, dtype=jnp.float32)
    dA_cumsum = tritonplug.empty(batch, nheads, nchunks, chunk_size, dtype=jnp.float32)
    grid_chunk_cs = lambda META: (batch, nchunks, triton.cdiv(nheads, META['BLOCK_SIZE_H']))  # noqa: E731
    _chunk_cumsum_fwd_kernel[grid_chunk_cs](
        dt, A, dt_bias, dt_out, dA_cumsum,
        batch, seqlen, nheads, chunk_size,
        dt_limit[0], dt_limit[1],
        dt.stride(0), dt.stride(1), dt.stride(2),
        A.stride(0),
        dt_bias.stride(0) if dt_bias is not None else 0,
        dt_out.stride(0), dt_out.stride(2), dt_out.stride(1), dt_out.stride(3),
        dA_cumsum.stride(0), dA_cumsum.stride(2), dA_cumsum.stride(1), dA_cumsum.stride(3),
        dt_softplus,
        HAS_DT_BIAS=dt_bias is not None,
        BLOCK_SIZE_CHUNK=triton.next_power_of_2(chunk_size), autotune=AUTOTUNE,
    )
    return dA_cumsum, dt_out


@tritonplug.torch_launcher
def _chunk_state_fwd(B, x, dt, dA_cumsum, seq_idx=None, states_in_fp32=True):
    """Ports ``ssd_chunk_state._chunk_state_fwd``: each chunk's final state from a zero state."""
    batch, seqlen, nheads, headdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    _, _, ngroups, dstate = B.shape
    assert nheads % ngroups == 0
    assert B.shape == (batch, seqlen, ngroups, dstate)
    assert dt.shape == (batch, nheads, nchunks, chunk_size)
    assert dA_cumsum.shape == dt.shape
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen)
    states_dtype = jnp.float32 if states_in_fp32 else B.dtype
    states = tritonplug.empty(batch, nchunks, nheads, headdim, dstate, dtype=states_dtype)
    grid = lambda META: (triton.cdiv(headdim, META['BLOCK_SIZE_M']) * triton.cdiv(dstate, META['BLOCK_SIZE_N']),  # noqa: E731
                         batch * nchunks, nheads)
    _chunk_state_fwd_kernel[grid](
        x, B, states, dt, dA_cumsum, seq_idx,
        headdim, dstate, chunk_size,
        batch, seqlen, nheads // ngroups,
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        B.stride(0), B.stride(1), B.stride(2), B.stride(-1),
        states.stride(0), states.stride(1), states.stride(2), states.stride(3), states.stride(4),
        dt.stride(0), dt.stride(2), dt.stride(1), dt.stride(3),
        dA_cumsum.stride(0), dA_cumsum.stride(2), dA_cumsum.stride(1), dA_cumsum.stride(3),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        HAS_SEQ_IDX=seq_idx is not None, autotune=AUTOTUNE,
    )
    return states


@tritonplug.torch_launcher
def _state_passing_fwd(states, dA_chunk_cumsum, initial_states=None, seq_idx=None, chunk_size=None, out_dtype=None):
    """Ports ``ssd_state_passing._state_passing_fwd``: the state entering each chunk (the
    first: ``initial_states``, else zeros), and the final state."""
    batch, nchunks, nheads, dim = states.shape
    assert dA_chunk_cumsum.shape == (batch, nheads, nchunks)
    if initial_states is not None:
        assert initial_states.shape == (batch, nheads, dim)
    if seq_idx is not None:
        assert chunk_size is not None
        seqlen = seq_idx.shape[-1]
        assert seq_idx.shape == (batch, seqlen)
    out_dtype = states.dtype if out_dtype is None else out_dtype
    out = tritonplug.empty(batch, nchunks, nheads, dim, dtype=out_dtype)
    final_states = tritonplug.empty(batch, nheads, dim, dtype=jnp.float32)
    grid = lambda META: (triton.cdiv(dim, META['BLOCK_SIZE']), batch, nheads)  # noqa: E731
    _state_passing_fwd_kernel[grid](
        states, out, final_states, dA_chunk_cumsum, initial_states, seq_idx,
        dim, nchunks, seqlen if seq_idx is not None else 0, chunk_size if seq_idx is not None else 0,
        states.stride(0), states.stride(1), states.stride(2), states.stride(3),
        out.stride(0), out.stride(1), out.stride(2), out.stride(3),
        final_states.stride(0), final_states.stride(1), final_states.stride(2),
        dA_chunk_cumsum.stride(0), dA_chunk_cumsum.stride(2), dA_chunk_cumsum.stride(1),
        *((initial_states.stride(0), initial_states.stride(1), initial_states.stride(2))
          if initial_states is not None else (0, 0, 0)),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        HAS_INITSTATES=initial_states is not None,
        HAS_SEQ_IDX=seq_idx is not None, autotune=AUTOTUNE,
    )
    return out, final_states


def dot_dtype_of(a, b):
    """mamba-ssm's ``dot_dtype`` choice of ``_bmm_chunk_fwd`` / ``_bmm_chunk_bwd``, over JAX dtypes."""
    dtypes = (a.dtype, b.dtype)
    return (tl.bfloat16 if jnp.bfloat16 in dtypes else (tl.float16 if jnp.float16 in dtypes else tl.float32))


@tritonplug.torch_launcher
def _bmm_chunk_fwd(a, b, chunk_size, seq_idx=None, causal=False, output_dtype=None):
    """Ports ``ssd_bmm._bmm_chunk_fwd`` (with groups): ``C_i · B_j`` within each chunk."""
    batch, seqlen, ngroups, k = a.shape
    assert b.shape == a.shape
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen)
    nchunks = triton.cdiv(seqlen, chunk_size)
    out_dtype = a.dtype if output_dtype is None else output_dtype
    out = tritonplug.empty(batch, nchunks, ngroups, chunk_size, chunk_size, dtype=out_dtype)
    dot_dtype = dot_dtype_of(a, b)
    grid = lambda META: (triton.cdiv(chunk_size, META['BLOCK_SIZE_M']) * triton.cdiv(chunk_size, META['BLOCK_SIZE_N']),  # noqa: E731
                         batch, nchunks * ngroups)
    _bmm_chunk_fwd_kernel[grid](
        a, b, out, seq_idx,
        seqlen, chunk_size, k, ngroups,
        a.stride(0), a.stride(1), a.stride(2), a.stride(-1),
        b.stride(0), b.stride(1), b.stride(2), b.stride(-1),
        out.stride(0), out.stride(1), out.stride(2), out.stride(-2), out.stride(-1),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        causal,
        dot_dtype,
        HAS_SEQ_IDX=seq_idx is not None, autotune=AUTOTUNE,
    )
    return out


@tritonplug.torch_launcher
def _chunk_scan_fwd(cb, x, dt, dA_cumsum, C, states, D=None, z=None, seq_idx=None):
    """Ports ``ssd_chunk_scan._chunk_scan_fwd``: y from the chunk's own inputs and the state entering it, plus
    ``x * D``; with z, ``out = y * silu(z)`` and ``out_x = y``."""
    batch, seqlen, nheads, headdim = x.shape
    _, _, nchunks, chunk_size = dt.shape
    _, _, ngroups, dstate = C.shape
    assert nheads % ngroups == 0
    assert C.shape == (batch, seqlen, ngroups, dstate)
    assert cb.shape == (batch, nchunks, ngroups, chunk_size, chunk_size)
    if z is not None:
        assert z.shape == x.shape
    if D is not None:
        assert D.shape == (nheads, headdim) or D.shape == (nheads,)
    assert dt.shape == (batch, nheads, nchunks, chunk_size)
    assert dA_cumsum.shape == (batch, nheads, nchunks, chunk_size)
    assert states.shape == (batch, nchunks, nheads, headdim, dstate)
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen)
    out = tritonplug.empty(batch, seqlen, nheads, headdim, dtype=x.dtype)
    if z is not None:
        out_x = tritonplug.empty(batch, seqlen, nheads, headdim, dtype=x.dtype)
        assert out_x.stride() == out.stride()
    else:
        out_x = None
    grid = lambda META: (triton.cdiv(chunk_size, META['BLOCK_SIZE_M']) * triton.cdiv(headdim, META['BLOCK_SIZE_N']),  # noqa: E731
                         batch * nchunks, nheads)
    z_strides = ((z.stride(0), z.stride(1), z.stride(2), z.stride(3))
                 if z is not None else (0, 0, 0, 0))
    _chunk_scan_fwd_kernel[grid](
        cb, x, z, out, out_x, dt, dA_cumsum, seq_idx, C, states, D,
        chunk_size, headdim, dstate,
        batch, seqlen, nheads // ngroups,
        cb.stride(0), cb.stride(1), cb.stride(2), cb.stride(3), cb.stride(4),
        x.stride(0), x.stride(1), x.stride(2), x.stride(3),
        z_strides[0], z_strides[1], z_strides[2], z_strides[3],
        out.stride(0), out.stride(1), out.stride(2), out.stride(3),
        dt.stride(0), dt.stride(2), dt.stride(1), dt.stride(3),
        dA_cumsum.stride(0), dA_cumsum.stride(2), dA_cumsum.stride(1), dA_cumsum.stride(3),
        *((seq_idx.stride(0), seq_idx.stride(1)) if seq_idx is not None else (0, 0)),
        C.stride(0), C.stride(1), C.stride(2), C.stride(3),
        states.stride(0), states.stride(1), states.stride(2), states.stride(3), states.stride(4),
        D.stride(0) if D is not None else 0,
        True,
        D is not None,
        D.dim() == 2 if D is not None else True,
        BLOCK_SIZE_DSTATE=max(triton.next_power_of_2(dstate), 16),
        HAS_Z=z is not None,
        HAS_SEQ_IDX=seq_idx is not None,
        IS_TRITON_22=TRITON_22, autotune=AUTOTUNE,
    )
    return out, out_x


@tritonplug.torch_launcher
def chunk_state_varlen(B, x, dt, dA_cumsum, cu_seqlens, chunk_states):
    """Ports ``ssd_chunk_state.chunk_state_varlen``: the state at the end of each sequence of a packed row
    (``cu_seqlens``' bounds), from the state entering the chunk of its last step (``chunk_states``, after the
    passing) and that chunk's steps of the sequence."""
    total_seqlen, nheads, headdim = x.shape
    _, nchunks, chunk_size = dt.shape
    _, ngroups, dstate = B.shape
    batch = cu_seqlens.shape[0] - 1
    assert nheads % ngroups == 0
    assert B.shape == (total_seqlen, ngroups, dstate)
    assert dt.shape == (nheads, nchunks, chunk_size)
    assert dA_cumsum.shape == dt.shape
    assert chunk_states.shape == (nchunks, nheads, headdim, dstate)
    states = tritonplug.empty(batch, nheads, headdim, dstate, dtype=chunk_states.dtype)
    grid = lambda META: (triton.cdiv(headdim, META['BLOCK_SIZE_M']) * triton.cdiv(dstate, META['BLOCK_SIZE_N']),  # noqa: E731
                         batch, nheads)
    _chunk_state_varlen_kernel[grid](
        x, B, dt, dA_cumsum, chunk_states, cu_seqlens, states,
        headdim, dstate, chunk_size,
        total_seqlen, nheads // ngroups,
        x.stride(0), x.stride(1), x.stride(2),
        B.stride(0), B.stride(1), B.stride(2),
        dt.stride(1), dt.stride(0), dt.stride(2),
        dA_cumsum.stride(1), dA_cumsum.stride(0), dA_cumsum.stride(2),
        chunk_states.stride(0), chunk_states.stride(1), chunk_states.stride(2), chunk_states.stride(3),
        states.stride(0), states.stride(1), states.stride(2), states.stride(3), autotune=AUTOTUNE,
    )
    return states


def _split_pn(t, dstate):
    """einops' ``"... (p n) -> ... p n"``."""
    return t.reshape(*t.shape[:-1], -1, dstate)


def _merge_pn(t):
    """einops' ``"... p n -> ... (p n)"``."""
    return t.reshape(*t.shape[:-2], -1)


class ForwardResiduals(NamedTuple):
    """What the backward would recompute from the inputs (mamba-ssm's backward recomputes all four): the cumsum
    of ``dt * A`` and the processed ``dt`` (``(b, h, c, k)``, fp32), ``C Bᵀ`` per chunk (``(b, c, g, k, k)``,
    fp32) and each chunk's own state before the passing (``(b, c, h, p, n)``, fp32). Kept, they spare the
    backward three launches and cost their memory (``docs/mamba2.md``)."""

    dA_cumsum: jax.Array
    dt: jax.Array
    CB: jax.Array
    chunk_states: jax.Array


def _mamba_chunk_scan_combined_fwd(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                                   seq_idx=None, dt_softplus=False, dt_limit=(0.0, float("inf"))):
    """Ports ``ssd_combined._mamba_chunk_scan_combined_fwd`` (without varlen)."""
    batch, seqlen, nheads, headdim = x.shape
    _, _, ngroups, dstate = B.shape
    assert nheads % ngroups == 0
    assert B.shape == (batch, seqlen, ngroups, dstate)
    assert dt.shape == (batch, seqlen, nheads)
    assert A.shape == (nheads,)
    assert C.shape == B.shape
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen)
    dA_cumsum, dt = _chunk_cumsum_fwd(dt, A, chunk_size, dt_bias=dt_bias, dt_softplus=dt_softplus, dt_limit=dt_limit)
    chunk_states = _chunk_state_fwd(B, x, dt, dA_cumsum, seq_idx=seq_idx, states_in_fp32=True)
    if initial_states is not None:
        assert initial_states.shape == (batch, nheads, headdim, dstate)
    states, final_states = _state_passing_fwd(_merge_pn(chunk_states), dA_cumsum[:, :, :, -1],
                                              initial_states=None if initial_states is None else
                                              _merge_pn(initial_states), seq_idx=seq_idx, chunk_size=chunk_size,
                                              out_dtype=C.dtype)
    states, final_states = [_split_pn(t, dstate) for t in [states, final_states]]
    CB = _bmm_chunk_fwd(C, B, chunk_size, seq_idx=seq_idx, output_dtype=jnp.float32)
    out, out_x = _chunk_scan_fwd(CB, x, dt, dA_cumsum, C, states, D=D, z=z, seq_idx=seq_idx)
    return out, out_x, dt, dA_cumsum, states, final_states, ForwardResiduals(dA_cumsum, dt, CB, chunk_states)
