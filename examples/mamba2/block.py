"""The Mamba-2 mixer of one layer, its SSD taken from an op choice.

    z, x, B, C, dt = h @ W_in                  (one in-projection, split)
    x, B, C = silu(causal_conv1d(x, B, C))     (depthwise, width ``conv_width``, over time)
    y = SSD(x, dt, A = -exp(A_log), B, C, D, dt_bias, dt_softplus=True)
    out = RMSNorm(y * silu(z)) @ W_out          (gated RMSNorm, per group of channels: Mamba-2's norm_before_gate=False)

SSD choices (:data:`SSD`): ``jax``, the chunked SSD in ``jnp`` (``ssd_jnp.py``); ``tritonplug``, mamba-ssm's
Triton kernels through tritonplug (``examples/ports/mamba_ssd.py``, imported on first use, so the ``jax`` choice
needs neither it nor mamba-ssm's source). Both take ``mamba_chunk_scan_combined``'s arguments. The RMSNorm is the
Llama example's op (``examples/llama/ops.py``), of the choice the caller passes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import jax
import jax.numpy as jnp

from .config import Mamba2Config
from .ssd_jnp import ssd as ssd_jax

#: the module of the Triton port, and its function
PORT_MODULE, PORT_FUNCTION = "examples.ports.mamba_ssd", "mamba_chunk_scan_combined"


def ssd_tritonplug(*args, **kwargs) -> jax.Array:
    """mamba-ssm's ``mamba_chunk_scan_combined``, forward and backward, through tritonplug."""
    try:
        port = importlib.import_module(PORT_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != PORT_MODULE:
            raise
        raise ModuleNotFoundError(f"the `tritonplug` SSD choice needs {PORT_MODULE} (issue 40's port of mamba-ssm's "
                                  f"SSD kernels), which is not here; the `jax` choice runs without it",
                                  name=PORT_MODULE) from exc
    return getattr(port, PORT_FUNCTION)(*args, **kwargs)


SSD: dict[str, Callable[..., jax.Array]] = {"jax": ssd_jax, "tritonplug": ssd_tritonplug}
CHOICES = tuple(SSD)


def init_layers(cfg: Mamba2Config, key: jax.Array) -> dict:
    """fp32 params of the ``layers`` mixers, stacked on a leading axis, as mamba-ssm's ``Mamba2`` initialises
    them: ``dt_bias`` the inverse softplus of step sizes log-uniform in ``[dt_min, dt_max]``, ``A_log`` the log of
    a uniform draw in [1, 16], ``D`` ones, the convolution uniform in ``+-1/sqrt(conv_width)`` (torch's default) with
    a zero bias; the projections normal(0, 0.02), the out-projection scaled by ``1/sqrt(2 * layers)`` as the Llama
    example's residual outputs."""
    L, d = cfg.layers, cfg.hidden
    k_in, k_conv, k_dt, k_a, k_out = jax.random.split(key, 5)
    dt = jnp.exp(jax.random.uniform(k_dt, (L, cfg.heads), jnp.float32, jnp.log(cfg.dt_min), jnp.log(cfg.dt_max)))
    bound = cfg.conv_width ** -0.5  # torch's Conv1d default: uniform in +-1/sqrt(fan_in), fan_in = width
    return {
        "mixer_norm": jnp.ones((L, d), jnp.float32),
        "w_in": 0.02 * jax.random.normal(k_in, (L, d, cfg.in_features), jnp.float32),
        "conv_w": jax.random.uniform(k_conv, (L, cfg.conv_width, cfg.conv_channels), jnp.float32, -bound, bound),
        "conv_b": jnp.zeros((L, cfg.conv_channels), jnp.float32),
        "dt_bias": dt + jnp.log(-jnp.expm1(-dt)),  # softplus(dt_bias) = dt
        "A_log": jnp.log(jax.random.uniform(k_a, (L, cfg.heads), jnp.float32, 1.0, 16.0)),
        "D": jnp.ones((L, cfg.heads), jnp.float32),
        "gate_norm": jnp.ones((L, cfg.inner), jnp.float32),
        "w_out": 0.02 / (2 * L) ** 0.5 * jax.random.normal(k_out, (L, cfg.inner, d), jnp.float32),
    }


#: params kept in fp32 inside the layer (the SSD's per-head scalars, as mamba-ssm keeps them); the rest are cast
#: to the compute dtype
FP32_PARAMS = ("dt_bias", "A_log", "D")


def causal_conv(x: jax.Array, w: jax.Array, b: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
    """Depthwise causal convolution over time: ``out[t, c] = b[c] + sum_k w[k, c] x[t - width + 1 + k, c]`` (zeros
    before the start), accumulated in fp32; ``x`` ``(batch, seq, channels)``, ``w`` ``(width, channels)``. With
    ``seq_idx`` ``(batch, seq)`` (packed sequences) a step reads only earlier steps of its own sequence, as
    mamba-ssm's ``causal_conv1d`` with ``seq_idx``."""
    width, seq = w.shape[0], x.shape[1]
    padded = jnp.pad(x, ((0, 0), (width - 1, 0), (0, 0))).astype(jnp.float32)
    taps = [padded[:, k:k + seq] for k in range(width)]
    if seq_idx is not None:  # the padding's id is -1: never a sequence's
        ids = jnp.pad(jnp.asarray(seq_idx, jnp.int32), ((0, 0), (width - 1, 0)), constant_values=-1)
        taps = [jnp.where((ids[:, k:k + seq] == ids[:, width - 1:])[..., None], tap, 0.0)
                for k, tap in enumerate(taps)]
    out = b.astype(jnp.float32) + sum(tap * w[k].astype(jnp.float32) for k, tap in enumerate(taps))
    return out.astype(x.dtype)


def gated_norm(y: jax.Array, z: jax.Array, w: jax.Array, cfg: Mamba2Config, rms_norm) -> jax.Array:
    """``rms_norm(y * silu(z))`` over each group's channels (the gate taken in fp32); ``y``, ``z``
    ``(batch, seq, inner)``."""
    gated = (y.astype(jnp.float32) * jax.nn.silu(z.astype(jnp.float32))).astype(y.dtype)
    if cfg.groups == 1:
        return rms_norm(gated, w, cfg.eps)
    *lead, inner = gated.shape
    per = (*lead, cfg.groups, inner // cfg.groups)
    return rms_norm(gated.reshape(per), w.reshape(cfg.groups, -1), cfg.eps).reshape(gated.shape)


def mixer(h: jax.Array, p: dict, cfg: Mamba2Config, ssd: Callable[..., jax.Array], rms_norm,
          seq_idx: jax.Array | None = None) -> jax.Array:
    """The Mamba-2 mixer of ``h`` ``(batch, seq, hidden)`` (compute dtype) with a layer's params ``p``; ``ssd`` one
    of :data:`SSD`, ``rms_norm`` the Llama example's op; ``seq_idx`` ``(batch, seq)``: sequences packed in a row
    (non-decreasing ids), each mixed as if alone (the convolution and the SSD restart where the id changes). Returns
    ``h``'s shape and dtype."""
    b, t, _ = h.shape
    gn = cfg.groups * cfg.state
    z, xbc, dt = jnp.split(h @ p["w_in"], [cfg.inner, cfg.inner + cfg.conv_channels], axis=-1)
    xbc = jax.nn.silu(causal_conv(xbc, p["conv_w"], p["conv_b"], seq_idx))
    x, B, C = jnp.split(xbc, [cfg.inner, cfg.inner + gn], axis=-1)
    y = ssd(x.reshape(b, t, cfg.heads, cfg.head_dim), dt, -jnp.exp(p["A_log"].astype(jnp.float32)),
            B.reshape(b, t, cfg.groups, cfg.state), C.reshape(b, t, cfg.groups, cfg.state), cfg.chunk,
            D=p["D"], dt_bias=p["dt_bias"], dt_softplus=True, seq_idx=seq_idx)
    return gated_norm(y.reshape(b, t, cfg.inner), z, p["gate_norm"], cfg, rms_norm) @ p["w_out"]
