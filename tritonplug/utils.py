"""Small helpers jax-triton users import from it."""

from __future__ import annotations

import math


def cdiv(a: int, b: int) -> int:
    """Ceiling division, for grids: ``cdiv(n, BLOCK)`` programs cover ``n`` elements."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def strides_from_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of a shape."""
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


def get_compute_capability(device: int = 0) -> int:
    """The compute capability kernels are compiled for on CUDA device ``device`` (e.g. 90).

    Without a CUDA device this is what lowering for ``cuda`` would use: the CUDA backend's
    ``TRITONPLUG_CUDA_ARCH`` if set (and that backend installed), else 0 (so
    ``get_compute_capability(0) < 70`` style guards skip GPU-only work).
    """
    import jax

    import tritonplug
    from tritonplug import settings

    try:
        devices = jax.devices("cuda")
    except RuntimeError:
        devices = []
    if devices:
        return int(float(devices[device].compute_capability) * 10)
    tritonplug.backends()  # loads the backends, which declare their settings
    arch = settings.lookup(CUDA_ARCH_VARIABLE)
    return (arch.get() if arch is not None else None) or 0


#: The CUDA backend's (``tritonplug-cuda``'s) variable for the target to lower for without a device.
CUDA_ARCH_VARIABLE = "TRITONPLUG_CUDA_ARCH"
