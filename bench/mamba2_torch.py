"""``bench/mamba2.py``'s torch side: mamba-ssm's own ``mamba_chunk_scan_combined`` (Triton launching its kernels on
torch tensors), forward and forward + backward, on the same inputs as the JAX side.

mamba-ssm's package ``__init__`` imports its CUDA extensions (absent where only its source is on ``PYTHONPATH``),
so :func:`import_ssd_combined` enters them bare (``examples/ports/mamba_source.py``) before importing
``ssd_combined``: none of the packages' ``__init__`` runs.
"""

from __future__ import annotations

import importlib


def import_ssd_combined():
    """``mamba_ssm.ops.triton.ssd_combined``, imported without running its packages' ``__init__``
    (``examples/ports/mamba_source.py``: ``register_bare_packages``); ImportError naming what is missing (mamba-ssm's
    source, torch, einops) otherwise."""
    from examples.ports.mamba_source import register_bare_packages

    register_bare_packages()
    return importlib.import_module("mamba_ssm.ops.triton.ssd_combined")


def unavailable() -> str | None:
    """Why the torch side cannot run here (no torch, no CUDA device, no mamba-ssm source), or None."""
    try:
        import torch
    except ImportError:
        return "needs torch"
    if not torch.cuda.is_available():
        return "needs torch with a CUDA device"
    try:
        import_ssd_combined()
    except ImportError as exc:
        return f"cannot import mamba_ssm.ops.triton.ssd_combined: {exc}"
    return None


def tensors(arrays: dict) -> dict:
    """NumPy fp32 inputs as CUDA tensors: ``x``, ``dt``, ``B``, ``C`` in bf16 (as the JAX side rounds them), the
    per-head ``A``, ``D``, ``dt_bias`` in fp32."""
    import torch

    bf16 = ("x", "dt", "B", "C", "cot")
    return {k: torch.from_numpy(v).cuda().to(torch.bfloat16 if k in bf16 else torch.float32)
            for k, v in arrays.items()}


def functions(t: dict, chunk: int):
    """``(forward, forward_backward)`` closures over the tensors ``t``: the forward returns ``y``; the forward +
    backward returns ``y`` and the gradients of ``<y, cot>`` in ``x, dt, A, B, C, D, dt_bias``."""
    import torch

    fn = import_ssd_combined().mamba_chunk_scan_combined
    names = ("x", "dt", "A", "B", "C", "D", "dt_bias")
    leaves = {k: t[k].detach().requires_grad_(True) for k in names}

    def call(a):
        return fn(a["x"], a["dt"], a["A"], a["B"], a["C"], chunk, D=a["D"], dt_bias=a["dt_bias"], dt_softplus=True)

    def forward():
        with torch.no_grad():
            return call(t)

    def forward_backward():
        y = call(leaves)
        return y, torch.autograd.grad(y, [leaves[k] for k in names], t["cot"])

    return forward, forward_backward


def peak_bytes(fn, inputs: dict) -> int:
    """Bytes at the high-water mark of one call of ``fn``: its ``inputs`` (the tensors it reads) plus everything it
    allocated at its peak (torch's caching allocator's ``max_memory_allocated`` over what was allocated before)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    del out
    held = sum(v.numel() * v.element_size() for v in inputs.values())
    return int(torch.cuda.max_memory_allocated() - before + held)


def sync(_out) -> None:
    import torch

    torch.cuda.synchronize()
