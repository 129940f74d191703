# Launchers ported from mamba-ssm 2.3.2.post1: Apache-2.0, Copyright (c) 2024, Tri Dao, Albert Gu.
# The licence's text: LICENSE (Apache-2.0); the notice: THIRD_PARTY_NOTICES.md.
"""mamba-ssm 2.3.2.post1's SSD (``mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined``, Mamba-2's
chunked state-space scan) on JAX, forward and backward, on mamba-ssm's own Triton kernels.

The kernels are loaded from mamba-ssm's source without torch (``mamba_source.py``) and launched by mamba-ssm's
launchers ported with ``tritonplug.launch``: ``mamba_ssd_fwd.py`` (the forward's), ``mamba_ssd_bwd.py`` and
``mamba_ssd_scan_bwd.py`` (the backward's); their docstrings list where they differ from mamba-ssm's. This
module is ``MambaChunkScanCombinedFn`` (``jax.custom_vjp``), ``_mamba_chunk_scan_combined_bwd`` and the checks.

* Semantics and signature: mamba-ssm's, with ``z`` gating applied as its combined forward does (``y * silu(z)``
  in ``_chunk_scan_fwd``); ``initial_states`` (differentiable), ``return_final_states`` and ``seq_idx`` (several
  sequences packed in a row, non-decreasing ids: the state restarts where the id changes, the initial states
  belong to id 0) as mamba-ssm's; ``return_varlen_states`` with ``cu_seqlens`` (batch 1) gives each packed
  sequence's final state, forward only, as mamba-ssm's (``cu_seqlens`` is ignored otherwise, as there).
* ``MAMBA_DETERMINISTIC``: the port takes mamba-ssm's non-deterministic path (``tl.atomic_add`` reductions):
  mamba-ssm's deterministic path needs torch to pick it and extra workspaces; results agree to rounding.
* Autotuned kernels are tuned by tritonplug (docs/using.md, "Autotuning"); buffers that mamba-ssm sums
  over the chosen config's blocks are zero-filled and summed whole, so no launcher needs ``best_config``.
* The backward is given the forward's cumsum, processed ``dt``, ``C Bᵀ`` and chunk states (``ForwardResiduals``)
  where mamba-ssm's recomputes them: three launches fewer for their memory (docs/mamba2.md).
* In a sharded ``jit`` (``@tritonplug.partitioned``) batch ``b`` may be split, and the heads: with one group
  (``g == 1``, Mamba-2's default) B and C are whole on every device and the heads split freely (their
  gradients dB, dC are then sums over the head shards); with ``g > 1`` the heads are ``(g r)`` (``r = h / g``
  heads per group) and split with their groups (``r`` stays whole). Sequence, head dim and state stay whole
  (the scan runs along the sequence; the kernels reduce over ``p`` and ``n``).
"""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

import tritonplug

from .mamba_ssd_bwd import _bmm_chunk_bwd, _chunk_cumsum_bwd, _chunk_state_bwd_db, _state_passing_bwd
from .mamba_ssd_fwd import (
    _mamba_chunk_scan_combined_fwd,
    _merge_pn,
    _split_pn,
    _state_passing_fwd,
    chunk_state_varlen,
)
from .mamba_ssd_scan_bwd import (
    _chunk_scan_bwd_dC,
    _chunk_scan_bwd_dcb,
    _chunk_scan_bwd_ddAcs_stable,
    _chunk_scan_bwd_dstates,
    _chunk_scan_bwd_dz,
    _chunk_scan_chunk_state_bwd_dx,
)

