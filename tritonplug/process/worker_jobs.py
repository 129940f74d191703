"""What compile workers run: referenced by name (``module:function``), so the modules that schedule
jobs never import the process state they use."""

from __future__ import annotations

from tritonplug.adapters import triton_compat
from tritonplug.errors import CompileError
from tritonplug.process.state import state
from tritonplug.records import Binary, CompileJob


def prepare_worker() -> None:
    """Run once in each worker before its first job: load the backend plugins (and Triton), and do
    the once-per-process work of Triton's compiler, so the first job costs what every later one does."""
    state.host()
    triton_compat.prepare_compiler()


def compile_in_worker(job: CompileJob) -> Binary:
    """Find the job's backend by name in this worker and call its compile hook."""
    host = state.host()
    if job.backend not in host.backends:
        raise CompileError(f"backend {job.backend!r} is not installed in the compile worker's environment "
                           f"(loaded: {sorted(host.backends)})")
    return host.backends[job.backend].compile(job)
