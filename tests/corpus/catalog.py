"""Every corpus entry, by library; the tutorials' only when ``TRITONPLUG_TUTORIALS_DIR`` names their directory."""

from __future__ import annotations

import os
from pathlib import Path

from corpus import driver, fla, flaggems, liger, tutorials
from corpus.spec import Launch

#: corpus id prefix → the distribution's top-level package (installed by ``tox -e corpus``)
LIBRARIES = {"liger": "liger_kernel", "fla": "fla", "flaggems": "flag_gems"}


def entries() -> list[Launch]:
    found = [*liger.entries(), *fla.entries(), *flaggems.entries(), *tutorials.entries()]
    ids = [e.id for e in found]
    assert len(ids) == len(set(ids)), "corpus ids must be unique"
    return found


def missing(launch: Launch) -> str | None:
    """Why ``launch`` cannot run in this environment (its library is not installed …), or None."""
    if launch.module.startswith(tutorials.PREFIX):
        folder = os.environ.get(tutorials.ENV)
        if not folder:
            return (f"{tutorials.ENV} is not set: point it at the python/tutorials folder of a Triton release "
                    "(the tutorials are on no package index)")
        if not (Path(folder) / launch.module[len(tutorials.PREFIX):]).is_file():
            return f"{tutorials.ENV}={folder} has no {launch.module[len(tutorials.PREFIX):]}"
        return None
    library = LIBRARIES[launch.library]
    if not driver.library_installed(library):
        return f"{library} is not installed: `tox -e corpus` installs the pinned libraries"
    return None