_NAME = "mamba_chunk_scan_combined"
_FLOATS = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16), np.dtype(jnp.float32))


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                              seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False):
    """mamba-ssm's ``mamba_chunk_scan_combined`` on JAX arrays (its signature): y ``(b, l, h, p)`` in
    ``x.dtype``, or ``(y, final_states)`` with ``return_final_states`` (the state after the last step,
    ``(b, h, p, n)`` in fp32).

    x ``(b, l, h, p)``; dt ``(b, l, h)``; A ``(h,)``; B, C ``(b, l, g, n)`` with ``h % g == 0``; D ``(h,)`` or
    ``(h, p)``; z ``(b, l, h, p)``; dt_bias ``(h,)``; initial_states ``(b, h, p, n)``, the state before the first
    step (default zeros); seq_idx ``(b, l)`` integers, each step's sequence in its row (non-decreasing). Differentiable
    in every float argument, ``final_states`` too. With ``return_varlen_states`` (``cu_seqlens`` ``(s + 1,)``, the
    bounds of the ``s`` sequences of a batch of 1) also each sequence's final state ``(s, h, p, n)`` in ``C.dtype``,
    last: forward only, as mamba-ssm's; its two launches are not partitioned."""
    if not isinstance(return_varlen_states, (bool, np.bool_)):
        raise TypeError(f"{_NAME}: `return_varlen_states` must be a bool, got {return_varlen_states!r}")
    dt_limit = _check(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_limit)
    _check_states(x, B, initial_states, return_final_states)
    seq_idx = _check_seq_idx(x, seq_idx)
    args = (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx)
    if return_varlen_states:  # mamba-ssm reads cu_seqlens for nothing else (and ignores it otherwise)
        return _varlen(*args, _check_cu_seqlens(x, cu_seqlens), chunk_size, bool(dt_softplus), dt_limit,
                       bool(return_final_states))
    return _combined(*args, chunk_size, bool(dt_softplus), dt_limit, bool(return_final_states))


def _check_seq_idx(x, seq_idx):
    """``seq_idx`` as the kernels read it (int32), after its kind and shape are checked."""
    if seq_idx is None:
        return None
    if not hasattr(seq_idx, "shape") or not hasattr(seq_idx, "dtype"):
        raise TypeError(f"{_NAME}: `seq_idx` must be an array, got {type(seq_idx).__name__}")
    if not np.issubdtype(np.dtype(seq_idx.dtype), np.integer):
        raise TypeError(f"{_NAME}: `seq_idx` must be integers (int32), got {seq_idx.dtype}")
    if tuple(seq_idx.shape) != tuple(x.shape[:2]):
        raise ValueError(f"{_NAME}: `seq_idx` must have shape {tuple(x.shape[:2])} (batch, seqlen), got "
                         f"{tuple(seq_idx.shape)}")
    return jnp.asarray(seq_idx, jnp.int32)


def _check_cu_seqlens(x, cu_seqlens):
    """``cu_seqlens`` (int32) for the varlen states: mamba-ssm's rules (given, batch 1), checked where mamba-ssm's
    kernel would read out of bounds: bounds from 0, never decreasing, the last at most ``seqlen``."""
    if cu_seqlens is None:
        raise ValueError(f"{_NAME}: `return_varlen_states=True` needs `cu_seqlens` (the sequences' bounds in the "
                         "row), as in mamba-ssm")
    if not hasattr(cu_seqlens, "shape") or not np.issubdtype(np.dtype(cu_seqlens.dtype), np.integer):
        got = getattr(cu_seqlens, "dtype", None) or type(cu_seqlens).__name__
        raise TypeError(f"{_NAME}: `cu_seqlens` must be an integer array, got {got}")
    if x.shape[0] != 1 or cu_seqlens.ndim != 1 or cu_seqlens.shape[0] < 2:
        raise ValueError(f"{_NAME}: `cu_seqlens` must be 1-D with at least 2 bounds, for a batch of 1 (mamba-ssm's "
                         f"rule for the varlen states); got shape {tuple(cu_seqlens.shape)} with x {tuple(x.shape)}")
    if not isinstance(cu_seqlens, jax.core.Tracer):
        bounds = np.asarray(cu_seqlens)
        if bounds[0] != 0 or np.any(np.diff(bounds) < 0) or bounds[-1] > x.shape[1]:
            raise ValueError(f"{_NAME}: `cu_seqlens` must rise from 0 to at most seqlen ({x.shape[1]}) and never "
                             f"fall, got {bounds.tolist()}")
    return jnp.asarray(cu_seqlens, jnp.int32)


