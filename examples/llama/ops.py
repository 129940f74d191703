"""The model's five swappable ops, each in two implementations with one signature.

``jax``: plain ``jnp``/``jax.nn``, attention through ``jax.nn.dot_product_attention`` (cuDNN's fused kernel
on a CUDA GPU in bf16/fp16, XLA's otherwise). ``tritonplug``: Triton kernels from PyTorch libraries, run
through tritonplug: Liger-Kernel's RMSNorm, RoPE, SwiGLU and fused linear cross entropy, and
flash-linear-attention's flash attention, forward and backward each (``examples/ports``). The ports are
imported on first use, so the ``jax`` ops need neither library. The Liger kernels are ``inline="auto"``
(``tritonplug.set_inline``): launched, or, once ``train.py --tune`` measured it faster on the GPU, inlined into
the step as XLA ops that fuse with their neighbours; on the CPU they are their translations either way.

Layouts, as the model holds them: activations ``(batch, seq, hidden)``; ``q`` ``(batch, seq, heads,
head_dim)``, ``k``/``v`` with ``kv_heads`` (grouped-query attention); the loss takes the final hidden states
as ``(tokens, hidden)``, the output projection as ``(vocab, hidden)`` and the targets as ``(tokens,)``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp

OP_NAMES = ("rms_norm", "rope", "swiglu", "attention", "loss")
CHOICES = ("jax", "tritonplug")


# ---- jax -------------------------------------------------------------------------------------------------

def rms_norm_jax(x, w, eps):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return y.astype(x.dtype) * w.astype(x.dtype)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope_jax(q, k, cos, sin):
    """Hugging Face Llama's rotation; ``cos``/``sin`` are ``(seq, head_dim)``."""
    cos, sin = cos[None, :, None, :].astype(q.dtype), sin[None, :, None, :].astype(q.dtype)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def swiglu_jax(gate, up):
    return jax.nn.silu(gate) * up


def attention_jax(q, k, v):
    """Causal attention through ``jax.nn.dot_product_attention``: cuDNN's flash attention where JAX offers it."""
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=_attention_implementation(q))


def _attention_implementation(q) -> str | None:
    device = jax.devices()[0]
    cuda = device.platform == "gpu" and "rocm" not in device.client.platform_version.lower()
    fits = q.dtype in (jnp.bfloat16, jnp.float16) and q.shape[-1] % 8 == 0 and q.shape[-1] <= 128
    return "cudnn" if cuda and fits else None


def loss_jax(h, w, targets):
    """Mean next-token cross entropy: the ``(tokens, vocab)`` logits are materialised, in fp32."""
    logits = (h @ w.T).astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    return jnp.mean(lse - picked)


# ---- tritonplug ------------------------------------------------------------------------------------------

def _port(name: str):
    return importlib.import_module(f"examples.ports.{name}")


def rms_norm_tritonplug(x, w, eps):
    return _port("liger_rms_norm").liger_rms_norm(x, w.astype(x.dtype), eps)


def rope_tritonplug(q, k, cos, sin):
    """Liger's kernel takes Hugging Face's ``(batch, heads, seq, head_dim)``; its launcher swaps the axes back
    to ours, and XLA folds the two transposes away inside ``jit``."""
    qt, kt = _port("liger_rope").liger_rope(jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2),
                                            cos[None].astype(q.dtype), sin[None].astype(q.dtype))
    return jnp.swapaxes(qt, 1, 2), jnp.swapaxes(kt, 1, 2)


def swiglu_tritonplug(gate, up):
    return _port("liger_swiglu").liger_swiglu(gate, up)


def attention_tritonplug(q, k, v):
    return _port("fla_parallel_attention").attention(q, k, v, causal=True)


#: The fused loss holds at most this many bytes of logits at a time. Liger's own default chunk bounds them at
#: ``tokens x hidden`` elements: at a 128k vocabulary that is chunks of a few hundred tokens, each re-reading and
#: re-writing the fp32 ``(vocab, hidden)`` gradient accumulator (1 GiB at 128k x 2048), which costs more than the
#: memory it saves. ``bench/model.py --breakdown`` times both.
LOSS_CHUNK_BYTES = 1 << 30


