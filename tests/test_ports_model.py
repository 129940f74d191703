"""The ports a Llama-style model calls (``examples/ports``): Liger's fused linear cross entropy and FLA's parallel
attention, on the CPU backend, against ``jnp`` references written here (not the ports' own): values and
``jax.grad`` in fp32 and bf16, under ``jit``; the cross entropy's memory (the (BT, V) logits never exist whole);
the options the ports refuse.

Needs the pinned libraries (``tox -e corpus`` installs liger-kernel 0.8.5 and fla-core 0.6.0 with ``--no-deps``:
no torch) and the interpret plugin; skipped where they are not installed.
"""

from __future__ import annotations

import functools
import importlib.machinery

import pytest
from helpers import requires_backend


def _installed(package: str) -> bool:
    return importlib.machinery.PathFinder.find_spec(package) is not None  # finds, never imports


pytestmark = [
    requires_backend("interpret"),
    pytest.mark.skipif(not (_installed("liger_kernel") and _installed("fla")),
                       reason="liger_kernel or fla is not installed (tox -e corpus installs them)"),
]

HOST_CALL = "tritonplug_host_kernel"  # the interpreter fallback's FFI target: absent when XLA runs every kernel


@pytest.fixture(scope="module")
def jnp_modules():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from ports import fla_parallel_attention, liger_fused_linear_cross_entropy

    return jax, jnp, np, liger_fused_linear_cross_entropy, fla_parallel_attention


# ------------------------------------------------------------------ references (independent of the ports)


def nll_reference(x, w, target, ignore_index=-100, reduction="mean"):
    """Logits whole, in fp32, ``log_softmax``, the negative log-likelihood of the targets not ignored."""
    import jax
    import jax.numpy as jnp

    logits = jnp.einsum("th,vh->tv", x.astype(jnp.float32), w.astype(jnp.float32))
    logp = logits - jax.scipy.special.logsumexp(logits, axis=-1, keepdims=True)
    keep = target != ignore_index
    picked = jnp.take_along_axis(logp, jnp.where(keep, target, 0)[:, None], axis=1)[:, 0]
    total = -jnp.sum(jnp.where(keep, picked, 0.0))
    return total / jnp.sum(keep) if reduction == "mean" else total


def causal_attention_reference(q, k, v, scale=None):
    """Softmax attention in fp32 over keys ``j <= i``; query head ``h`` reads key/value head ``h // group``."""
    import jax.numpy as jnp

    B, T, HQ, D = q.shape
    group = HQ // k.shape[2]
    qg = q.astype(jnp.float32).reshape(B, T, k.shape[2], group, D)
    s = jnp.einsum("bqhgd,bkhd->bhgqk", qg, k.astype(jnp.float32)) * (D ** -0.5 if scale is None else scale)
    s = jnp.where(jnp.arange(T)[:, None] >= jnp.arange(T)[None, :], s, -jnp.inf)
    p = jnp.exp(s - s.max(-1, keepdims=True))
    o = jnp.einsum("bhgqk,bkhe->bqhge", p / p.sum(-1, keepdims=True), v.astype(jnp.float32))
    return o.reshape(B, T, HQ, v.shape[-1])


def _close(np, got, want, tol, what):
    for name, g, w in zip(("value", "grad 0", "grad 1", "grad 2"), got, want, strict=False):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        np.testing.assert_allclose(g, w, rtol=tol[0], atol=tol[1], err_msg=f"{what}: {name}")


# ------------------------------------------------------------------ Liger fused linear cross entropy


def _flce_inputs(jax, jnp, dtype, BT=50, H=32, V=300, seed=0):
    kx, kw, kt = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, (BT, H), jnp.float32).astype(dtype)
    w = (jax.random.normal(kw, (V, H), jnp.float32) / H ** 0.5).astype(dtype)
    target = jax.random.randint(kt, (BT,), 0, V).at[::7].set(-100).at[3].set(V - 1)
    return x, w, target


