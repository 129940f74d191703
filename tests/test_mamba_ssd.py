"""The port of mamba-ssm's SSD (``examples/ports/mamba_ssd.py``) on the CPU (the interpret plugin): the forward
against a NumPy loop of the plain recurrence, the gradients of every differentiable input against ``jax.grad`` of
a ``lax.scan`` recurrence written here, and bad input refused at the call.

mamba-ssm's source must be importable (``examples/fetch_kernel_sources.py``; tox's corpus env fetches it)."""

from __future__ import annotations

import importlib.machinery

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = [
    requires_backend("interpret"),
    pytest.mark.skipif(importlib.machinery.PathFinder.find_spec("mamba_ssm") is None,
                       reason="mamba-ssm's source is not on sys.path (examples/fetch_kernel_sources.py)"),
]

INF = float("inf")


def ssd_op():
    from ports.mamba_ssd import mamba_chunk_scan_combined
    return mamba_chunk_scan_combined


def inputs(seed, b=2, seqlen=40, h=4, p=8, g=2, n=16, D="h", z=True, dt_bias=True, dtype=np.float32):
    """Random arguments; dt around softplus's useful range; A negative (a decaying state)."""
    rng = np.random.default_rng(seed)
    f = lambda *shape, scale=1.0: (scale * rng.standard_normal(shape)).astype(np.float32)  # noqa: E731
    args = {"x": f(b, seqlen, h, p), "dt": rng.uniform(-1.0, 1.0, (b, seqlen, h)).astype(np.float32),
            "A": -rng.uniform(0.2, 1.5, h).astype(np.float32), "B": f(b, seqlen, g, n, scale=0.5),
            "C": f(b, seqlen, g, n, scale=0.5),
            "D": {None: None, "h": f(h), "hp": f(h, p)}[D], "z": f(b, seqlen, h, p) if z else None,
            "dt_bias": f(h, scale=0.5) if dt_bias else None}
    low = {"x", "B", "C", "z"}  # x's dtype; dt, A, D, dt_bias stay fp32 as in Mamba-2
    return {k: (None if v is None else jnp.asarray(v, dtype if k in low else jnp.float32)) for k, v in args.items()}


def dt_of(dt, dt_bias, softplus, limit, xp):
    d = dt if dt_bias is None else dt + dt_bias
    if softplus:
        d = xp.where(d <= 20.0, xp.log1p(xp.exp(xp.minimum(d, 20.0))), d)
    return xp.clip(d, limit[0], limit[1])


def numpy_reference(a, softplus, limit, initial_states=None, final=False, seq_idx=None):
    """The plain sequential recurrence, in float64: h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T (h_0: the initial
    states, else zeros); y_t = h_t C_t + D x_t; then y * silu(z). With ``final``: ``(y, h_last)``. With
    ``seq_idx`` the state is zeroed before each step whose id differs from the step before's (before the first:
    id 0, whose state the initial states are)."""
    x, B, C = (np.asarray(a[k], np.float64) for k in ("x", "B", "C"))
    A = np.asarray(a["A"], np.float64)
    bias = None if a["dt_bias"] is None else np.asarray(a["dt_bias"], np.float64)
    d = dt_of(np.asarray(a["dt"], np.float64), bias, softplus, limit, np)
    b, seqlen, h, p = x.shape
    heads_per_group = h // B.shape[2]
    state = (np.zeros((b, h, p, B.shape[3])) if initial_states is None
             else np.asarray(initial_states, np.float64).copy())
    y = np.zeros_like(x)
    ids = np.zeros((b, seqlen + 1), int) if seq_idx is None else np.pad(np.asarray(seq_idx), [(0, 0), (1, 0)])
    for t in range(seqlen):
        state = np.where((ids[:, t + 1] != ids[:, t])[:, None, None, None], 0.0, state)
        Bt, Ct = (np.repeat(M[:, t], heads_per_group, axis=1) for M in (B, C))  # (b, h, n)
        state = np.exp(d[:, t] * A)[..., None, None] * state + (d[:, t, :, None] * x[:, t])[..., None] * Bt[:, :, None]
        y[:, t] = np.einsum("bhpn,bhn->bhp", state, Ct)
    if a["D"] is not None:
        D = np.asarray(a["D"], np.float64)
        y += x * (D[:, None] if D.ndim == 1 else D)
    if a["z"] is not None:
        z = np.asarray(a["z"], np.float64)
        y *= z / (1 + np.exp(-z))
    return (y, state) if final else y


