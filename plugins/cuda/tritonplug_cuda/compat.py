"""This plugin's one adapter over Triton's NVIDIA compiler API (triton 3.6 through 3.9).

What every Triton backend shares (compiling TTIR, Triton's private cache) is in
:mod:`tritonplug.plugin_kit`; here is what is NVIDIA's: the options class, the target, the images,
and how Triton's launcher lays out a host-side tensor descriptor's kernel arguments.
"""

from __future__ import annotations

from typing import Any

from triton.backends.nvidia import driver as _driver
from triton.backends.nvidia.compiler import CUDAOptions

from tritonplug import plugin_kit

TRITON_VERSION = plugin_kit.TRITON_VERSION
OPTIONS_CLASS = CUDAOptions
_KEPT_METADATA = ("name", "num_warps", "num_ctas", "shared", "global_scratch_size", "global_scratch_align",
                  "tmem_size", "arch", "tensordesc_meta")

#: Triton numbers TMA element types as the device does; the host API (``cuTensorMapEncodeTiled``, which
#: jaxlib calls) numbers three of them differently. The same table in every supported Triton.
TMA_DTYPE_DEVICE_TO_HOST: dict[int, int] = dict(_driver.TMA_DTYPE_DEVICE_TO_HOST)
#: ``CU_TENSOR_MAP_DATA_TYPE_TFLOAT32``: float32 elements rounded to TF32 as they load (Triton 3.7+ names
#: it ``TMA_TF32``; the CUDA value is fixed).
TMA_TF32: int = getattr(_driver, "TMA_TF32", 11)
#: Without TMA (before sm_90) Triton lowers a descriptor to its base pointer and scalars. After the shape
#: and strides (as i64) come the padding flag and, from Triton 3.7 on, the round-to-TF32 flag.
DECOMPOSED_FLAGS = ("padding", "round_f32_to_tf32") if hasattr(_driver, "TMA_TF32") else ("padding",)


def compile_ir(ir: str, stage: str, name: str, capability: int, options: dict[str, Any]) -> tuple[dict, dict]:
    """TTIR (or a Gluon kernel's TTGIR) → (images, metadata) with Triton's own NVIDIA pipeline."""
    compiled = plugin_kit.compile_ttir(ir, name, "cuda", capability, 32, options, stage=stage)
    images = {"ptx": compiled.asm["ptx"].encode(), "cubin": bytes(compiled.asm["cubin"]), stage: ir.encode()}
    metadata = compiled.binary_metadata(_KEPT_METADATA)
    metadata["tensordesc_meta"] = [dict(m) for m in metadata.get("tensordesc_meta") or ()]
    return images, metadata
