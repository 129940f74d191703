"""The CUDA backend's ``TRITONPLUG_*`` settings: declared to the host by ``tritonplug_declare_settings``, read by
this plugin with ``setting.get()`` (validated and typed then), and nowhere else."""

from __future__ import annotations

from tritonplug import plugin_kit

OWNER = "cuda"


def capability(text: str) -> int:
    """``90``, ``9.0``, ``sm_90``, ``sm_90a`` → 90, within the range Triton supports."""
    digits = text.lower().removeprefix("sm_").rstrip("a")
    value = int(float(digits) * 10) if "." in digits else int(digits)
    if not 50 <= value < 200:
        raise ValueError(text)
    return value


ARCH: plugin_kit.Setting[int | None] = plugin_kit.Setting(
    "TRITONPLUG_CUDA_ARCH", "CUDA target to lower for when no device is visible (a call's `compute_capability` "
    "wins)", "target", "`90`, `9.0`, `sm_90a`...", "detected", capability, lambda: None,
    "a compute capability such as 90 or 9.0 (50 to 199, the range Triton supports)", none_text="detected",
    owner=OWNER)
MODULE_IMAGE = plugin_kit.boolean("TRITONPLUG_CUDA_MODULE_IMAGE", "send Triton's cubin beside the PTX (proto field "
                                  "`module_image`, read by jaxlib 0.11+); off: PTX only", True, owner=OWNER)

#: Every setting of this backend, in its table's order.
ALL = (ARCH, MODULE_IMAGE)