def scan_reference(x, dt, A, B, C, D, z, dt_bias, softplus, limit, initial_states=None, final=False, seq_idx=None):
    """The same recurrence as a ``lax.scan`` over time, in float32, for ``jax.grad``."""
    d = dt_of(dt, dt_bias, softplus, limit, jnp)
    heads_per_group = x.shape[2] // B.shape[2]
    Bh, Ch = (jnp.repeat(M, heads_per_group, axis=2) for M in (B, C))

    ids = jnp.zeros(x.shape[:2], jnp.int32) if seq_idx is None else jnp.asarray(seq_idx, jnp.int32)
    restart = ids != jnp.pad(ids, [(0, 0), (1, 0)])[:, :-1]  # (b, l): a new sequence starts at this step

    def step(state, inputs):
        xt, dtt, Bt, Ct, new = inputs
        state = jnp.where(new[:, None, None, None], 0.0, state)
        state = jnp.exp(dtt * A)[..., None, None] * state + (dtt[..., None] * xt)[..., None] * Bt[:, :, None]
        return state, jnp.einsum("bhpn,bhn->bhp", state, Ct)

    init = (jnp.zeros((x.shape[0], x.shape[2], x.shape[3], B.shape[3]), jnp.float32) if initial_states is None
            else initial_states.astype(jnp.float32))
    last, y = jax.lax.scan(step, init, tuple(jnp.swapaxes(v, 0, 1) for v in (x, d, Bh, Ch, restart)))
    y = jnp.swapaxes(y, 0, 1)
    if D is not None:
        y = y + x * (D[:, None] if D.ndim == 1 else D)
    y = y if z is None else y * jax.nn.silu(z)
    return (y, last) if final else y


NAMES = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")


def check(a, chunk_size, softplus, limit, *, jit, grads, tol, positional=False):
    op = ssd_op()
    f32 = {k: None if v is None else v.astype(jnp.float32) for k, v in a.items()}

    def call(**kw):
        if positional:
            return op(kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], chunk_size, kw["D"], kw["z"], kw["dt_bias"],
                      None, None, None, softplus, limit)  # mamba-ssm's order: initial_states, seq_idx, cu_seqlens
        return op(**kw, chunk_size=chunk_size, dt_softplus=softplus, dt_limit=limit)  # every argument by keyword

    y = (jax.jit(call) if jit else call)(**a)
    assert y.shape == a["x"].shape and y.dtype == a["x"].dtype
    want = numpy_reference(f32, softplus, limit)
    np.testing.assert_allclose(np.asarray(y, np.float64), want, rtol=tol, atol=tol * np.abs(want).max())
    if not grads:
        return
    cot = jnp.asarray(np.random.default_rng(1).standard_normal(a["x"].shape), a["x"].dtype)
    given_names = [k for k in NAMES if a[k] is not None]

    def loss(fn, dtype):
        def inner(*arrays):
            kw = dict(a, **dict(zip(given_names, arrays, strict=True)))
            return jnp.sum(fn(**kw).astype(jnp.float32) * cot.astype(jnp.float32))
        return inner

    grad = jax.grad(loss(call, a["x"].dtype), argnums=tuple(range(len(given_names))))
    got = (jax.jit(grad) if jit else grad)(*[a[k] for k in given_names])
    ref = lambda **kw: scan_reference(**kw, softplus=softplus, limit=limit)  # noqa: E731
    want = jax.grad(loss(ref, jnp.float32), argnums=tuple(range(len(given_names))))(*[f32[k] for k in given_names])
    for name, g, w in zip(given_names, got, want, strict=True):
        assert g.dtype == a[name].dtype, name
        w = np.asarray(w, np.float64)
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=tol, atol=tol * np.abs(w).max(),
                                   err_msg=f"d{name}")


