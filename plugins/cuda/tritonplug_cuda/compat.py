"""This plugin's one adapter over Triton's NVIDIA compiler API (triton 3.6 through 3.9).

What every Triton backend shares (compiling TTIR, Triton's private cache) is in
:mod:`tritonplug.plugin_kit`; here is what is NVIDIA's: the options class, the target and the images.
"""

from __future__ import annotations

from typing import Any

from triton.backends.nvidia.compiler import CUDAOptions

from tritonplug import plugin_kit

TRITON_VERSION = plugin_kit.TRITON_VERSION
OPTIONS_CLASS = CUDAOptions
_KEPT_METADATA = ("name", "num_warps", "num_ctas", "shared", "global_scratch_size", "global_scratch_align",
                  "tmem_size", "arch")


def compile_ttir(ttir: str, name: str, capability: int, options: dict[str, Any]) -> tuple[dict, dict]:
    """TTIR → (images, metadata) with Triton's own NVIDIA pipeline."""
    compiled = plugin_kit.compile_ttir(ttir, name, "cuda", capability, 32, options)
    images = {"ptx": compiled.asm["ptx"].encode(), "cubin": bytes(compiled.asm["cubin"]), "ttir": ttir.encode()}
    return images, compiled.binary_metadata(_KEPT_METADATA)
