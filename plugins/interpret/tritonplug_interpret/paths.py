"""Which CPU path runs a kernel: XLA (the kernel's TTIR as JAX array operations) or the interpreter.

``TRITONPLUG_CPU_PATH=xla`` (the default) translates every kernel whose TTIR the translator
fully supports and falls back to the interpreter, with one log line naming the kernel and the
operation, for the rest; ``TRITONPLUG_CPU_PATH=interpret`` always uses the interpreter.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Hashable

from tritonplug.records import Binary, JaxKernel, Launch, ScalarParam, param_leaves
from tritonplug_interpret import settings
from tritonplug_interpret.recent import Recent

PATH_VARIABLE = settings.PATH.name
PATHS = ("xla", "interpret")
log = logging.getLogger("tritonplug.interpret")

#: Translated kernels by (TTIR, launch, checked mode), most recent last: lowering the same call again (another
#: ``jax.jit`` of the same function, a retrace under ``grad``) reuses the translation and its traced grid.
_KERNELS: Recent[JaxKernel] = Recent(64)


def chosen_path() -> str:
    """``xla`` or ``interpret``: ``TRITONPLUG_CPU_PATH``, validated by the setting."""
    return settings.PATH.get()


def kernel_ttir(binary: Binary) -> str | None:
    """The canonicalised TTIR the compile hook stored, if any."""
    image = binary.images.get("ttir") if binary.images else None
    if not image:
        return None
    return image.decode() if isinstance(image, bytes) else str(image)


def xla_kernel(binary: Binary, launch: Launch, check: bool) -> JaxKernel | None:
    """A :class:`JaxKernel` for the launch, or ``None`` (interpreter) with one log line saying why."""
    if chosen_path() != "xla":
        return None
    kernel = translated(binary, launch, check)
    if isinstance(kernel, str):
        log.warning("kernel %r runs in Triton's interpreter: %s", launch.kernel_name, kernel)
        return None
    return kernel


def inline_kernel(binary: Binary, launch: Launch, check: bool, platform: str) -> JaxKernel:
    """The translation of a call inlined on ``platform`` (``inline=True``): there is no interpreter to fall back
    to, so a kernel the XLA path cannot translate whole is refused, saying why."""
    kernel = translated(binary, launch, check)
    if isinstance(kernel, str):
        raise NotImplementedError(f"kernel {launch.kernel_name!r} cannot be inlined on {platform!r} as XLA ops: "
                                  f"{kernel}; call it without inline=True")
    return kernel


def translated(binary: Binary, launch: Launch, check: bool) -> JaxKernel | str:
    """The launch's translation to XLA ops (memoised), or why there is none."""
    ttir = kernel_ttir(binary)
    if ttir is None:
        return "its binary carries no TTIR"
    key = _memo_key(ttir, launch, check)
    kernel = _KERNELS.get(key) if key is not None else None
    if kernel is None:
        kernel = _translate(ttir, launch, check)
        if not isinstance(kernel, str) and key is not None:
            _KERNELS.put(key, kernel)
    return kernel


def _memo_key(ttir: str, launch: Launch, check: bool) -> Hashable | None:
    """The memo's key, or None where the launch does not hash (a scalar of an unhashable type).

    Scalars are baked into the translation, and values that compare equal may differ (``-0.0 == 0.0``,
    ``True == 1``), so the key holds each scalar's exact bits beside the launch."""
    scalars = tuple((type(p.value).__name__, struct.pack("<d", p.value) if isinstance(p.value, float) else p.value)
                    for p in param_leaves(launch.params) if isinstance(p, ScalarParam))
    key = (ttir, launch, scalars, check)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _translate(ttir: str, launch: Launch, check: bool) -> JaxKernel | str:
    from tritonplug_interpret.xla import Unsupported, translate

    try:
        translation = translate(ttir, launch, check)
        translation.trial()
    except Unsupported as exc:
        return f"the XLA path does not support {exc}"
    except Exception as exc:  # a gap in the translator must never cost the user the kernel
        return f"the XLA translation failed with {type(exc).__name__}: {exc}"
    return JaxKernel(launch.kernel_name, translation, launch)