@pytest.mark.parametrize("case", [
    dict(D="h", z=True, dt_bias=True, softplus=True, limit=(0.0, INF), jit=True),
    dict(D="hp", z=False, dt_bias=False, softplus=True, limit=(0.05, 0.9), jit=False, positional=True),
    dict(D=None, z=True, dt_bias=True, softplus=False, limit=(0.0, 0.7), jit=True, g=1),
], ids=["D_h-z-bias-softplus-jit", "D_hp-limit-eager-positional", "noD-g1-nosoftplus-jit"])
def test_forward_and_gradients_match_the_recurrence(case):
    case = dict(case)
    softplus, limit, jit = case.pop("softplus"), case.pop("limit"), case.pop("jit")
    positional = case.pop("positional", False)
    check(inputs(0, **case), 16, softplus, limit, jit=jit, grads=True, tol=2e-4, positional=positional)


def test_bfloat16_inputs_forward_and_gradients():
    a = inputs(3, D="h", z=True, dtype=jnp.bfloat16)
    check(a, 16, True, (0.0, INF), jit=True, grads=True, tol=4e-2)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([(1, 17, 2, 1), (2, 33, 4, 2), (1, 48, 4, 4), (2, 24, 6, 3)]), st.sampled_from([16, 32]),
       st.sampled_from([None, "h", "hp"]), st.booleans(), st.booleans(), st.booleans())
def test_forward_over_shapes_and_options(shape, chunk_size, D, z, dt_bias, softplus):
    b, seqlen, h, g = shape
    a = inputs(seqlen, b=b, seqlen=seqlen, h=h, p=8, g=g, n=16, D=D, z=z, dt_bias=dt_bias)
    check(a, chunk_size, softplus, (0.0, INF) if softplus else (0.0, 1.0), jit=True, grads=False, tol=2e-4)


#: packed sequences in rows of 40 steps (chunks of 16): row 0 starts new ones inside chunk 0, exactly at chunk 1's
#: first step and inside the last (partial) chunk; row 1 is one sequence of id 1, so its initial state is unused
PACKED = np.array([[0] * 10 + [1] * 6 + [2] * 20 + [3] * 4, [1] * 40], np.int32)


@pytest.mark.parametrize("packed", [False, True], ids=["one-sequence", "seq_idx"])
@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-4), (jnp.bfloat16, 4e-2)], ids=["fp32", "bf16"])
def test_initial_and_final_states_match_the_recurrence_with_their_gradients(dtype, tol, packed):
    """mamba-ssm's ``initial_states`` (the state before the first step) and ``return_final_states`` (the state
    after the last, in fp32; 40 steps in chunks of 16, so the last chunk is partial), alone and with ``seq_idx``
    (:data:`PACKED`): the forward against the float64 loop, the gradients of every input, the initial states
    included, with a cotangent on both outputs."""
    op = ssd_op()
    a = inputs(5, D="h", z=True, dtype=dtype)
    rng = np.random.default_rng(6)
    init = jnp.asarray(rng.standard_normal((2, 4, 8, 16)).astype(np.float32), dtype)
    seq_idx = PACKED if packed else None
    options = dict(chunk_size=16, dt_softplus=True, seq_idx=seq_idx)
    y, last = jax.jit(lambda a, init: op(**a, **options, initial_states=init, return_final_states=True))(a, init)
    assert last.shape == (2, 4, 8, 16) and last.dtype == jnp.float32 and y.dtype == a["x"].dtype
    f32 = {k: None if v is None else v.astype(jnp.float32) for k, v in a.items()}
    want_y, want_last = numpy_reference(f32, True, (0.0, INF), initial_states=init.astype(jnp.float32), final=True,
                                        seq_idx=seq_idx)
    for got, want in ((y, want_y), (last, want_last)):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol * np.abs(want).max())

    names = [*(k for k in NAMES if a[k] is not None), "initial_states"]
    cot_y, cot_last = (jnp.asarray(rng.standard_normal(s).astype(np.float32)) for s in (a["x"].shape, last.shape))

    def loss(fn):
        def inner(*arrays):
            kw = dict(zip(names, arrays, strict=True))
            y, last = fn(kw)
            return jnp.sum(y.astype(jnp.float32) * cot_y) + jnp.sum(last * cot_last)
        return inner

    ours = lambda kw: op(**kw, **options, return_final_states=True)  # noqa: E731
    ref = lambda kw: scan_reference(**{k: v for k, v in kw.items() if k != "initial_states"}, softplus=True,  # noqa: E731
                                    limit=(0.0, INF), initial_states=kw["initial_states"], final=True,
                                    seq_idx=seq_idx)
    argnums = tuple(range(len(names)))
    got = jax.jit(jax.grad(loss(ours), argnums=argnums))(*[a[k] for k in names[:-1]], init)
    want = jax.grad(loss(ref), argnums=argnums)(*[f32[k] for k in names[:-1]], init.astype(jnp.float32))
    for name, g, w in zip(names, got, want, strict=True):
        w = np.asarray(w, np.float64)
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=tol, atol=tol * np.abs(w).max(),
                                   err_msg=f"d{name}")


