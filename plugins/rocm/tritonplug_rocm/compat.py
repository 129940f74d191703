"""This plugin's one adapter over Triton's AMD compiler API (triton 3.6 through 3.9).

What every Triton backend shares (compiling TTIR, Triton's private cache) is in
:mod:`tritonplug.plugin_kit`; here is what is AMD's: the options class, the target and the images.
"""

from __future__ import annotations

from typing import Any

from triton.backends.amd.compiler import HIPOptions

from tritonplug import plugin_kit

TRITON_VERSION = plugin_kit.TRITON_VERSION
OPTIONS_CLASS = HIPOptions
_KEPT_METADATA = ("name", "num_warps", "num_ctas", "shared", "global_scratch_size", "global_scratch_align", "arch")


def warp_size(arch: str) -> int:
    """CDNA (gfx9xx) runs 64-wide wavefronts; RDNA (gfx10+) 32-wide."""
    return 64 if arch.startswith("gfx9") else 32


def compile_ttir(ttir: str, name: str, arch: str, options: dict[str, Any]) -> tuple[dict, dict]:
    """TTIR → (images, metadata) with Triton's own AMD pipeline (links the HSACO in-process)."""
    compiled = plugin_kit.compile_ttir(ttir, name, "hip", arch, warp_size(arch), options)
    images = {"hsaco": bytes(compiled.asm["hsaco"]), "amdgcn": compiled.asm["amdgcn"].encode(),
              "ttir": ttir.encode()}
    return images, compiled.binary_metadata(_KEPT_METADATA)
