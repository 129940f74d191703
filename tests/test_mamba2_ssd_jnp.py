"""``examples/mamba2/ssd_jnp.py``: the chunked ``jnp`` SSD against an independent sequential recurrence in NumPy
(float64, one time step after another), and its gradients against ``jax.grad`` of the same recurrence written as
a ``lax.scan``: sequences that are and are not multiples of the chunk, groups shared by several heads, every
optional argument."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


def _inputs(seed, b, seq, h, g, p, n, dtype="float32", D="h", z=True, bias=True):
    """Random SSD arguments (NumPy, fp32): ``dt`` around 0 (softplus'd or clipped), ``A`` negative."""
    rng = np.random.default_rng(seed)
    f = lambda *s, scale=1.0: (scale * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    args = {"x": f(b, seq, h, p), "dt": f(b, seq, h, scale=0.5), "A": -rng.uniform(0.2, 1.5, h).astype(np.float32),
            "B": f(b, seq, g, n), "C": f(b, seq, g, n),
            "D": {"h": f(h), "hp": f(h, p), None: None}[D], "z": f(b, seq, h, p) if z else None,
            "dt_bias": f(h, scale=0.5) if bias else None}
    return {k: (v.astype(dtype) if v is not None and k in ("x", "B", "C", "z") else v) for k, v in args.items()}


def _dt_reference(dt, dt_bias, softplus, limit):
    step = dt.astype(np.float64) + (0.0 if dt_bias is None else dt_bias.astype(np.float64))
    if softplus:
        step = np.where(step <= 20.0, np.log1p(np.exp(np.minimum(step, 20.0))), step)
    return np.clip(step, *limit)


def reference(x, dt, A, B, C, D=None, z=None, dt_bias=None, softplus=False, limit=(0.0, np.inf), init=None,
              final=False, seq_idx=None):
    """The recurrence, one step at a time, in float64, from the state ``init`` (default zeros); with ``final``
    also the state after the last step; with ``seq_idx`` the state zeroed where a step's id differs from the step
    before's (id 0 before the first)."""
    x, A, B, C = (np.asarray(a, np.float64) for a in (x, A, B, C))
    step = _dt_reference(np.asarray(dt), dt_bias, softplus, limit)
    b, seq, h, p = x.shape
    r = h // B.shape[2]
    state = np.zeros((b, h, p, B.shape[3])) if init is None else np.asarray(init, np.float64)
    y = np.empty_like(x)
    ids = np.zeros((b, seq + 1), int) if seq_idx is None else np.pad(np.asarray(seq_idx), [(0, 0), (1, 0)])
    for t in range(seq):
        state = np.where((ids[:, t + 1] != ids[:, t])[:, None, None, None], 0.0, state)
        Bt, Ct = np.repeat(B[:, t], r, axis=1), np.repeat(C[:, t], r, axis=1)  # (b, h, n): head i in group i // r
        decay = np.exp(step[:, t] * A)[:, :, None, None]
        state = decay * state + step[:, t, :, None, None] * x[:, t, :, :, None] * Bt[:, :, None, :]
        y[:, t] = np.einsum("bhpn,bhn->bhp", state, Ct)
    if D is not None:
        D = np.asarray(D, np.float64)
        y = y + x * (D[:, None] if D.ndim == 1 else D)
    if z is not None:
        z = np.asarray(z, np.float64)
        y = y * z / (1.0 + np.exp(-z))
    return (y, state) if final else y


def scan_reference(x, dt, A, B, C, D=None, z=None, dt_bias=None, softplus=False, limit=(0.0, float("inf")),
                   init=None, final=False, seq_idx=None):
    """The same recurrence in ``jax`` (fp32), as a ``lax.scan`` over time: what ``jax.grad`` differentiates."""
    import jax
    import jax.numpy as jnp

    step = dt + (0.0 if dt_bias is None else dt_bias)
    if softplus:
        step = jnp.where(step <= 20.0, jax.nn.softplus(jnp.minimum(step, 20.0)), step)
    step = jnp.where(step < limit[0], limit[0], jnp.where(step > limit[1], limit[1], step))
    b, seq, h, p = x.shape
    r = h // B.shape[2]

    ids = jnp.zeros((b, seq), jnp.int32) if seq_idx is None else jnp.asarray(seq_idx, jnp.int32)
    new = ids != jnp.pad(ids, [(0, 0), (1, 0)])[:, :-1]  # a sequence starts at this step

    def one(state, t):
        xt, st, Bt, Ct, restart = t
        state = jnp.where(restart[:, None, None, None], 0.0, state)
        Bt, Ct = jnp.repeat(Bt, r, axis=1), jnp.repeat(Ct, r, axis=1)
        state = jnp.exp(st * A)[:, :, None, None] * state + st[:, :, None, None] * xt[..., None] * Bt[:, :, None]
        return state, jnp.einsum("bhpn,bhn->bhp", state, Ct)

    time_major = [jnp.moveaxis(a, 1, 0) for a in (x, step, B, C, new)]
    last, y = jax.lax.scan(one, jnp.zeros((b, h, p, B.shape[3])) if init is None else init, time_major)
    y = jnp.moveaxis(y, 0, 1)
    if D is not None:
        y = y + x * (D[:, None] if D.ndim == 1 else D)
    y = y if z is None else y * jax.nn.silu(z)
    return (y, last) if final else y


def _ssd(args, chunk, softplus=False, limit=(0.0, float("inf"))):
    import jax

    from examples.mamba2.ssd_jnp import ssd

    fn = jax.jit(lambda a: ssd(a["x"], a["dt"], a["A"], a["B"], a["C"], chunk, D=a["D"], z=a["z"],
                               dt_bias=a["dt_bias"], dt_softplus=softplus, dt_limit=limit))
    return fn(args)


@settings(max_examples=20, deadline=None)
@given(b=st.integers(1, 2), seq=st.integers(1, 37), chunk=st.sampled_from([1, 4, 8, 16]),
       heads=st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3), (6, 2)]), p=st.integers(1, 4), n=st.integers(1, 5),
       D=st.sampled_from([None, "h", "hp"]), z=st.booleans(), bias=st.booleans(), softplus=st.booleans(),
       limit=st.sampled_from([(0.0, float("inf")), (0.05, 0.6)]), seed=st.integers(0, 2**16))