#: (loss rtol, atol), (grad rtol, atol): bf16 logits and gradients are rounded to 8 bits, as Liger's are
FLCE_TOL = {"float32": ((1e-5, 1e-6), (1e-4, 1e-6)), "bfloat16": ((1e-2, 1e-2), (3e-2, 2e-3))}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("chunk_size", [None, 16, 64])  # Liger's (8 here), a chunk BT is not a multiple of, one
def test_fused_linear_cross_entropy_matches_the_whole_logits(jnp_modules, dtype, chunk_size):
    jax, jnp, np, flce, _ = jnp_modules
    x, w, target = _flce_inputs(jax, jnp, getattr(jnp, dtype))
    loss = functools.partial(flce.fused_linear_cross_entropy, chunk_size=chunk_size)
    got = jax.jit(jax.value_and_grad(lambda x, w: 2.5 * loss(x, w, target), argnums=(0, 1)))(x, w)
    want = jax.value_and_grad(lambda x, w: 2.5 * nll_reference(x, w, target), argnums=(0, 1))(x, w)
    assert got[0].dtype == jnp.float32 and got[1][0].dtype == x.dtype and got[1][1].dtype == w.dtype
    (loss_tol, grad_tol) = FLCE_TOL[dtype]
    _close(np, [got[0]], [want[0]], loss_tol, f"loss {dtype} chunk {chunk_size}")
    _close(np, got[1], want[1], grad_tol, f"grads {dtype} chunk {chunk_size}")
    assert float(jnp.max(jnp.abs(got[1][0][::7]))) == 0.0  # ignored tokens get no gradient


def test_fused_linear_cross_entropy_sum_and_a_sum_of_losses_under_jit(jnp_modules):
    jax, jnp, np, flce, _ = jnp_modules
    x, w, target = _flce_inputs(jax, jnp, jnp.float32, BT=37, seed=1)
    other = jnp.roll(target, 5)

    def total(fn, **kw):
        return lambda x, w: fn(x, w, target, **kw) - 0.5 * fn(x, w, other, **kw)

    op = functools.partial(flce.fused_linear_cross_entropy, chunk_size=8)
    for kw in ({"reduction": "sum"}, {}):
        got = jax.jit(jax.value_and_grad(total(op, **kw), argnums=(0, 1)))(x, w)
        want = jax.value_and_grad(total(nll_reference, **kw), argnums=(0, 1))(x, w)
        _close(np, [got[0], *got[1]], [want[0], *want[1]], (2e-5, 1e-5), f"sum of losses {kw}")
    eager = flce.fused_linear_cross_entropy(x, w, target)  # no jit: the primal alone (no gradient work)
    np.testing.assert_allclose(eager, nll_reference(x, w, target), rtol=1e-5)


def test_fused_linear_cross_entropy_gradients_keep_each_input_dtype(jnp_modules):
    jax, jnp, np, flce, _ = jnp_modules
    x, w, target = _flce_inputs(jax, jnp, jnp.bfloat16, BT=24, seed=4)
    gx, gw = jax.jit(jax.grad(lambda x, w: flce.fused_linear_cross_entropy(x, w, target), argnums=(0, 1)))(
        x, w.astype(jnp.float32))
    assert (gx.dtype, gw.dtype) == (jnp.bfloat16, jnp.float32)
    want = jax.grad(nll_reference, argnums=(0, 1))(x, w.astype(jnp.float32), target)
    _close(np, [gx, gw], want, FLCE_TOL["bfloat16"][1], "bf16 x, fp32 W")


