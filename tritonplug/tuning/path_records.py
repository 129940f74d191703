"""Path records: whether an ``inline="auto"`` call is inlined on a target, as ``tritonplug.tune`` measured it.

They live with the configuration records (the same store, files and identity: :mod:`tritonplug.tuning.records`
describes the format), keyed by every argument of the call, since the faster path depends on all the shapes, not
only on an autotuner's ``key``. The key holds no program: the same call in another program takes the path the
last program tuned chose for it (``tritonplug.tune``; docs/using.md says why).

While ``tune`` times a program with a trial assignment of paths, :func:`trying` overrides the records of the
calls it names, for lowerings in that context only: the one place a lowering's path is forced.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
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


#: The ``reason`` of a trial's path (:func:`trying`), as lowerings report it.
TRIAL = "the path of a tritonplug.tune trial"
#: The trial assignment of ``tune`` being lowered in this context: path (``"inline"``/``"launch"``) by identity.
_trial: ContextVar[Mapping[str, str] | None] = ContextVar("tritonplug_path_trial", default=None)


@contextmanager
def trying(paths: Mapping[str, str]) -> Iterator[None]:
    """Lowerings in this context take, for each call whose :func:`path_identity` is in ``paths``, that path, as if
    a record said so (``tune``'s trials; nothing is stored)."""
    if any(p not in PATHS for p in paths.values()):
        raise ValueError(f"trying(paths): every path must be one of {PATHS}, got {sorted(set(paths.values()))}")
    token = _trial.set(dict(paths))
    try:
        yield
    finally:
        _trial.reset(token)


def recorded_path(store: TuningStore, call: CallSpec, operands: Sequence[BufferSpec], backend: str,
                  target: Target) -> TuningRecord | None:
    """The path record for ``call`` launched by ``backend`` on ``target``: a trial's (:func:`trying`), else the one
    ``tune`` made (or a file has), else ``None``."""
    identity = path_identity(call, operands, backend, target)
    trial = _trial.get()
    if trial is not None and identity in trial:
        return path_record(call, operands, backend, target, trial[identity], {"reason": TRIAL})
    return store.lookup(identity)


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
