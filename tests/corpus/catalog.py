"""Every corpus entry, by library; the tutorials' only when ``TRITONPLUG_TUTORIALS_DIR`` names their directory."""

from __future__ import annotations

from corpus import fla, flaggems, liger
from corpus.spec import Launch

#: corpus id prefix → the distribution's top-level package (installed by ``tox -e corpus``)
LIBRARIES = {"liger": "liger_kernel", "fla": "fla", "flaggems": "flag_gems"}


def entries() -> list[Launch]:
    found = [*liger.entries(), *fla.entries(), *flaggems.entries()]
    ids = [e.id for e in found]
    assert len(ids) == len(set(ids)), "corpus ids must be unique"
    return found
