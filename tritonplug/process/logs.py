"""``TRITONPLUG_LOG=info|debug`` prints compile and cache events of the ``tritonplug`` logger."""

from __future__ import annotations

import logging

from tritonplug import settings


def configure_logging() -> None:
    level = settings.LOG.get()
    if level is None:
        return
    logger = logging.getLogger("tritonplug")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level.upper())
