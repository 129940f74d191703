"""On a GPU, the row kernels of ``test_xla_row_kernels.py`` inlined (their XLA translation compiled by XLA:GPU) and
launched, against Liger's own launchers on torch tensors (Triton's launch, ``sm_count`` programs read from the
device: 132 on an H200, which leaves the backward's last program fewer rows than the others) at model shapes.

Runs where JAX sees a CUDA device, torch imports and liger_kernel is installed (by hand on the GPU machine:
``bench/results/``); the CPU counterparts check the same launchers against ``jnp``.
"""

from __future__ import annotations

import importlib
import importlib.util

import jax
import numpy as np
import pytest
from helpers import requires_backend, requires_cuda_device

import tritonplug


def _missing() -> str:
    for name in ("torch", "liger_kernel"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed"
    return ""


REASON = _missing()
pytestmark = [pytest.mark.cuda, requires_backend("cuda"), requires_backend("interpret"), requires_cuda_device,
              pytest.mark.skipif(bool(REASON), reason=REASON)]
EPS = 1e-6
ROWS, HIDDEN = 16384, 2048


def _inputs(seed: int, *shapes):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _run(path: str, fn, *args, monkeypatch):
    """``fn(*args)`` jitted with every call ``inline`` (``path`` "inline") or launched; the paths recorded say
    which it took."""
    monkeypatch.setenv("TRITONPLUG_INLINE", "on" if path == "inline" else "off")
    jax.clear_caches()
    before = len(tritonplug.inspection.paths())
    out = [np.asarray(o) for o in jax.jit(fn)(*args)]
    taken = {p.path for p in tritonplug.inspection.paths()[before:]}
    assert taken == {"inlined" if path == "inline" else "launched"}, taken
    return out


@pytest.mark.parametrize("path", ["inline", "launch"])
def test_layer_norm_backward_on_the_devices_program_count(path, monkeypatch):
    torch = importlib.import_module("torch")
    liger = importlib.import_module("liger_kernel.ops.layer_norm")
    launchers = importlib.import_module("xla_row_launchers")
    x, dy, w, b = _inputs(1, (ROWS, HIDDEN), (ROWS, HIDDEN), HIDDEN, HIDDEN)
    t = [torch.tensor(a, device="cuda") for a in (x, dy, w, b)]
    _, _, mean, rstd, _, _ = liger.layer_norm_forward(t[0], t[2], t[3], EPS)
    want = [a.cpu().numpy() for a in liger.layer_norm_backward(t[1], t[0], t[2], t[3], mean, rstd)]
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    assert ROWS % programs, "the point: a program count that does not divide the rows"
    got = _run(path, lambda *a: launchers.layer_norm_backward(*a, programs), dy, x, w, mean.cpu().numpy(),
               rstd.cpu().numpy(), monkeypatch=monkeypatch)
    for g, want_one in zip(got, want, strict=True):
        np.testing.assert_allclose(g, want_one, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("path", ["inline", "launch"])
def test_poly_norm_forward_and_backward(path, monkeypatch):
    torch = importlib.import_module("torch")
    liger = importlib.import_module("liger_kernel.ops.poly_norm")
    launchers = importlib.import_module("xla_row_launchers")
    x, dy = _inputs(2, (ROWS, HIDDEN), (ROWS, HIDDEN))
    x = 0.5 * x
    w, b = np.array([0.3, -0.7, 1.2], np.float32), np.array([0.25], np.float32)
    t = [torch.tensor(a, device="cuda") for a in (x, dy, w, b)]
    y, _, rstd, block, warps = liger.poly_norm_forward(t[0], t[2], t[3], EPS)
    want_bwd = liger.poly_norm_backward(t[1], t[0], t[2], rstd, block, warps, False)
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    got_y, got_rstd = _run(path, lambda *a: launchers.poly_norm_forward(*a, EPS), x, w, b, monkeypatch=monkeypatch)
    np.testing.assert_allclose(got_y, y.cpu().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_rstd, rstd.cpu().numpy(), rtol=1e-5)
    got = _run(path, lambda *a: launchers.poly_norm_backward(*a, programs), dy, x, w, got_rstd,
               monkeypatch=monkeypatch)
    for g, want_one in zip(got, want_bwd[:3], strict=True):
        np.testing.assert_allclose(g, want_one.cpu().numpy().reshape(g.shape), rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("path", ["inline", "launch"])
def test_swiglu_forward_and_backward_on_a_row_narrower_than_its_block(path, monkeypatch):
    """The 1b config's 5632 columns in a block of 8192: inlined, the block is cut to the row's lanes
    (:mod:`tritonplug_interpret.xla.live_block`)."""
    torch = importlib.import_module("torch")
    liger = importlib.import_module("liger_kernel.ops.swiglu")
    port = importlib.import_module("examples.ports.liger_swiglu")
    a, b, dc = _inputs(3, (4096, 5632), (4096, 5632), (4096, 5632))
    t = [torch.tensor(v, device="cuda") for v in (a, b, dc)]
    want_c = liger.swiglu_forward(t[0], t[1])[2].cpu().numpy()
    want = [v.cpu().numpy() for v in liger.swiglu_backward(t[0].clone(), t[1].clone(), t[2])]
    kernels = [port._swiglu_forward_kernel.kernel, port._swiglu_backward_kernel.kernel]
    for kernel in kernels:       # the port's own setting ("auto") rules over TRITONPLUG_INLINE
        tritonplug.set_inline(kernel, path == "inline")
    try:
        (got_c,) = _run(path, lambda *v: [port.swiglu_forward(*v)[2]], a, b, monkeypatch=monkeypatch)
        got = _run(path, port.swiglu_backward, a, b, dc, monkeypatch=monkeypatch)
    finally:
        for kernel in kernels:
            tritonplug.set_inline(kernel, "auto")
    np.testing.assert_allclose(got_c, want_c, rtol=1e-5, atol=1e-6)
    for g, want_one in zip(got, want, strict=True):
        np.testing.assert_allclose(g, want_one, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["inline", "launch"])
def test_rope_with_heads_that_do_not_fill_their_blocks(path, monkeypatch):
    """12 query heads in a block of 16 and 6 key heads in a block of 8: inlined, both head blocks are cut to their
    heads (:mod:`tritonplug_interpret.xla.live_block`)."""
    torch = importlib.import_module("torch")
    liger = importlib.import_module("liger_kernel.ops.rope")
    port = importlib.import_module("examples.ports.liger_rope")
    q, k = _inputs(4, (2, 12, 512, 128), (2, 6, 512, 128))
    angles = np.arange(512)[:, None] * np.geomspace(1.0, 1e-4, 64)[None, :]
    cos = np.cos(np.concatenate([angles, angles], -1)).astype(np.float32)[None]
    sin = np.sin(np.concatenate([angles, angles], -1)).astype(np.float32)[None]
    t = [torch.tensor(v, device="cuda") for v in (q, k, cos, sin)]
    want = [v.cpu().numpy() for v in liger.rope_forward(t[0].clone(), t[1].clone(), t[2], t[3])[:2]]
    tritonplug.set_inline(port._triton_rope.kernel, path == "inline")   # its "auto" rules over TRITONPLUG_INLINE
    try:
        got = _run(path, lambda *v: port.liger_rope(*v), q, k, cos, sin, monkeypatch=monkeypatch)
    finally:
        tritonplug.set_inline(port._triton_rope.kernel, "auto")
    for g, want_one in zip(got, want, strict=True):
        np.testing.assert_allclose(g, want_one, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["inline", "launch"])
def test_dyt_in_column_tiles_and_a_grid_stride_loop(path, monkeypatch):
    """Liger's DyT at Llama's ffn width (5632: column tiles that do not divide the row, folded in the inlined
    translation) and its backward's grid-stride row loop over the device's program count, against Liger's
    ``liger_dyt_fwd`` / ``liger_dyt_bwd``."""
    torch = importlib.import_module("torch")
    liger = importlib.import_module("liger_kernel.ops.dyt")
    launchers = importlib.import_module("xla_more_row_launchers")
    rows, width = 4096, 5632
    x, dy, gamma, beta = _inputs(9, (rows, width), (rows, width), width, width)
    alpha = np.array([0.7], np.float32)
    t = [torch.tensor(a, device="cuda") for a in (x, dy, alpha, gamma, beta)]
    want_y = liger.liger_dyt_fwd(t[0], t[2], t[3], t[4]).cpu().numpy()
    want = [w.cpu().numpy() for w in liger.liger_dyt_bwd(t[1], t[0], t[2], t[3], t[4])]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    y, = _run(path, lambda *a: [launchers.dyt_forward(*a)], x, alpha, gamma, beta, monkeypatch=monkeypatch)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    got = _run(path, lambda dy, x, a, g: launchers.dyt_backward(dy, x, a, g, sms), dy, x, alpha, gamma,
               monkeypatch=monkeypatch)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=1e-4, atol=1e-3 * max(1.0, float(np.abs(w).max())))


@pytest.mark.parametrize("path", ["inline", "launch"])
def test_kl_divergence_over_a_vocabulary_in_column_blocks(path, monkeypatch):
    """Liger's KL divergence at Llama 3's vocabulary (128256 in blocks of 16384: the loop's last trip past the row's
    end, folded in the inlined translation), per-row sums and the whole loss, against Liger's
    ``kldiv_forward_triton`` (whose sum over the rows is taken here on the per-row sums) and its backward kernel."""
    torch = importlib.import_module("torch")
    liger = importlib.import_module("liger_kernel.ops.kl_div")
    launchers = importlib.import_module("xla_more_row_launchers")
    rows, vocab = 64, 128256
    logits, target_logits = _inputs(10, (rows, vocab), (rows, vocab))
    y = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    t = np.asarray(jax.nn.softmax(target_logits, axis=-1))
    ty, tt = torch.tensor(y, device="cuda"), torch.tensor(t, device="cuda")
    want_none = liger.kldiv_forward_triton(ty, tt, False, "none", 1e-10).cpu().numpy()
    want_sum = liger.kldiv_forward_triton(ty, tt, False, "sum", 1e-10).cpu().numpy()
    got_none, got_rows = _run(path, lambda y, t: [launchers.kldiv_forward(y, t, 0), launchers.kldiv_forward(y, t, 1)],
                              y, t, monkeypatch=monkeypatch)
    np.testing.assert_allclose(got_none, want_none, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(got_rows.sum(0), want_sum, rtol=1e-4, atol=1e-6)
    grads, = _run(path, lambda t: [launchers.kldiv_backward(t)], t, monkeypatch=monkeypatch)
    want_grads = liger.kldiv_backward_triton(tt, torch.tensor(1.0, device="cuda"), torch.empty_like(tt), False)
    np.testing.assert_array_equal(grads, want_grads.cpu().numpy())
