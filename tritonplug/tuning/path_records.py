"""Path records: whether an ``inline="auto"`` call is inlined on a target, as ``tritonplug.tune`` measured it.

They live with the configuration records (the same store, files and identity: :mod:`tritonplug.tuning.records`
describes the format), keyed by every argument of the call, since the faster path depends on all the shapes, not
only on an autotuner's ``key``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from tritonplug.adapters import triton_compat
from tritonplug.calls.call import CallSpec
from tritonplug.records import BufferSpec, Target
from tritonplug.tuning.records import PATH_CHOICE, PATHS, TuningRecord, identity, normalized
from tritonplug.tuning.select import argument_dtypes, argument_values, plain_value, target_of
from tritonplug.tuning.store import TuningStore


def path_key(call: CallSpec, operands: Sequence[BufferSpec]) -> dict[str, Any]:
    """The key of ``call``'s path record on operands of these shapes and dtypes."""
    return normalized({"args": argument_values(call, operands), "dtypes": argument_dtypes(call, operands),
                       "constexprs": {k: plain_value(v) for k, v in call.metaparams}, "choice": PATH_CHOICE})


def path_identity(call: CallSpec, operands: Sequence[BufferSpec], backend: str, target: Target) -> str:
    return identity(triton_compat.source_key(call.kernel.fn), backend, target_of(target), path_key(call, operands))


def recorded_path(store: TuningStore, call: CallSpec, operands: Sequence[BufferSpec], backend: str,
                  target: Target) -> TuningRecord | None:
    """The path record for ``call`` launched by ``backend`` on ``target``, if ``tune`` made one (or a file has)."""
    return store.lookup(path_identity(call, operands, backend, target))


def path_record(call: CallSpec, operands: Sequence[BufferSpec], backend: str, target: Target, path: str,
                info: Mapping[str, Any]) -> TuningRecord:
    """A record choosing ``path`` (``"inline"`` or ``"launch"``); ``info``: ``times_us``, ``reason``, ``device``."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return TuningRecord(triton_compat.source_key(call.kernel.fn), backend, target_of(target),
                        path_key(call, operands), {"path": path},
                        {"kernel": call.kernel.name, "triton": triton_compat.TRITON_VERSION, "created": created,
                         **info})