def _check_states(x, B, initial_states, return_final_states) -> None:
    if not isinstance(return_final_states, (bool, np.bool_)):
        raise TypeError(f"{_NAME}: `return_final_states` must be a bool, got {return_final_states!r}")
    if initial_states is None:
        return
    if not hasattr(initial_states, "shape") or not hasattr(initial_states, "dtype"):
        raise TypeError(f"{_NAME}: `initial_states` must be an array, got {type(initial_states).__name__}")
    if np.dtype(initial_states.dtype) not in _FLOATS:
        raise TypeError(f"{_NAME}: `initial_states` must be float16, bfloat16 or float32, got "
                        f"{initial_states.dtype}")
    want = (x.shape[0], x.shape[2], x.shape[3], B.shape[3])
    if tuple(initial_states.shape) != want:
        raise ValueError(f"{_NAME}: `initial_states` must have shape {want} (batch, nheads, headdim, dstate), got "
                         f"{tuple(initial_states.shape)}")


def _check(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_limit):
    """Every argument's shape, dtype and kind, before anything is traced or compiled; the normalised dt_limit."""
    def array(name, value, optional=False):
        if value is None and optional:
            return None
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise TypeError(f"{_NAME}: `{name}` must be an array, got {type(value).__name__}")
        if np.dtype(value.dtype) not in _FLOATS:
            raise TypeError(f"{_NAME}: `{name}` must be float16, bfloat16 or float32, got {value.dtype}")
        return tuple(value.shape)

    def shape_error(name, want, got):
        return ValueError(f"{_NAME}: `{name}` must have shape {want}, got {got}")

    xs = array("x", x)
    if len(xs) != 4:
        raise shape_error("x", "(batch, seqlen, nheads, headdim)", xs)
    b, seq, h, p = xs
    Bs = array("B", B)
    if len(Bs) != 4 or Bs[:2] != (b, seq):
        raise shape_error("B", f"({b}, {seq}, ngroups, dstate) (x is {xs})", Bs)
    g = Bs[2]
    if g == 0 or h % g:
        raise ValueError(f"{_NAME}: nheads ({h}, x's dim 2) must be a multiple of ngroups ({g}, B's dim 2)")
    expected = {"dt": (b, seq, h), "A": (h,), "C": Bs, "z": xs, "dt_bias": (h,)}
    for name, value in (("dt", dt), ("A", A), ("C", C), ("z", z), ("dt_bias", dt_bias)):
        got = array(name, value, optional=name in ("z", "dt_bias"))
        if got is not None and got != expected[name]:
            raise shape_error(name, expected[name], got)
    Ds = array("D", D, optional=True)
    if Ds is not None and Ds not in ((h,), (h, p)):
        raise shape_error("D", f"({h},) or ({h}, {p})", Ds)
    for name, value in (("B", B), ("C", C), ("z", z)):
        if value is not None and np.dtype(value.dtype) != np.dtype(x.dtype):
            raise TypeError(f"{_NAME}: `{name}` must have x's dtype {np.dtype(x.dtype)} (the kernels multiply them "
                            f"together), got {np.dtype(value.dtype)}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral) or chunk_size <= 0:
        raise ValueError(f"{_NAME}: `chunk_size` must be a positive int, got {chunk_size!r}")
    if not isinstance(dt_softplus, (bool, np.bool_)):
        raise TypeError(f"{_NAME}: `dt_softplus` must be a bool, got {dt_softplus!r}")
    if (not isinstance(dt_limit, (tuple, list)) or len(dt_limit) != 2
            or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in dt_limit)
            or math.isnan(dt_limit[0]) or math.isnan(dt_limit[1]) or dt_limit[0] > dt_limit[1]):
        raise ValueError(f"{_NAME}: `dt_limit` must be a pair of numbers (low, high) with low <= high, "
                         f"got {dt_limit!r}")
    return float(dt_limit[0]), float(dt_limit[1])


