"""Every setting this repository declares, the bundled plugins' read from their source (installed or not), for
``tests/test_settings*.py``: each plugin's settings module (``plugins/<name>/tritonplug_<name>/settings.py``)
holds its ``ALL``."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

from tritonplug import settings

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def bundled_plugin_settings() -> tuple[settings.Setting[Any], ...]:
    """The settings the bundled plugins declare, owner by owner (loaded from their files, under private names)."""
    found: list[settings.Setting[Any]] = []
    for path in sorted((ROOT / "plugins").glob("*/tritonplug_*/settings.py")):
        spec = importlib.util.spec_from_file_location(f"_bundled_settings_{path.parent.name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found += module.ALL
    return tuple(found)


def every_setting() -> tuple[settings.Setting[Any], ...]:
    """The host's settings and the bundled plugins'."""
    return (*settings.ALL, *bundled_plugin_settings())


def by_name() -> dict[str, settings.Setting[Any]]:
    return {s.name: s for s in every_setting()}