def test_fused_linear_cross_entropy_never_holds_the_logits(jnp_modules, monkeypatch):
    """BT * V logits are 16 MiB in fp32; the chunked op's temporaries are a fraction (grad W, one chunk's logits),
    while the plain jnp loss holds them (and their gradient) whole. Measured as users run it: without the CPU
    backend's bounds checks (``TRITONPLUG_INTERPRET_CHECK``, off by default, on in the test envs), whose per-lane
    bookkeeping holds every program's lanes at once where the XLA path runs a kernel's programs together (the
    cross-entropy kernel's row loop since it is vectorised: 7.1 MB checked, 2.4 MB not)."""
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")
    jax, jnp, np, flce, _ = jnp_modules
    BT, H, V = 512, 64, 8192
    x, w, target = _flce_inputs(jax, jnp, jnp.float32, BT=BT, H=H, V=V, seed=2)
    logits_bytes = BT * V * 4

    def temp_bytes(fn):
        compiled = jax.jit(jax.value_and_grad(lambda x, w: fn(x, w, target), argnums=(0, 1))).lower(x, w).compile()
        return compiled.memory_analysis().temp_size_in_bytes, compiled

    fused, compiled = temp_bytes(flce.fused_linear_cross_entropy)
    whole, _ = temp_bytes(nll_reference)
    assert whole > logits_bytes, (whole, logits_bytes)
    assert fused < logits_bytes / 4, (fused, logits_bytes)
    loss, (gx, gw) = compiled(x, w)
    want_loss, (want_gx, want_gw) = jax.value_and_grad(nll_reference, argnums=(0, 1))(x, w, target)
    _close(np, [loss, gx, gw], [want_loss, want_gx, want_gw], (1e-4, 1e-6), "512 x 8192")


def test_fused_linear_cross_entropy_refuses_what_it_does_not_port(jnp_modules):
    jax, jnp, _, flce, _ = jnp_modules
    x, w, target = _flce_inputs(jax, jnp, jnp.float32, BT=8)
    with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum'"):
        flce.fused_linear_cross_entropy(x, w, target, reduction="none")
    with pytest.raises(TypeError, match="target must be integers"):
        flce.fused_linear_cross_entropy(x, w, target.astype(jnp.float32))
    with pytest.raises(ValueError, match="want x"):
        flce.fused_linear_cross_entropy(x, w[:, :-1], target)
    with pytest.raises(ValueError, match="chunk_size"):
        flce.fused_linear_cross_entropy(x, w, target, chunk_size=0)


# ------------------------------------------------------------------ FLA parallel attention


def _qkv(jax, jnp, shape, dtype, seed=0):
    B, T, HQ, H, D = shape
    kq, kk, kv, kd = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(kq, (B, T, HQ, D), jnp.float32).astype(dtype)
    k = jax.random.normal(kk, (B, T, H, D), jnp.float32).astype(dtype)
    v = jax.random.normal(kv, (B, T, H, D), jnp.float32).astype(dtype)
    return q, k, v, jax.random.normal(kd, (B, T, HQ, D), jnp.float32).astype(dtype)


ATTENTION_CASES = {  # (B, T, HQ, H, D), dtype, (rtol, atol) for o and for the gradients
    "mha": ((2, 40, 2, 2, 16), "float32", (1e-5, 1e-5), (1e-4, 1e-4)),
    "gqa": ((1, 40, 4, 2, 16), "float32", (1e-5, 1e-5), (1e-4, 1e-4)),
    "gqa_bf16": ((1, 40, 4, 2, 16), "bfloat16", (2e-2, 2e-2), (3e-2, 5e-2)),
    "several_blocks": ((1, 136, 1, 1, 16), "float32", (1e-5, 1e-5), (1e-4, 1e-4)),  # T > the 128 / 64 row tiles
}


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_parallel_attention_matches_causal_softmax_attention(jnp_modules, case):
    jax, jnp, np, _, fla = jnp_modules
    shape, dtype, o_tol, grad_tol = ATTENTION_CASES[case]
    q, k, v, do = _qkv(jax, jnp, shape, getattr(jnp, dtype))
    o = jax.jit(fla.attention)(q, k, v)
    assert o.shape == q.shape and o.dtype == q.dtype
    _close(np, [o], [causal_attention_reference(q, k, v)], o_tol, f"{case}: o vs the jnp reference")
    if dtype == "float32":  # JAX's own attention (GQA native), checked in fp32 where its rounding is fp32's
        _close(np, [o], [jax.nn.dot_product_attention(q, k, v, is_causal=True)], o_tol, f"{case}: o vs jax.nn")

    def loss(fn):
        return lambda q, k, v: jnp.sum(fn(q, k, v).astype(jnp.float32) * do.astype(jnp.float32))

    got = jax.jit(jax.grad(loss(fla.attention), argnums=(0, 1, 2)))(q, k, v)
    up = [a.astype(jnp.float32) for a in (q, k, v)]
    want = jax.grad(loss(causal_attention_reference), argnums=(0, 1, 2))(*up)
    assert [g.dtype for g in got] == [q.dtype] * 3
    for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float32), w, rtol=grad_tol[0], atol=grad_tol[1],
                                   err_msg=f"{case}: {name}")