BAD = [
    (dict(x=("shape", (2, 40, 32))), ValueError, "`x` must have shape (batch, seqlen, nheads, headdim)"),
    (dict(dt=("shape", (2, 40))), ValueError, "`dt` must have shape (2, 40, 4)"),
    (dict(B=("shape", (2, 40, 3, 16)), C=("shape", (2, 40, 3, 16))), ValueError, "multiple of ngroups (3"),
    (dict(C=("shape", (2, 40, 2, 8))), ValueError, "`C` must have shape (2, 40, 2, 16)"),
    (dict(A=("shape", (4, 1))), ValueError, "`A` must have shape (4,)"),
    (dict(D=("shape", (8,))), ValueError, "`D` must have shape (4,) or (4, 8)"),
    (dict(z=("shape", (2, 40, 4, 4))), ValueError, "`z` must have shape (2, 40, 4, 8)"),
    (dict(dt_bias=("shape", (2,))), ValueError, "`dt_bias` must have shape (4,)"),
    (dict(B=("dtype", jnp.bfloat16)), TypeError, "`B` must have x's dtype float32"),
    (dict(z=("dtype", jnp.float16)), TypeError, "`z` must have x's dtype float32"),
    (dict(x=("dtype", jnp.int32)), TypeError, "`x` must be float16, bfloat16 or float32"),
    (dict(chunk_size=0), ValueError, "`chunk_size` must be a positive int, got 0"),
    (dict(chunk_size=16.0), ValueError, "`chunk_size` must be a positive int, got 16.0"),
    (dict(chunk_size=True), ValueError, "`chunk_size` must be a positive int, got True"),
    (dict(dt_limit=(1.0, 0.5)), ValueError, "`dt_limit` must be a pair of numbers (low, high) with low <= high"),
    (dict(dt_softplus="yes"), TypeError, "`dt_softplus` must be a bool"),
    (dict(initial_states=("shape", (2, 4, 16, 8))), ValueError, "`initial_states` must have shape (2, 4, 8, 16)"),
    (dict(initial_states=[0.0]), TypeError, "`initial_states` must be an array, got list"),
    (dict(return_final_states="yes"), TypeError, "`return_final_states` must be a bool"),
    (dict(seq_idx=np.zeros((2, 39), np.int32)), ValueError, "`seq_idx` must have shape (2, 40) (batch, seqlen)"),
    (dict(seq_idx=("shape", (2, 40))), TypeError, "`seq_idx` must be integers (int32), got float32"),
    (dict(seq_idx=[[0] * 40] * 2), TypeError, "`seq_idx` must be an array, got list"),
    (dict(return_varlen_states=True), ValueError, "`return_varlen_states=True` needs `cu_seqlens`"),
    (dict(return_varlen_states="yes"), TypeError, "`return_varlen_states` must be a bool"),
    (dict(return_varlen_states=True, cu_seqlens=np.array([0, 40], np.int32)), ValueError,
     "`cu_seqlens` must be 1-D with at least 2 bounds, for a batch of 1"),
    (dict(return_varlen_states=True, cu_seqlens=("shape", (3,))), TypeError,
     "`cu_seqlens` must be an integer array, got float32"),
]


