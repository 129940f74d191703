"""Compiles that start when a call is traced, so they overlap JAX's tracing and each other.

``triton_call`` hands every call it binds to :func:`on_bind`. A call bound inside a trace
(``jax.jit``), for the platform the program will most likely run on (JAX's default backend, on its
first device), when that platform's backend compiles in workers, is planned as its lowering will plan
it (configurations, tuning record, specialisation, cache keys) and compiled on a background thread; the
plan is kept (``state.plans``) and the lowering of the same call for the same target uses it.
The compile service looks in memory, on disk and in the remote tier first; only a miss starts the
worker pool (whose workers import Triton and the plugins while JAX keeps tracing), so a process whose
kernels are all cached never starts one. The lowering later makes the same requests and collects the
results from the compile service (in memory, or in flight: it waits). A guess that turns out wrong
(another device kind, another platform in ``lowering_platforms``) only costs the background work: the
lowering compiles what it needs.

An eager call is lowered at once by its own bind, so it starts nothing early. Errors of an early
compile are left for the lowering to report. ``TRITONPLUG_EARLY_COMPILE=0`` turns all of this off (the
pool then starts, and compiles run, when the lowering needs them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from tritonplug import settings
from tritonplug.adapters import jax_compat
from tritonplug.calls.call import CallSpec
from tritonplug.compile.backends import Backend
from tritonplug.lowering.pipeline import fingerprint, plan_call, plan_key
from tritonplug.process.state import state
from tritonplug.records import BufferSpec

log = logging.getLogger("tritonplug.compile.compiler")

VARIABLE = settings.EARLY_COMPILE.name

_slots = threading.BoundedSemaphore(8)  # early compiles planned at once; the pool queues their tasks anyway


def on_bind(call: CallSpec, arrays: Sequence[Any]) -> None:
    """Start a traced call's compiles for the platform JAX defaults to, in the background."""
    if not settings.EARLY_COMPILE.get():
        return
    if call.bound.refs or not any(isinstance(a, jax.core.Tracer) for a in arrays):
        return
    try:
        platform = jax_compat.lowering_platform(jax.default_backend())
        backend = state.host().backend_for(platform, call.options.inline is True)
    except Exception:  # no backend for the default platform: nothing to start
        return
    if not backend.compiles_in_worker:
        return
    operands = tuple(BufferSpec(tuple(int(d) for d in a.shape), np.dtype(a.dtype).name) for a in arrays)
    # Daemon threads: a process that exits (or only lowers) must not wait for a compile it never needs.
    threading.Thread(target=_compile_early, args=(backend, platform, call, operands), daemon=True,
                     name="tritonplug-early-compile").start()


def _compile_early(backend: Backend, platform: str, call: CallSpec, operands: tuple[BufferSpec, ...]) -> None:
    with _slots:
        _compile(backend, platform, call, operands)


def _compile(backend: Backend, platform: str, call: CallSpec, operands: tuple[BufferSpec, ...]) -> None:
    try:
        try:
            device = jax.devices(platform)[0]
        except (RuntimeError, IndexError):  # lowering for a platform this process has no device of
            device = None
        target = backend.detect_target(platform, device, call.options.target_hints(call.options.inline is True))
        if target is None:
            return
        environment = fingerprint()
        plan = plan_call(backend, target, call, operands, environment)
        state.plans.store(plan_key(backend, target, call, operands, environment), plan)  # its lowering plans no more
        state.compiler.compile(backend, target, plan.requests)
    except Exception as exc:
        log.info("early compile of kernel %r did not finish (its lowering reports any error): %s: %s",
                 call.kernel.name, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
