"""Shared by the examples: which backend runs, and sizes that suit it."""

from __future__ import annotations

import jax


def platform() -> str:
    """The lowering platform of the default device (JAX calls CUDA and ROCm devices "gpu")."""
    device = jax.devices()[0]
    if device.platform == "gpu":
        return "rocm" if "rocm" in device.client.platform_version.lower() else "cuda"
    return device.platform


def backend_name() -> str:
    import tritonplug

    try:
        return tritonplug.backend_for(platform()).name
    except tritonplug.PluginError as exc:
        return f"none ({exc})"


def on_gpu() -> bool:
    return platform() in ("cuda", "rocm")
