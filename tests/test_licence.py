"""The licence is declared everywhere it travels, and every launcher ported from a library keeps its notice."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = [ROOT / "pyproject.toml", *sorted((ROOT / "plugins").glob("*/pyproject.toml"))]


def test_every_distribution_declares_the_licence():
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    for path in DISTRIBUTIONS:
        project = tomllib.loads(path.read_text())["project"]
        assert project.get("license") == "Apache-2.0", f"{path.relative_to(ROOT)}: license = \"Apache-2.0\""


#: Test files that port a library's launchers (the examples' are found by what they do).
TEST_PORTS = [ROOT / "plugins" / "interpret" / "tests" / "xla_row_launchers.py"]


def _ports() -> list[Path]:
    """Example files that load a library's kernels (``kernels_of``) and launch them: ported launchers; and
    :data:`TEST_PORTS`."""
    return [p for p in sorted((ROOT / "examples").rglob("*.py"))
            if re.search(r"kernels_of\(", p.read_text()) and "launch" in p.read_text()] + TEST_PORTS


def test_every_ported_launcher_keeps_its_origins_notice():
    notices = (ROOT / "THIRD_PARTY_NOTICES.md").read_text()
    ports = _ports()
    assert len(ports) >= 8  # the seven ports of examples/ports and the MoE launcher
    for path in ports:
        head = "\n".join(path.read_text().splitlines()[:3])
        assert head.startswith("#") and ("THIRD_PARTY_NOTICES.md" in head or "SPDX-License-Identifier" in head), \
            f"{path.relative_to(ROOT)}: the first lines name the origin's licence"
        assert path.name in notices, f"THIRD_PARTY_NOTICES.md does not list {path.name}"
    for licence in ("BSD 2-CLAUSE LICENSE", "MIT License", "Apache-2.0"):
        assert licence in notices
