"""tritonplug's version, as jax-triton exposes its own (``__version__``, ``__version_info__``)."""

from __future__ import annotations

import re

try:
    from importlib.metadata import version as _dist_version

    __version__: str = _dist_version("tritonplug")
except Exception:  # running from a source tree that pip did not install
    __version__ = "0+source"

#: The release numbers of ``__version__`` as ints, e.g. ``(0, 1, 0)``.
__version_info__: tuple[int, ...] = tuple(int(p) for p in re.findall(r"\d+", __version__.split("+")[0])[:3])