def test_parallel_attention_scale_and_grad_of_a_sum_under_jit(jnp_modules):
    jax, jnp, np, _, fla = jnp_modules
    q, k, v, _ = _qkv(jax, jnp, (1, 24, 2, 1, 16), jnp.float32, seed=3)
    got = jax.jit(jax.grad(lambda q, k, v: jnp.sum(fla.attention(q, k, v, scale=0.1) ** 2), argnums=(0, 1, 2)))(
        q, k, v)
    want = jax.grad(lambda q, k, v: jnp.sum(causal_attention_reference(q, k, v, 0.1) ** 2), argnums=(0, 1, 2))(
        q, k, v)
    for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(fla.attention(q, k, v, scale=0.1), causal_attention_reference(q, k, v, 0.1),
                               rtol=1e-5, atol=1e-5)  # eagerly


def test_parallel_attention_refuses_what_it_does_not_port(jnp_modules):
    jax, jnp, _, _, fla = jnp_modules
    q, k, v, _ = _qkv(jax, jnp, (1, 8, 2, 1, 16), jnp.float32)
    with pytest.raises(NotImplementedError, match="causal only"):
        fla.attention(q, k, v, causal=False)
    for option in ({"g": q[..., 0]}, {"window_size": 4}, {"cu_seqlens": jnp.array([0, 8])},
                   {"sink_bias": jnp.zeros(2)}):
        with pytest.raises(NotImplementedError, match=f"{next(iter(option))} not ported"):
            fla.attention(q, k, v, **option)
    with pytest.raises(ValueError, match="must be divisible"):  # 3 query heads over 2 key/value heads
        fla.attention(jnp.concatenate([q, q[:, :, :1]], axis=2), jnp.concatenate([k, k], axis=2),
                      jnp.concatenate([v, v], axis=2))
    with pytest.raises(ValueError, match="want q"):
        fla.attention(q, k[:, :4], v[:, :4])


# ------------------------------------------------------------------ which CPU path ran them


def test_every_kernel_of_both_ports_is_translated_to_xla(jnp_modules, monkeypatch):
    """On the default CPU path (XLA) no kernel of either port falls back to Triton's interpreter, bf16 included."""
    jax, jnp, _, flce, fla = jnp_modules
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "xla")
    x, w, target = _flce_inputs(jax, jnp, jnp.bfloat16, BT=20)
    q, k, v, _ = _qkv(jax, jnp, (1, 20, 4, 2, 16), jnp.bfloat16)
    programs = {
        "flce": (jax.grad(lambda x, w: flce.fused_linear_cross_entropy(x, w, target), argnums=(0, 1)), (x, w)),
        "attention": (jax.grad(lambda q, k, v: jnp.sum(fla.attention(q, k, v)).astype(jnp.float32),
                               argnums=(0, 1, 2)), (q, k, v)),
    }
    for name, (fn, args) in programs.items():
        text = jax.jit(fn).lower(*args).as_text()
        assert HOST_CALL not in text, f"{name}: a kernel runs in Triton's interpreter"