def loss_liger(h, w, targets, chunk_size="budget"):
    """Liger's fused linear cross entropy: the logits exist one chunk of tokens at a time (``chunk_size``: rows,
    ``"budget"`` for :data:`LOSS_CHUNK_BYTES` of logits, None for Liger's default). Its rule keeps the vocabulary
    whole: under ``model=N`` the output projection is replicated (``step.specs_for``), or gathered if split."""
    if chunk_size == "budget":
        rows = max(1, LOSS_CHUNK_BYTES // (w.shape[0] * h.dtype.itemsize))
        chunk_size = min(h.shape[0], 1 << (rows.bit_length() - 1))
    return _port("liger_fused_linear_cross_entropy").fused_linear_cross_entropy(h, w, targets, chunk_size=chunk_size)


def loss_tritonplug(h, w, targets, chunk_size="budget"):
    """Traced under a mesh whose ``model`` axis splits the vocabulary (``jax.set_mesh``; ``step.Trainer`` sets
    it): the vocabulary-parallel fused linear cross entropy (``vocab_parallel.py``: the output projection stays
    split, :data:`LOSS_CHUNK_BYTES` of each device's block of logits at a time); otherwise :func:`loss_liger`."""
    from . import vocab_parallel

    if vocab_parallel.vocab_split(jax.sharding.get_abstract_mesh()):
        return vocab_parallel.vocab_parallel_cross_entropy(h, w, targets, chunk_bytes=LOSS_CHUNK_BYTES)
    return loss_liger(h, w, targets, chunk_size)


IMPLEMENTATIONS: dict[str, dict[str, Callable]] = {
    name: {"jax": globals()[f"{name}_jax"], "tritonplug": globals()[f"{name}_tritonplug"]} for name in OP_NAMES
}
#: ``loss=liger``: today's (before issue 39) fused loss, the vocabulary whole under ``model=N`` too, to measure
#: the vocabulary-parallel one against (``tritonplug,loss=liger``)
IMPLEMENTATIONS["loss"]["liger"] = loss_liger


@dataclasses.dataclass(frozen=True)
class Ops:
    """The op choice of one model: which implementation each op runs."""

    choice: Mapping[str, str]

    def __post_init__(self):
        unknown = set(self.choice) - set(OP_NAMES)
        if unknown:
            raise ValueError(f"ops: unknown op(s) {sorted(unknown)}; the model's ops are {OP_NAMES}")
        for name, impl in self.choice.items():
            if impl not in IMPLEMENTATIONS[name]:
                raise ValueError(f"ops: {name}={impl!r}; expected one of {tuple(IMPLEMENTATIONS[name])}")

    @classmethod
    def of(cls, default: str, **overrides: str) -> Ops:
        """Every op from ``default`` (``jax`` or ``tritonplug``) but those named in ``overrides``."""
        unknown = set(overrides) - set(OP_NAMES)
        if unknown:
            raise ValueError(f"ops: unknown op(s) {sorted(unknown)}; the model's ops are {OP_NAMES}")
        return cls({name: overrides.get(name, default) for name in OP_NAMES})

    @classmethod
    def parse(cls, text: str) -> Ops:
        """``jax``, ``tritonplug``, or ``jax,attention=tritonplug`` / ``tritonplug,attention=jax`` (per op)."""
        default, *rest = text.split(",")
        return cls.of(default, **dict(item.split("=", 1) for item in rest))

    def __getattr__(self, name: str) -> Callable:
        if name in OP_NAMES:
            return IMPLEMENTATIONS[name][self.choice[name]]
        raise AttributeError(name)

    def label(self) -> str:
        kinds = set(self.choice.values())
        if len(kinds) == 1:
            return kinds.pop()
        return ",".join(f"{n}={c}" for n, c in self.choice.items())
