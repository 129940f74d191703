"""Whether a compiled configuration fits its target, as Triton's autotuner decides it.

Triton compiles each configuration and skips one whose kernel needs more shared memory than a block may use on
the device (``OutOfResources``: the binary's ``metadata["shared"]`` above the device's ``max_shared_mem``). The
limit here is the target's (:attr:`tritonplug.records.Target.max_shared_mem`, declared by the backend plugin),
so a lowering for a GPU this machine lacks skips the same configurations a lowering on that GPU would.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonplug.errors import OutOfResourcesError
from tritonplug.records import Binary, Target


def shared_need(binary: Binary) -> int:
    """The shared memory, in bytes, one block of ``binary`` asks for (Triton's ``metadata["shared"]``)."""
    return int(binary.metadata.get("shared", 0) or 0)


def misfit(target: Target, binary: Binary) -> str | None:
    """Why ``binary`` cannot be launched on ``target`` (in words), or ``None`` when it fits or no limit is known."""
    limit, need = target.max_shared_mem, shared_need(binary)
    if limit is None or need <= limit:
        return None
    return f"needs {need} B of shared memory, more than the {limit} B a block may use on {target.describe()}"


def none_fits(kernel: str, target: Target, skipped: Sequence[str]) -> OutOfResourcesError:
    """The error of a call none of whose configurations fits ``target``; ``skipped`` says why, one per config."""
    listed = "\n".join(f"  {s}" for s in skipped)
    return OutOfResourcesError(
        f"kernel {kernel!r}: no configuration fits {target.describe()} ({target.max_shared_mem} B of shared memory "
        f"per block), as Triton's autotuner would skip each one (OutOfResources):\n{listed}\n"
        f"Smaller blocks or fewer num_stages need less shared memory.")
