"""The ROCm backend's ``TRITONPLUG_*`` settings: declared to the host by ``tritonplug_declare_settings``, read by
this plugin with ``setting.get()`` (validated and typed then), and nowhere else."""

from __future__ import annotations

import re

from tritonplug import plugin_kit

OWNER = "rocm"


def gfx(text: str) -> str:
    """``gfx942``, ``GFX942:sramecc+:xnack-`` (ROCm tools' feature suffix) → ``gfx942``."""
    arch = text.split(":")[0].strip().lower()
    if not re.fullmatch(r"gfx[0-9a-f]{3,4}", arch):
        raise ValueError(text)
    return arch


ARCH: plugin_kit.Setting[str | None] = plugin_kit.Setting(
    "TRITONPLUG_ROCM_ARCH", "ROCm target to lower for when no device is visible", "target", "`gfx942`, `gfx90a`...",
    "detected", gfx, lambda: None, "an AMD GPU architecture such as gfx942", none_text="detected", owner=OWNER)

#: Every setting of this backend, in its table's order.
ALL = (ARCH,)
