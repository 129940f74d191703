"""Shared by the examples: which backend runs, and sizes that suit it."""

from __future__ import annotations

import jax


def platform() -> str:
    return jax.devices()[0].platform


def backend_name() -> str:
    import tritonplug
    from tritonplug.host import get_host

    try:
        return get_host().backend_for(platform()).name
    except tritonplug.PluginError as exc:
        return f"none ({exc})"


def on_gpu() -> bool:
    return platform() in ("cuda", "rocm")