@pytest.mark.parametrize("change, error, message", BAD, ids=[m.split("`")[1] if "`" in m else m for _, _, m in BAD])
def test_bad_input_is_refused_at_the_call_naming_the_argument(change, error, message):
    op = ssd_op()
    kw = dict(inputs(0), chunk_size=16)
    for name, value in change.items():
        if isinstance(value, tuple) and value and value[0] == "shape":
            kw[name] = jnp.zeros(value[1], jnp.float32)
        elif isinstance(value, tuple) and value and value[0] == "dtype":
            kw[name] = kw[name].astype(value[1])
        else:
            kw[name] = value
    with pytest.raises(error) as info:
        op(**kw)
    assert message in str(info.value) and "mamba_chunk_scan_combined" in str(info.value)


VARLEN = [0, 10, 16, 36, 40]  # PACKED's first row: ends inside a chunk, at a chunk's end, in the last partial chunk


@pytest.mark.parametrize("chunk_size, initial", [(16, False), (8, False), (16, True)])
def test_varlen_states_are_each_sequences_final_state(chunk_size, initial):
    """``return_varlen_states`` with ``cu_seqlens`` (batch 1, the ``seq_idx`` it bounds): each sequence's state
    after its last step, as the recurrence run on that sequence alone gives it (the initial states belong to the
    first: mamba-ssm's kernel adds them only where that sequence ends past the first chunk, as here at 16 with
    chunks of 16 it would not: so the case with initial states has the first sequence end at 20)."""
    bounds = [0, 20, 26, 36, 40] if initial else VARLEN
    a = inputs(5, b=1)
    seq_idx = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))[None].astype(np.int32)
    init = jnp.asarray(np.random.default_rng(6).standard_normal((1, 4, 8, 16)), jnp.float32) if initial else None
    out, final, varlen = ssd_op()(**a, chunk_size=chunk_size, initial_states=init, seq_idx=jnp.asarray(seq_idx),
                                  cu_seqlens=np.asarray(bounds, np.int32), dt_softplus=True,
                                  return_final_states=True, return_varlen_states=True)
    assert varlen.shape == (len(bounds) - 1, 4, 8, 16) and varlen.dtype == a["C"].dtype
    for i, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        part = {k: v if v is None or k in ("A", "D", "dt_bias") else v[:, start:end] for k, v in a.items()}
        _, want = numpy_reference(part, True, (0.0, INF), initial_states=init if i == 0 else None, final=True)
        np.testing.assert_allclose(np.asarray(varlen[i]), want[0], rtol=2e-4, atol=2e-4, err_msg=f"sequence {i}")
    np.testing.assert_allclose(np.asarray(final), np.asarray(varlen[-1:]), rtol=1e-5, atol=1e-5)
    plain = ssd_op()(**a, chunk_size=chunk_size, initial_states=init, seq_idx=jnp.asarray(seq_idx), dt_softplus=True)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(plain))  # the output as without the varlen states


def test_varlen_states_are_forward_only_as_in_mamba_ssm():
    a = inputs(7, b=1)

    def loss(x):
        out, varlen = ssd_op()(**{**a, "x": x}, chunk_size=16, cu_seqlens=jnp.asarray(VARLEN, jnp.int32),
                               return_varlen_states=True)
        return jnp.sum(out) + jnp.sum(varlen)

    assert np.isfinite(float(loss(a["x"])))
    with pytest.raises(NotImplementedError, match="return_varlen_states is not supported in backward"):
        jax.grad(loss)(a["x"])