def test_the_chunked_ssd_is_the_sequential_recurrence(b, seq, chunk, heads, p, n, D, z, bias, softplus, limit, seed):
    h, g = heads
    args = _inputs(seed, b, seq, h, g, p, n, D=D, z=z, bias=bias)
    got = np.asarray(_ssd(args, chunk, softplus, limit))
    want = reference(**args, softplus=softplus, limit=limit)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * max(1.0, float(np.max(np.abs(want)))))


@pytest.mark.parametrize("seq, chunk", [(64, 16), (50, 16), (7, 32)])
def test_bf16_inputs_give_the_recurrence_to_bf16_precision(seq, chunk):
    """bf16 ``x``/``B``/``C``/``z`` (fp32 ``dt``, ``A``, ``D``, ``dt_bias``): a bf16 result within bf16 rounding of
    the float64 recurrence of the same (rounded) inputs."""
    import jax.numpy as jnp

    args = _inputs(1, 2, seq, 4, 1, 8, 16, dtype=jnp.bfloat16)
    got = _ssd(args, chunk, softplus=True)
    assert got.dtype == jnp.bfloat16
    want = reference(**{k: (None if v is None else np.asarray(v, np.float32)) for k, v in args.items()},
                     softplus=True)
    scale = float(np.max(np.abs(want)))
    np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=3e-2, atol=3e-2 * scale)


def test_decay_over_many_chunks_keeps_the_nearby_chunks_exact():
    """256 chunks of strong decay: the inter-chunk decays are sums of nearby chunks' own terms, not differences of
    prefix sums that reach thousands (those round away the contribution of the previous chunk)."""
    args = _inputs(5, 1, 1024, 2, 1, 2, 3, D=None, z=False, bias=False)
    args["dt"] = np.abs(args["dt"]) * 4 + 1  # dt' in [1, ...]: the log-decay sums to -thousands over the sequence
    got = np.asarray(_ssd(args, 4))
    want = reference(**args)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * float(np.max(np.abs(want))))


@pytest.mark.parametrize("seq, chunk, within, steps", [(64, 4, 4, 4), (52, 4, 1, 13), (30, 2, 3, 5)])
def test_chunks_done_in_steps_give_the_recurrence(seq, chunk, within, steps, monkeypatch):
    """Where the ``(chunk, chunk)`` tensors would exceed ``WITHIN_ELEMENTS``, the chunks go in steps (``lax.map``):
    ``within`` chunks at a time, whatever divides the chunks (13 chunks: one at a time)."""
    from examples.mamba2 import ssd_jnp

    b, h, g = 2, 4, 2
    monkeypatch.setattr(ssd_jnp, "WITHIN_ELEMENTS", within * b * h * chunk * chunk)
    args = _inputs(11, b, seq, h, g, 3, 4)
    got = np.asarray(_ssd(args, chunk, softplus=True))
    want = reference(**args, softplus=True)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * float(np.max(np.abs(want))))
    hlo = _ssd_text(args, chunk)
    assert ("while" in hlo) == (steps > 1)


