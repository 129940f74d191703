"""Which autotune configurations a lowering compiles: one pinned by ``tune``, a tuning record's, or all.

The tuning key of a call mirrors Triton's autotuner: the values of the arguments named in
``triton.autotune(key=...)`` plus every array argument's dtype, and (beyond Triton) the
metaparameters the call fixes, since they change which configurations apply. See
:mod:`tritonplug.tuning.records` for the record format.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from tritonplug.adapters import triton_compat
from tritonplug.calls.call import ArrayArg, CallSpec, ConstArg, OutputArg, ScalarArg
from tritonplug.compile.resolver import Configuration
from tritonplug.records import BufferSpec, Target
from tritonplug.tuning.records import identity, normalized, target_fields
from tritonplug.tuning.store import TuningStore

log = logging.getLogger("tritonplug.tuner")

#: The ``tritonplug.tune`` session running in this context, if any: the primitive's eager rule hands it
#: every autotuned call, with its concrete operands, before running the call.
active_session: ContextVar[Any] = ContextVar("tritonplug_tuning_session", default=None)


def plain_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return triton_compat.source_key(value)


def call_key(call: CallSpec, operands: Sequence[BufferSpec]) -> dict[str, Any]:
    """The autotune key of ``call`` on operands of these shapes and dtypes (``key`` of a record)."""
    values = argument_values(call, operands)
    metaparams = dict(call.metaparams)
    args = {}
    for name in triton_compat.autotune_key_names(call.kernel.autotuner):
        if name in metaparams:
            args[name] = plain_value(metaparams[name])
        elif name in values:
            args[name] = values[name]
    return normalized({"args": args, "dtypes": argument_dtypes(call, operands),
                       "constexprs": {k: plain_value(v) for k, v in call.metaparams}})


def argument_values(call: CallSpec, operands: Sequence[BufferSpec]) -> dict[str, Any]:
    """Each kernel parameter's value as a key holds it: a buffer as ``"dtype[shape]"``, a scalar or constexpr by
    value (``None`` for what has none, such as a tensor descriptor)."""
    def value(node: Any) -> Any:
        if isinstance(node, tuple):
            return [value(n) for n in node]
        buffer = _buffer(call, operands, node)
        if buffer is not None:
            return f"{buffer.dtype}[{','.join(map(str, buffer.shape))}]"
        if isinstance(node, (ScalarArg, ConstArg)):
            return plain_value(node.value)
        return None

    return {name: value(node) for name, node in zip(call.bound.names, call.bound.nodes, strict=True)}


def argument_dtypes(call: CallSpec, operands: Sequence[BufferSpec]) -> list[str]:
    """Every array argument's dtype, in parameter order."""
    def dtypes(node: Any) -> list[str]:
        if isinstance(node, tuple):
            return [d for n in node for d in dtypes(n)]
        buffer = _buffer(call, operands, node)
        return [buffer.dtype] if buffer is not None else []

    return [d for node in call.bound.nodes for d in dtypes(node)]


def _buffer(call: CallSpec, operands: Sequence[BufferSpec], node: Any) -> BufferSpec | None:
    if isinstance(node, ArrayArg):
        return operands[node.index]
    if isinstance(node, OutputArg):
        return call.out_specs[node.index]
    return None


def call_identity(call: CallSpec, operands: Sequence[BufferSpec], backend: str, target: Target) -> str:
    """The identity of the record that would apply to ``call`` lowered by ``backend`` for ``target``."""
    return identity(triton_compat.source_key(call.kernel.fn), backend, target_of(target), call_key(call, operands))


def target_of(target: Target) -> dict[str, Any]:
    return target_fields(target.platform, target.arch, target.warp_size)


def config_of(configuration: Configuration) -> dict[str, Any]:
    """A configuration as a record names it: its autotune config's kwargs and options."""
    return normalized(dict(configuration.autotune_config))


def select(store: TuningStore, backend: str, target: Target, call: CallSpec, operands: Sequence[BufferSpec],
           configs: list[Configuration]) -> tuple[list[Configuration], bool]:
    """The configurations to lower (the pinned one, the recorded winner, or all of them), and whether a
    tuning record chose them (the lowering counts that as a tuned hit)."""
    if call.pinned_config is not None:
        pinned = normalized(dict(call.pinned_config))
        chosen = [c for c in configs if config_of(c) == pinned]
        if not chosen:
            raise ValueError(f"kernel {call.kernel.name!r}: the configuration {pinned} is not among those that "
                             f"survive pruning")
        return chosen[:1], False
    if call.kernel.autotuner is None or len(configs) < 2:
        return configs, False
    record = store.lookup(call_identity(call, operands, backend, target))
    if record is None:
        return configs, False
    wanted = normalized(dict(record.config))
    chosen = [c for c in configs if config_of(c) == wanted]
    if not chosen:
        log.info("tuning record for kernel %r names the configuration %s, which the kernel's autotune configs no "
                 "longer hold; all configurations are compiled", call.kernel.name, wanted)
        return configs, False
    log.info("tuned: kernel %r uses its recorded configuration [%s]", call.kernel.name, chosen[0].description)
    return chosen[:1], True
