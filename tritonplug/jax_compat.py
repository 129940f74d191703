"""The one place tritonplug reaches into ``jax._src`` (private JAX APIs), per supported JAX version."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DistributedRuntime:
    """This process's view of ``jax.distributed``: the coordination-service client and where it points."""

    client: Any  # jaxlib DistributedRuntimeClient: key_value_set_bytes, key_value_try_get_bytes, ...
    process_id: int
    num_processes: int
    coordinator_address: str


def distributed_runtime() -> DistributedRuntime | None:
    """The coordination-service client of ``jax.distributed.initialize``, or ``None`` when the process was not
    initialised (or JAX is not even imported: this never imports it)."""
    if "jax" not in sys.modules:
        return None
    from jax._src import distributed  # jax 0.10 and 0.11: module-level ``global_state`` of class ``State``

    state = distributed.global_state
    client = getattr(state, "client", None)
    if client is None:
        return None
    return DistributedRuntime(client, int(state.process_id), int(state.num_processes),
                              str(state.coordinator_address or "?"))