def _ssd_text(args, chunk) -> str:
    import jax

    from examples.mamba2.ssd_jnp import ssd

    return jax.jit(lambda a: ssd(a["x"], a["dt"], a["A"], a["B"], a["C"], chunk)).lower(args).as_text()


@pytest.mark.parametrize("b, seq, h, g, p, n, chunk, D, softplus, limit, within", [
    (2, 24, 4, 2, 3, 4, 8, "h", True, (0.0, float("inf")), None),
    (1, 19, 2, 1, 4, 3, 8, "hp", False, (0.05, 0.6), None),
    (1, 16, 3, 3, 2, 5, 16, None, True, (0.1, 0.4), None),
    (2, 40, 4, 2, 3, 4, 4, "h", True, (0.0, float("inf")), 2),  # 10 chunks, 2 at a time: lax.map's backward
])
def test_gradients_equal_those_of_the_scan_recurrence(b, seq, h, g, p, n, chunk, D, softplus, limit, within,
                                                      monkeypatch):
    import jax
    import jax.numpy as jnp

    from examples.mamba2 import ssd_jnp
    from examples.mamba2.ssd_jnp import ssd

    if within:
        monkeypatch.setattr(ssd_jnp, "WITHIN_ELEMENTS", within * b * h * chunk * chunk)

    args = {k: (None if v is None else jnp.asarray(v)) for k, v in _inputs(7, b, seq, h, g, p, n, D=D).items()}
    cot = jnp.asarray(np.random.default_rng(8).standard_normal((b, seq, h, p)), jnp.float32)
    names = [k for k, v in args.items() if v is not None]

    def grads(f):
        def objective(*values):
            a = {**args, **dict(zip(names, values, strict=True))}
            return jnp.vdot(f(a), cot)
        return jax.jit(jax.grad(objective, argnums=tuple(range(len(names)))))(*(args[k] for k in names))

    got = grads(lambda a: ssd(a["x"], a["dt"], a["A"], a["B"], a["C"], chunk, D=a["D"], z=a["z"],
                              dt_bias=a["dt_bias"], dt_softplus=softplus, dt_limit=limit))
    with jax.default_matmul_precision("highest"):
        want = grads(lambda a: scan_reference(**a, softplus=softplus, limit=limit))
    for name, a, w in zip(names, got, want, strict=True):
        a, w = np.asarray(a), np.asarray(w)
        assert np.any(w != 0), name  # each gradient is exercised
        np.testing.assert_allclose(a, w, rtol=1e-3, atol=1e-3 * max(1.0, float(np.max(np.abs(w)))), err_msg=name)


@pytest.mark.parametrize("change, message", [
    (dict(x=np.zeros((2, 3, 4))), "`x` must be (batch, seq, heads, head_dim)"),
    (dict(B=np.zeros((1, 9, 1, 4), np.float32)), "`B` must be (batch, seq, groups, state)"),
    (dict(B=np.zeros((1, 8, 3, 4), np.float32), C=np.zeros((1, 8, 3, 4), np.float32)),
     "`B` must be groups dividing the 4 heads, got 3 groups"),
    (dict(C=np.zeros((1, 8, 2, 5), np.float32)), "`C` must be shape (1, 8, 2, 4)"),
    (dict(dt=np.zeros((1, 8, 2), np.float32)), "`dt` must be shape (1, 8, 4)"),
    (dict(A=np.zeros((1, 4), np.float32)), "`A` must be shape (4,)"),
    (dict(D=np.zeros((4, 3), np.float32)), "`D` must be shape (4,) or (4, 2)"),
    (dict(z=np.zeros((1, 8, 4, 3), np.float32)), "`z` must be shape (1, 8, 4, 2)"),
    (dict(dt_bias=np.zeros((2,), np.float32)), "`dt_bias` must be shape (4,)"),
    (dict(x=np.zeros((1, 8, 4, 2), np.int32)), "`x` must be a floating-point array"),
    (dict(chunk_size=0), "`chunk_size` must be a positive int, got 0"),
    (dict(chunk_size=8.0), "`chunk_size` must be a positive int, got 8.0"),
    (dict(dt_limit=(1.0, 0.5)), "`dt_limit` must be (low, high) with low <= high"),
    (dict(dt_limit=3.0), "`dt_limit` must be a pair of numbers"),
])
def test_bad_arguments_are_refused_naming_the_argument(change, message):
    from examples.mamba2.ssd_jnp import ssd

    args = {**_inputs(0, 1, 8, 4, 2, 2, 4), "chunk_size": 4, **change}
    x, dt, A, B, C = (args.pop(k) for k in ("x", "dt", "A", "B", "C"))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        ssd(x, dt, A, B, C, **args)