def _heads(B):
    """The heads' factor: free ``h`` with one group, else ``(g r)`` (heads split with their group)."""
    return ("h", "g") if B.shape[2] == 1 else ("(g r)", "g")


def _fwd_rule(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit):
    h, g = _heads(B)
    groups = [f"b l {h} p", f"b l {h}", h, f"b l {g} n", f"b l {g} n"]
    groups += [] if D is None else [h if D.ndim == 1 else f"{h} p"]
    groups += [] if z is None else [f"b l {h} p"]
    groups += [] if dt_bias is None else [h]
    groups += [] if initial_states is None else [f"b {h} p n"]
    groups += [] if seq_idx is None else ["b l"]
    results = [f"b l {h} p"] * (1 if z is None else 2) + [f"b {h} p n"] + _kept_factors(h, g)
    return tritonplug.sharding_rule(f"{', '.join(groups)} -> {', '.join(results)}",
                                    need_replication=_WHOLE + (() if h == "h" else ("r",)))


def _kept_factors(h: str, g: str) -> list[str]:
    """The factors of ``ForwardResiduals``' four arrays: chunks ``c`` of ``k`` steps (``s`` too: ``C Bᵀ`` is
    ``k × k`` per chunk)."""
    return [f"b {h} c k", f"b {h} c k", f"b c {g} k s", f"b c {h} p n"]


#: the factors every shard holds whole: the scan runs along the sequence (``l``, its chunks ``c`` of ``k``
#: and ``s`` steps), the kernels reduce over the head dim ``p`` and the state ``n``
_WHOLE = ("l", "c", "k", "s", "p", "n")


def _bwd_rule(dout, x, dt, A, B, C, out, dA_cumsum, dt_kept, CB, chunk_states, D, z, dt_bias, initial_states,
              dfinal_states, seq_idx, chunk_size, dt_softplus, dt_limit):
    h, g = _heads(B)
    y, d_group, state = f"b l {h} p", (None if D is None else (h if D.ndim == 1 else f"{h} p")), f"b {h} p n"
    optional = ((d_group, D), (y, z), (h, dt_bias), (state, initial_states))
    operands = [y, y, f"b l {h}", h, f"b l {g} n", f"b l {g} n", y] + _kept_factors(h, g)
    operands += [g_ for g_, a in (*optional, (state, dfinal_states), ("b l", seq_idx)) if a is not None]
    results = [y, f"b l {h}", h, f"b l {g} n", f"b l {g} n"]
    results += [g_ for g_, a in optional if a is not None]
    # dA, dD, ddt_bias sum over batch and time; with one group, dB and dC also sum over the heads
    reduce = ("b",) + (("h",) if h == "h" else ())
    whole = _WHOLE + (() if h == "h" else ("r",))
    return tritonplug.sharding_rule(f"{', '.join(operands)} -> {', '.join(results)}", need_replication=whole,
                                    reduction_factors=reduce)


@tritonplug.partitioned(_fwd_rule)
def _forward(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit):
    """The combined forward: ``out``, with z also ``out_x`` (before the gating), which the backward needs, the
    final states, then the four arrays of ``ForwardResiduals``."""
    out, out_x, _, _, _, final_states, kept = _mamba_chunk_scan_combined_fwd(
        x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states, seq_idx=seq_idx,
        dt_softplus=dt_softplus, dt_limit=dt_limit)
    return (out, final_states, *kept) if z is None else (out, out_x, final_states, *kept)


