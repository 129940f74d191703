"""The one place tritonplug runs code it wrote (``tests/test_structure_exec.py`` allows ``exec`` nowhere else but
``porting/kernel_source.py``, which runs a kernel library's own statements).

What it runs is written by ``eager.keys`` (the call's keys, from the table of argument kinds) and ``eager.runners``
(each kernel's runner, from its records' guards): text of ours only, every value of the caller's bound as a
constant, never written into the text. Each function gets a file name of its own, ``<tritonplug eager: …>``, and
its source is entered in ``linecache`` under that name for as long as the function lives, so a traceback through it
shows the line that ran, as for any module. The source is logged at debug level on the ``tritonplug.eager`` logger
(``TRITONPLUG_LOG=debug``); ``tritonplug.inspection.eager_runner_source(kernel)`` returns a kernel's runner.
"""

from __future__ import annotations

import itertools
import linecache
import logging
import re
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger("tritonplug.eager")

_NUMBERS = itertools.count(1)
_ODD = re.compile(r"[^\w .]")


def file_name(label: str) -> str:
    """A file name for generated source that names no file and no other source: ``<tritonplug eager: label #n>``
    (the label's odd characters replaced, so that no caller's text shapes it)."""
    plain = _ODD.sub("_", label)[:80]
    return f"<tritonplug eager: {plain} #{next(_NUMBERS)}>"


def define(name: str, source: str, namespace: dict[str, Any], label: str) -> Callable[..., Any]:
    """The function ``name`` that ``source`` defines, run with ``namespace`` as its globals (the constants it
    reads); its source entered in ``linecache`` (until the function is collected) and logged at debug level."""
    filename = file_name(label)
    code = compile(source, filename, "exec")
    exec(code, namespace)  # noqa: S102 (our text: the caller's values are constants in namespace)
    function = namespace[name]
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    weakref.finalize(function, linecache.cache.pop, filename, None)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s (%s):\n%s", label, filename, source)
    return function
