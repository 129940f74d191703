"""``TRITONPLUG_LOG=info|debug`` prints compile and cache events of the ``tritonplug`` logger."""

from __future__ import annotations

import logging
import os


def configure_logging() -> None:
    level = os.environ.get("TRITONPLUG_LOG", "").strip().upper()
    if not level:
        return
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError(f"TRITONPLUG_LOG must be one of debug, info, warning, error; got {level.lower()!r}")
    logger = logging.getLogger("tritonplug")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)
