"""``tritonplug.tune``: time every configuration of every autotuned call once, and remember the winner.

``tune(fn, *args, **kwargs)`` runs ``fn`` eagerly (under ``jax.disable_jit``) on the real arguments.
Each autotuned ``triton_call`` it makes is stopped before it runs, and each of its configurations that
survives pruning (``prune_configs_by``'s ``early_config_prune``) is lowered alone (a call pinned to that
configuration) and timed as a jitted call on the operands' device: compiled and run once, warmed up,
then a median over ``runs`` samples, each sample a batch of back-to-back calls long enough to be timed
(``block_until_ready`` after each batch); one whose compiled kernel does not fit the target (more shared
memory than a block may use there: ``lowering.fitting``) is refused at its lowering, never launched, and
reported as :data:`NOT_RUN`. The fastest configuration is recorded (see
:mod:`tritonplug.tuning.store`) and the call then runs as any later lowering will: with that one
configuration.

The ``inline="auto"`` calls on a GPU are collected on the way; once ``fn`` has run, those whose translation
holds no gather, scatter or while loop get their paths from timing ``fn`` itself, jitted as one program, with
assignments of paths, greedily (:mod:`tritonplug.tuning.program_paths`: beyond noise, the bound on trials); each
gets a path record (:mod:`tritonplug.tuning.path_records`) holding the program-level times, and one without a
fusible translation a record, untimed, that it launches and why. On the CPU there is nothing to choose (its
backend runs kernels as their translations).

Triton's autotuner semantics, in JAX terms: each timed run gets fresh outputs and pristine inputs (the
jitted call donates nothing, so an input aliased to an output is copied before the kernel writes it):
``restore_value`` holds by construction. What the autotune hooks zero (``reset_to_zero``, a config's or the
autotuner's ``pre_hook``: ``calls.autotune_hooks``) is zeroed before each timed run, as before every launch.

On the CPU (the interpreter backend, which lowers only one configuration) ``tune`` times the
configurations in the interpreter, and the record makes the CPU lowering use the fastest instead of
the first.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from tritonplug.adapters import jax_compat, triton_compat
from tritonplug.calls.call import CallSpec
from tritonplug.compile import frontend, resolver
from tritonplug.errors import OutOfResourcesError, PluginError
from tritonplug.lowering.fusion import describe
from tritonplug.lowering.inline_choice import NO_TRANSLATOR, decide
from tritonplug.lowering.pipeline import kernels_on_path
from tritonplug.lowering.primitive import triton_call_p
from tritonplug.process.state import state
from tritonplug.records import BufferSpec
from tritonplug.tuning import program_paths
from tritonplug.tuning.path_records import path_identity, path_key, path_record
from tritonplug.tuning.records import TuningRecord
from tritonplug.tuning.select import active_session, call_identity, call_key, config_of, target_of

#: How a report's reason starts for an ``inline="auto"`` call beyond the trial bound (no record made).
NOT_TRIED = "not tried"
_NOT_PERSISTED = " (not persisted: the cache is disabled)"
#: How a configuration's ``error`` starts when it was never launched: its kernel does not fit the target.
NOT_RUN = "not run"


@dataclass(frozen=True)
class ConfigTiming:
    """One configuration's median time per call (``None`` with ``error`` if it could not run; an ``error`` starting
    with :data:`NOT_RUN` if it was never launched, its kernel needing more shared memory than the target has)."""

    description: str
    config: dict[str, Any]
    median_us: float | None
    error: str = ""


@dataclass(frozen=True)
class TunedCall:
    kernel: str
    backend: str
    target: str
    key: Mapping[str, Any]
    winner: str
    timings: tuple[ConfigTiming, ...]
    persisted: bool
    identity: str
    reason: str = ""


@dataclass(frozen=True)
class TuningReport:
    """What ``tune`` measured: one entry per distinct autotuned call (kernel and key)."""

    calls: tuple[TunedCall, ...]

    def to_json(self) -> list[dict[str, Any]]:
        return [dataclasses.asdict(c) for c in self.calls]

    def __str__(self) -> str:
        if not self.calls:
            return "tritonplug.tune: the function made no autotuned triton_call"
        lines = []
        for c in self.calls:
            lines.append(f"{c.kernel} on {c.target} key={c.key['args']} -> [{c.winner}]"
                         f"{'' if c.persisted or c.reason.startswith(NOT_TRIED) else _NOT_PERSISTED}"
                         f"{': ' + c.reason if c.reason else ''}")
            for t in sorted(c.timings, key=lambda t: math.inf if t.median_us is None else t.median_us):
                shown = f"{t.median_us:12.1f} us" if t.median_us is not None else \
                    f"      {t.error}" if t.error.startswith(NOT_RUN) else f"      failed: {t.error}"
                lines.append(f"  {shown}  {t.description}")
        return "\n".join(lines)


def tune(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> TuningReport:
    """Time every configuration of every autotuned ``triton_call`` that ``fn(*args, **kwargs)`` makes, and every
    ``inline="auto"`` call's path (on a GPU, where its translation may fuse) by timing ``fn`` as one jitted program
    with assignments of paths, on the device its arguments live on, and record the fastest for later lowerings (in
    this process and, through the cache directory, in others). Returns what was measured."""
    return Tuner().run(fn, *args, **kwargs)


class Tuner:
    """``tune`` with its measurement settings: ``runs`` samples per configuration (median), each at least
    ``sample_seconds`` long (batches of calls), after ``warmup`` untimed calls; at most ``path_trials`` trials of
    ``inline="auto"`` calls per program (:mod:`tritonplug.tuning.program_paths`)."""

    def __init__(self, runs: int = 5, sample_seconds: float = 0.01, warmup: int = 2,
                 path_trials: int = program_paths.MAX_TRIALS) -> None:
        if not (isinstance(runs, int) and runs >= 1):
            raise ValueError(f"runs must be an int >= 1, got {runs!r}")
        if not (isinstance(sample_seconds, (int, float)) and sample_seconds >= 0):
            raise ValueError(f"sample_seconds must be a number >= 0, got {sample_seconds!r}")
        if not (isinstance(warmup, int) and warmup >= 0):
            raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
        if not (isinstance(path_trials, int) and path_trials >= 0):
            raise ValueError(f"path_trials must be an int >= 0, got {path_trials!r}")
        self.runs, self.sample_seconds, self.warmup = runs, float(sample_seconds), warmup
        self.path_trials = path_trials
        self._tuned: dict[str, TunedCall] = {}
        self._candidates: dict[str, tuple[CallSpec, tuple[BufferSpec, ...], str, Any, Any]] = {}

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> TuningReport:
        if not callable(fn):
            raise TypeError(f"tune() needs a callable as its first argument, got {type(fn).__name__}")
        self._tuned, self._candidates = {}, {}
        token = active_session.set(self)
        try:
            with jax.disable_jit():
                jax.block_until_ready(fn(*args, **kwargs))
        finally:
            active_session.reset(token)
        if self._candidates:
            self._decide_paths(fn, args, kwargs)
        if self._tuned:
            jax.clear_caches()  # programs lowered before now carried every configuration
        return TuningReport(tuple(self._tuned.values()))

    def observe(self, args: Sequence[Any], call: CallSpec) -> None:
        """Called by the primitive's eager rule for an autotuned call about to run on ``args``."""
        if call.bound.refs:
            raise NotImplementedError(f"tritonplug.tune: kernel {call.kernel.name!r} is called on a mutable Ref "
                                      f"(jax.new_ref), which timing runs would modify; tune it on arrays")
        operands = tuple(BufferSpec(tuple(a.shape), a.dtype.name) for a in args)
        device = _device_of(args)
        platform = jax_compat.lowering_platform(device.platform)
        backend = state.host().backend_for(platform, call.options.inline is True)
        target = backend.detect_target(platform, device, call.options.target_hints(call.options.inline is True))
        if target is None:  # as the lowering would refuse it
            raise PluginError(f"backend {backend.name!r} claims platform {platform!r} but detected no target for it")
        identity = call_identity(call, operands, backend.name, target)
        if identity in self._tuned:
            return
        configs = resolver.resolve(call, operands).configs
        with jax.disable_jit(False):
            timings = tuple(self._time(dataclasses.replace(call, pinned_config=c.autotune_config), args,
                                       c.description, config_of(c)) for c in configs)
        finished = [t for t in timings if t.median_us is not None]
        if not finished:
            raise RuntimeError(f"tritonplug.tune: no configuration of kernel {call.kernel.name!r} ran:\n"
                               + "\n".join(f"  [{t.description}] {t.error}" for t in timings))
        best = min(finished, key=lambda t: math.inf if t.median_us is None else t.median_us)
        record = TuningRecord(
            triton_compat.source_key(call.kernel.fn), backend.name, target_of(target), call_key(call, operands),
            best.config,
            {"kernel": call.kernel.name, "times_us": {t.description: t.median_us for t in finished},
             "device": str(getattr(device, "device_kind", device.platform)), "triton": triton_compat.TRITON_VERSION,
             "tritonplug": frontend.TRITONPLUG_VERSION,
             "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
        persisted = state.tuning.put(record)
        self._tuned[identity] = TunedCall(call.kernel.name, backend.name, target.describe(), record.key,
                                          best.description, timings, persisted, identity)

    def observe_path(self, args: Sequence[Any], call: CallSpec) -> None:
        """Called by the primitive's eager rule for an ``inline="auto"`` call about to run on ``args``: a call
        whose translation holds no gather, scatter or while loop is a candidate for the program's trials; one
        without is recorded, untimed, as launched and why. Nothing on a platform whose backend runs translations
        already (the CPU)."""
        operands = tuple(BufferSpec(tuple(a.shape), a.dtype.name) for a in args)
        device = _device_of(args)
        platform = jax_compat.lowering_platform(device.platform)
        own = state.host().backend_for(platform)
        target = own.detect_target(platform, device, call.options.target_hints())
        if own.info.inlines or target is None:
            return
        identity = path_identity(call, operands, own.name, target)
        if identity in self._tuned or identity in self._candidates:
            return
        if not state.host().inlines():
            self._tuned[identity] = TunedCall(call.kernel.name, own.name, target.describe(),
                                              path_key(call, operands), "launch", (), False, identity,
                                              f"{NOT_TRIED}: {NO_TRANSLATOR}")
            return
        with jax.disable_jit(False):
            reason = _untranslatable(dataclasses.replace(call, options=dataclasses.replace(call.options, inline=True)),
                                     platform, device, operands)
        if not reason:
            self._candidates[identity] = (call, operands, own.name, target, device)
            return
        self._record_path(identity, call, operands, own.name, target, device, "launch", (), reason, "")

    def _decide_paths(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """The candidates' paths from timing ``fn`` as one program (``program_paths.greedy``), recorded."""
        whole, arrays = program_paths.program_of(fn, args, kwargs)
        name = program_paths.name_of(fn)

        def time_us(paths: Mapping[str, str]) -> list[float]:
            compiled = program_paths.compiled_with(whole, arrays, paths)
            return self._samples_us(lambda: compiled(*arrays))

        try:
            search = program_paths.greedy(list(self._candidates), time_us, max_trials=self.path_trials)
        except Exception as exc:
            raise RuntimeError(f"tritonplug.tune: deciding the inline='auto' paths times {name} as one jitted "
                               f"program (jax.jit of it, every array argument traced), which failed with all "
                               f"calls launched: {type(exc).__name__}: {exc}") from exc
        tried = {t.identity: t for t in search.trials}
        for identity, (call, operands, backend, target, device) in self._candidates.items():
            trial = tried.get(identity)
            if trial is None:
                self._tuned[identity] = TunedCall(
                    call.kernel.name, backend, target.describe(), path_key(call, operands), "launch", (), False,
                    identity,
                    f"{NOT_TRIED}: {name} has more than {self.path_trials} inline='auto' calls to try (no record "
                    f"made; it keeps any it had)")
                continue
            joint = search.joint if identity in search.joined else None
            timings = (ConfigTiming("launch", {"path": "launch"}, trial.launch_us),
                       ConfigTiming("inline", {"path": "inline"}, trial.inline_us, trial.error))
            self._record_path(identity, call, operands, backend, target, device, search.chosen[identity],
                              timings, _path_reason(trial, joint, len(search.joined), name), name)
        jax.clear_caches()  # the trials' programs are not what later lowerings (which follow the records) make

    def _record_path(self, identity: str, call: CallSpec, operands: tuple[BufferSpec, ...], backend: str,
                     target: Any, device: Any, path: str, timings: tuple[ConfigTiming, ...], reason: str,
                     program: str) -> None:
        finished = [t for t in timings if t.median_us is not None]
        info = {"times_us": {t.description: t.median_us for t in finished}, "reason": reason,
                "timed": "program" if program else "", "program": program,
                "device": str(getattr(device, "device_kind", device.platform)),
                "tritonplug": frontend.TRITONPLUG_VERSION}
        record = path_record(call, operands, backend, target, path, {k: v for k, v in info.items() if v})
        persisted = state.tuning.put(record)
        self._tuned[identity] = TunedCall(call.kernel.name, backend, target.describe(), record.key, path, timings,
                                          persisted, identity, reason)

    def _time(self, call: CallSpec, args: Sequence[Any], description: str, config: dict[str, Any]) -> ConfigTiming:
        run = jax.jit(functools.partial(triton_call_p.bind, call=call))
        try:
            median = statistics.median(self._samples_us(lambda: run(*args)))
        except OutOfResourcesError as exc:  # raised at lowering, so the configuration never ran
            return ConfigTiming(description, config, None, f"{NOT_RUN}: {str(exc).splitlines()[1].strip():.300}")
        except Exception as exc:  # one configuration that cannot compile or run does not end the tuning
            return ConfigTiming(description, config, None, f"{type(exc).__name__}: {str(exc).splitlines()[0]:.300}")
        return ConfigTiming(description, config, median)

    def _samples_us(self, run: Callable[[], Any]) -> list[float]:
        """``run``'s time per call in microseconds: run once (compiling), ``warmup`` times, then ``runs`` samples,
        each a batch of back-to-back runs at least ``sample_seconds`` long."""
        start = time.perf_counter()
        jax.block_until_ready(run())
        for _ in range(self.warmup):
            start = time.perf_counter()
            jax.block_until_ready(run())
        one = max(time.perf_counter() - start, 1e-7)
        calls = max(1, min(1000, math.ceil(self.sample_seconds / one)))
        samples = []
        for _ in range(self.runs):
            start = time.perf_counter()
            out = None
            for _ in range(calls):
                out = run()
            jax.block_until_ready(out)
            samples.append((time.perf_counter() - start) / calls * 1e6)
        return samples


def _untranslatable(call: CallSpec, platform: str, device: Any, operands: tuple[BufferSpec, ...]) -> str:
    """Why ``call`` (given ``inline=True``) may not be inlined by ``"auto"``: no translation, or one holding a
    gather, scatter or while loop (``lowering.fusion``); ``""`` when it may."""
    try:
        _, choice = kernels_on_path(decide(call, platform, device, operands), call, platform, device, operands)
    except NotImplementedError as exc:
        return f"untranslatable: {exc}"
    counts = choice.unfusible or {}
    return f"its translation holds {describe(counts)}" if any(counts.values()) else ""


def _device_of(args: Sequence[Any]) -> Any:
    for a in args:
        devices = getattr(a, "devices", None)
        if callable(devices):
            found = sorted(devices(), key=lambda d: d.id)
            if found:
                return found[0]
    return jax.devices()[0]


def _path_reason(trial: program_paths.Trial, joint: program_paths.Trial | None, joined: int, name: str) -> str:
    """Why a tried candidate takes its path: nothing for an inlining kept on its own; for one not kept, why not,
    and what the joint trial of the ``joined`` candidates not kept (``joint``, where one ran) found."""
    if trial.kept:
        return ""
    alone = (f"inlining it failed: {trial.error}" if trial.error else
             f"inlining it made {name} slower" if (trial.inline_us or 0.0) >= trial.launch_us else
             f"inlining it made {name} faster by no more than its noise (program_paths.beats)")
    if joint is None:
        return alone
    together = (f"{joint.launch_us:.1f} -> {joint.inline_us:.1f} us" if joint.inline_us is not None
                else f"failed: {joint.error}")
    return (f"{alone} alone, but inlined with the {joined - 1} other calls not kept, {name} ran faster "
            f"({together}): inlined together" if joint.kept else
            f"{alone}; inlined with the {joined - 1} other calls not kept, no faster either ({together})")