def _entering_states(chunk_states, dA_cumsum, initial_states, seq_idx, chunk_size):
    """The state entering each chunk ``(b, c, h, p, n)``, passed again from the forward's kept chunk states (as
    mamba-ssm's backward recomputes it, in fp32)."""
    states, _ = _state_passing_fwd(_merge_pn(chunk_states), dA_cumsum[:, :, :, -1],
                                   initial_states=None if initial_states is None else _merge_pn(initial_states),
                                   seq_idx=seq_idx, chunk_size=chunk_size)
    return _split_pn(states, chunk_states.shape[-1])


@tritonplug.partitioned(_bwd_rule)
def _mamba_chunk_scan_combined_bwd(dout, x, dt, A, B, C, out, dA_cumsum, dt_kept, CB, chunk_states, D, z, dt_bias,
                                   initial_states, dfinal_states, seq_idx, chunk_size, dt_softplus, dt_limit):
    """Ports ``ssd_combined._mamba_chunk_scan_combined_bwd`` (without ``recompute_output`` and the
    ``dx=`` … output buffers): (dx, ddt, dA, dB, dC[, dD][, dz][, ddt_bias][, dinitial_states]).
    mamba-ssm's recomputes the forward's cumsum, ``C Bᵀ`` and chunk states; this one is given them (the
    forward's ``ForwardResiduals``) and recomputes only the state passing, as mamba-ssm's does (in fp32)."""
    batch, seqlen, nheads, headdim = x.shape
    _, _, ngroups, dstate = B.shape
    assert dout.shape == (batch, seqlen, nheads, headdim)
    assert dt.shape == (batch, seqlen, nheads)
    assert A.shape == (nheads,)
    assert nheads % ngroups == 0
    assert C.shape == B.shape
    assert out.shape == x.shape
    dt_in, dt = dt, dt_kept
    states = _entering_states(chunk_states, dA_cumsum, initial_states, seq_idx, chunk_size)
    if z is not None:
        dz, dout, dD = _chunk_scan_bwd_dz(x, z, out, dout, chunk_size=chunk_size, D=D)
    else:
        dz = None
    dstates = _chunk_scan_bwd_dstates(C, dA_cumsum, dout, seq_idx=seq_idx, dtype=states.dtype)
    # dstates: the gradient of the state entering each chunk; ddA_chunk_cumsum: of dA_cumsum's last entries
    dstates, ddA_chunk_cumsum, dinitial_states, states = _state_passing_bwd(
        _merge_pn(states), dA_cumsum[:, :, :, -1], _merge_pn(dstates),
        dfinal_states=None if dfinal_states is None else _merge_pn(dfinal_states), seq_idx=seq_idx,
        has_initial_states=initial_states is not None, dstates_dtype=x.dtype, states_dtype=x.dtype,
        chunk_size=chunk_size)
    states = _split_pn(states, dstate)
    dstates = _split_pn(dstates, dstate)
    dx, ddt, dD_from_x = _chunk_scan_chunk_state_bwd_dx(x, dt, dA_cumsum, B, CB, dout, dstates, D=D,
                                                        seq_idx=seq_idx)
    dB, ddA_next = _chunk_state_bwd_db(x, dt, dA_cumsum, dstates, seq_idx=seq_idx, B=B, ngroups=ngroups)
    dC, ddA_cumsum_prev = _chunk_scan_bwd_dC(states.astype(x.dtype), dA_cumsum, dout, seq_idx=seq_idx, C=C,
                                             ngroups=ngroups)
    dCB = _chunk_scan_bwd_dcb(x, dt, dA_cumsum, dout, seq_idx=seq_idx, ngroups=ngroups)
    dCB = dCB.astype(CB.dtype)
    dB_given = _bmm_chunk_bwd(C, dCB, residual=dB)
    dC_given = _bmm_chunk_bwd(B, jnp.swapaxes(dCB, -1, -2), residual=dC)  # rearrange "... l s -> ... s l"
    if z is None:  # with z, dD was recomputed in fp32 by _chunk_scan_bwd_dz (mamba-ssm's comment)
        dD = dD_from_x
    ddA_cumsum_prev = ddA_cumsum_prev.at[..., -1].add(ddA_chunk_cumsum)
    ddA_prev = jnp.flip(jnp.cumsum(jnp.flip(ddA_cumsum_prev, -1), axis=-1), -1)
    ddA = _chunk_scan_bwd_ddAcs_stable(x, dt, dA_cumsum, dout, CB)
    ddA = ddA + ddA_next + ddA_prev
    ddt_given, dA, ddt_bias = _chunk_cumsum_bwd(ddA, ddt, dt_in, A, dt_bias=dt_bias, dt_softplus=dt_softplus,
                                                dt_limit=dt_limit)
    dinitial_states = None if dinitial_states is None else _split_pn(dinitial_states, dstate)
    return (dx, ddt_given, dA, dB_given, dC_given,
            *[g for g in (dD, dz, ddt_bias, dinitial_states) if g is not None])


