"""pytest-xdist's ``load`` distribution, except that the tests reading one child suite's report run on one worker,
and the slowest modules start first.

Some modules check a report that a child process makes (a module-scoped fixture: 8 CPU devices exist only in a
process started with XLA_FLAGS, so the suite runs in one, per partitioner mode where the fixture is parametrized by
mode). Under plain ``load`` distribution each worker that draws one of their tests runs the suite again: up to
once per worker, 10 to 60 s each. Here each (module, mode) is one unit of work, sent whole to one worker. (``--dist
loadgroup`` would do this from marks, but under pytest 9 the group it appends to a test's id is lost: it grouped
nothing.)

A few modules hold tests of 5 to 25 s each (a model trained, ports' gradients compiled); in collection order they
came last and one worker finished them alone. Each is one unit too. Units go out largest first (xdist's loadscope
order: by number of tests), so these start at once; every other test is a unit of its own, as under ``load``.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: The modules whose tests share a child suite's report, and the modes their fixture may be parametrized by.
SUITE_MODULES = ("tests/test_partitioned.py", "tests/test_partitioned_keywords.py",
                 "tests/test_partitioned_ports.py", "tests/test_llama_vocab_parallel.py")
MODES = ("shardy", "gspmd", "explicit")
#: The modules of long tests, each sent whole to one worker early.
SLOW_MODULES = ("tests/test_llama.py", "tests/test_ports.py", "tests/test_ports_model.py",
                "tests/test_partitioned_programs.py")


def unit_of(nodeid: str) -> str:
    """The unit of work of a test: its suite's (module, mode), its slow module, or the test itself."""
    path, _, name = nodeid.partition("::")
    if path.endswith(SLOW_MODULES):
        return path
    if not path.endswith(SUITE_MODULES):
        return nodeid
    first = name.partition("[")[2].split("-", 1)[0].rstrip("]")
    return f"{path}::{first}" if first in MODES else path


class SuiteScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