def _packed(b, seq, chunk):
    """Sequence ids for rows of ``seq`` steps: row 0 starts sequences inside the first chunk, at the second chunk's
    first step, and one step before the end; row 1 is one sequence of id 2 (its initial state unused)."""
    row = np.zeros(seq, np.int32)
    for start in sorted({min(3, seq - 1), min(chunk, seq - 1), seq - 1} - {0}):
        row[start:] += 1
    return np.stack([row] + [np.full(seq, 2, np.int32)] * (b - 1))


@pytest.mark.parametrize("packed", [False, True], ids=["one-sequence", "seq_idx"])
@pytest.mark.parametrize("seq, chunk, within", [(37, 8, None), (64, 4, 2), (5, 16, None)])
def test_initial_and_final_states_are_the_recurrences(seq, chunk, within, packed, monkeypatch):
    """``initial_states`` (the state before the first step) and ``return_final_states`` (the state after the last,
    past a partial chunk's padding too), the chunks at once or in steps, alone and with packed sequences
    (``seq_idx``: :func:`_packed`); and their gradients, the initial states' included, with a cotangent on both
    outputs."""
    import jax
    import jax.numpy as jnp

    from examples.mamba2 import ssd_jnp

    b, h, g, p, n = 2, 4, 2, 3, 4
    if within:
        monkeypatch.setattr(ssd_jnp, "WITHIN_ELEMENTS", within * b * h * chunk * chunk)
    args = {k: (None if v is None else jnp.asarray(v)) for k, v in _inputs(9, b, seq, h, g, p, n).items()}
    rng = np.random.default_rng(10)
    init = jnp.asarray(rng.standard_normal((b, h, p, n)), jnp.float32)
    seq_idx = _packed(b, seq, chunk) if packed else None
    options = dict(dt_softplus=True, return_final_states=True, seq_idx=seq_idx)
    call = jax.jit(lambda a, init: ssd_jnp.ssd(**a, chunk_size=chunk, initial_states=init, **options))
    y, last = call(args, init)
    assert last.shape == (b, h, p, n) and last.dtype == jnp.float32
    want_y, want_last = reference(**{k: None if v is None else np.asarray(v) for k, v in args.items()},
                                  softplus=True, init=np.asarray(init), final=True, seq_idx=seq_idx)
    for got, want in ((y, want_y), (last, want_last)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-4 * max(1.0, float(np.abs(want).max())))

    names = [k for k, v in args.items() if v is not None]
    cot_y, cot_last = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in (y.shape, last.shape))

    def grads(f):
        def objective(*values):
            *rest, init = values
            y, last = f({**args, **dict(zip(names, rest, strict=True))}, init)
            return jnp.vdot(y, cot_y) + jnp.vdot(last, cot_last)
        return jax.jit(jax.grad(objective, argnums=tuple(range(len(names) + 1))))(*(args[k] for k in names), init)

    got = grads(lambda a, init: ssd_jnp.ssd(**a, chunk_size=chunk, initial_states=init, **options))
    with jax.default_matmul_precision("highest"):
        want = grads(lambda a, init: scan_reference(**a, softplus=True, init=init, final=True, seq_idx=seq_idx))
    for name, a, w in zip([*names, "initial_states"], got, want, strict=True):
        a, w = np.asarray(a), np.asarray(w)
        np.testing.assert_allclose(a, w, rtol=1e-3, atol=1e-3 * max(1.0, float(np.max(np.abs(w)))), err_msg=name)


@pytest.mark.parametrize("change, error, message", [
    (dict(initial_states=np.zeros((1, 4, 4, 2), np.float32)), ValueError,
     "`initial_states` must be shape (1, 4, 2, 4)"),
    (dict(initial_states=np.zeros((1, 4, 2, 4), np.int32)), ValueError, "`initial_states` must be a floating-point"),
    (dict(return_final_states=1), ValueError, "`return_final_states` must be a bool"),
    (dict(seq_idx=np.zeros((1, 7), np.int32)), ValueError, "`seq_idx` must be integers of shape (1, 8)"),
    (dict(seq_idx=np.zeros((1, 8), np.float32)), ValueError, "`seq_idx` must be integers of shape (1, 8)"),
    (dict(return_varlen_states=True), NotImplementedError, "`return_varlen_states` is not supported"),
])
def test_bad_state_arguments_are_refused_naming_the_argument(change, error, message):
    from examples.mamba2.ssd_jnp import ssd

    args = {**_inputs(0, 1, 8, 4, 2, 2, 4), "chunk_size": 4, **change}
    x, dt, A, B, C = (args.pop(k) for k in ("x", "dt", "A", "B", "C"))
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        ssd(x, dt, A, B, C, **args)