@functools.partial(jax.custom_vjp, nondiff_argnums=(10, 11, 12, 13))
def _combined(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit,
              return_final_states):
    """``MambaChunkScanCombinedFn``: ``out``, or ``(out, final_states)``."""
    return _fwd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit,
                return_final_states)[0]


def _fwd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit,
         return_final_states):
    out, *rest = _forward(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus,
                          dt_limit)
    saved, rest = (out, rest) if z is None else (rest[0], rest[1:])
    final_states, *kept = rest
    result = (out, final_states) if return_final_states else out
    return result, (saved, tuple(kept), x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx)


def _bwd(chunk_size, dt_softplus, dt_limit, return_final_states, res, cotangent):
    dout, dfinal_states = cotangent if return_final_states else (cotangent, None)
    out, kept, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx = res
    dx, ddt, dA, dB, dC, *rest = _mamba_chunk_scan_combined_bwd(dout, x, dt, A, B, C, out, *kept, D, z, dt_bias,
                                                                initial_states, dfinal_states, seq_idx,
                                                                chunk_size, dt_softplus, dt_limit)
    rest = iter(rest)
    dD, dz, ddt_bias, dinitial_states = (None if a is None else next(rest) for a in (D, z, dt_bias, initial_states))
    grads = (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states)
    primals = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    return (*(None if p is None else g.astype(p.dtype) for g, p in zip(grads, primals, strict=True)), None)


_combined.defvjp(_fwd, _bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(11, 12, 13, 14))
def _varlen(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, chunk_size, dt_softplus, dt_limit,
            return_final_states):
    """``MambaChunkScanCombinedFn`` with ``return_varlen_states``: ``(out, varlen_states)`` or ``(out,
    final_states, varlen_states)``, each sequence's final state ``(len(cu_seqlens) - 1, h, p, n)`` in ``C.dtype``
    (from the passed states rounded to ``C.dtype``, as mamba-ssm's). Forward only, as mamba-ssm's."""
    out, _, dt_kept, dA_cumsum, states, final_states, _ = _mamba_chunk_scan_combined_fwd(
        x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states, seq_idx=seq_idx,
        dt_softplus=dt_softplus, dt_limit=dt_limit)   # ``states``: each chunk's entering state, in C.dtype
    varlen = chunk_state_varlen(B[0], x[0], dt_kept[0], dA_cumsum[0], cu_seqlens, states[0])
    return (out, final_states, varlen) if return_final_states else (out, varlen)


def _varlen_fwd(*args):
    return _varlen(*args), None


def _varlen_bwd(*_):
    raise NotImplementedError(f"{_NAME}: return_varlen_states is not supported in backward (as in mamba-ssm): "
                              "differentiate a call without it")


_varlen.defvjp(_varlen_fwd, _varlen_bwd)
