"""Which path a call's lowering takes on a platform: launched by the platform's backend, or inlined as its
translation to XLA ops (by the backend that declares ``inlines``), and why.

The call's mode (``calls/inline_mode.py``: call > kernel > ``TRITONPLUG_INLINE``) decides: ``True`` inlines,
``False`` launches. ``"auto"`` inlines only where

1. a path record (``tuning/path_records.py``, made by ``tritonplug.tune``, which times the whole program with the
   call launched and inlined: ``tuning/program_paths.py``) for this call on this target says inlined, and
2. the translation exists and holds no gather, scatter or while loop (``lowering/fusion.py``; checked by the
   lowering once it has the translation, :func:`launch_instead` otherwise);

without a record it launches (never inlining unmeasured), and so it does where no loaded backend translates kernels
(:data:`NO_TRANSLATOR`). Where the platform's own backend declares ``inlines`` (the CPU: its kernels are their
translations already) ``"auto"`` has nothing to choose and is that backend.

Every lowering's choice is kept (``state.paths``) for ``tritonplug.inspection.paths``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonplug.calls.call import CallSpec
from tritonplug.compile.backends import Backend
from tritonplug.errors import PluginError
from tritonplug.process.state import state
from tritonplug.records import BufferSpec, Target
from tritonplug.tuning.path_records import TRIAL, recorded_path

#: What the paths are called in :class:`PathChoice`.
LAUNCHED, INLINED = "launched", "inlined"
#: Why an ``"auto"`` call cannot be inlined in this process (its lowering launches it; ``tune`` does not try it).
NO_TRANSLATOR = ("no loaded backend translates kernels to XLA ops (the CPU backend's plugin, distribution "
                 "tritonplug-interpret, is not installed)")


@dataclass(frozen=True)
class PathChoice:
    """The path one lowering of a call took (``tritonplug.inspection.paths``).

    ``path``: :data:`LAUNCHED` (a custom call, or the CPU backend's own kernel) or :data:`INLINED` (XLA ops in the
    program). ``mode``: the call's mode, set by ``source`` (``"call"``, ``"kernel"``, ``"setting"``, ``"default"``).
    ``reason``: why, in words. ``unfusible``: the translation's gathers, scatters and while loops where one was made
    and checked (``inline=True`` or a record's ``"auto"``). ``times_us``: what the path record measured, if any;
    ``program``: when those are times of a whole program (``tune`` times the program it is given), its name.
    ``skipped``: the configurations left out because their compiled kernel does not fit the target (more shared
    memory than a block may use there, ``lowering.fitting``), each ``"[config] why"``.
    """

    kernel: str
    platform: str
    path: str
    mode: bool | str
    source: str
    reason: str
    unfusible: Mapping[str, int] | None = None
    times_us: Mapping[str, float] | None = None
    program: str | None = None
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """The backend and target a lowering uses, its choice so far, and whether the translation must be checked
    for gathers, scatters and while loops before it is kept (``"auto"`` inlining)."""

    backend: Backend
    target: Target
    choice: PathChoice
    check: bool = False


def decide(call: CallSpec, platform: str, device: Any | None, operands: Sequence[BufferSpec]) -> Decision:
    """The path ``call`` takes on ``platform`` by its mode (and, under ``"auto"``, its path record)."""
    mode, source = call.options.inline, call.inline_from
    assert mode is not None, "the call resolves its mode (api._call)"
    by = {"call": "the call", "kernel": "the kernel's default (tritonplug.set_inline)",
          "setting": "TRITONPLUG_INLINE", "default": "default (no call, kernel or TRITONPLUG_INLINE sets one)"}[source]
    choice = PathChoice(call.kernel.name, platform, INLINED if mode is True else LAUNCHED, mode, source, "")
    if mode is True:
        return _decision(call, platform, device, True, dataclasses.replace(choice, reason=f"inline=True by {by}"))
    if mode is False:
        return _decision(call, platform, device, False, dataclasses.replace(choice, reason=f"inline=False by {by}"))
    own = state.host().backend_for(platform)
    if own.info.inlines:
        return _decision(call, platform, device, False, dataclasses.replace(
            choice, reason=f"inline='auto' by {by}: on {platform!r} the backend {own.name!r} runs kernels as their "
                           f"translation already; nothing to choose"))
    if not state.host().inlines():
        return _decision(call, platform, device, False, dataclasses.replace(
            choice, reason=f"inline='auto' by {by}: {NO_TRANSLATOR}; launched"))
    target = _target(own, call, platform, device, False)
    record = recorded_path(state.tuning, call, operands, own.name, target)
    if record is None:
        return Decision(own, target, dataclasses.replace(
            choice, reason=f"inline='auto' by {by}: no path record for this call on {target.describe()} "
                           f"(tritonplug.tune measures both paths); launched"))
    times = dict(record.info.get("times_us") or {}) or None
    program = record.info.get("program") if record.info.get("timed") == "program" else None
    measured = ", ".join([f"{k} {v:.1f} us" for k, v in sorted((times or {}).items())]
                         + ([f"times of the whole program {program}"] if program else []))
    choice = dataclasses.replace(choice, times_us=times, program=program)
    if record.config.get("path") != "inline":
        why = (record.info.get("reason") or "measured faster launched") + (f" ({measured})" if measured else "")
        return Decision(own, target, dataclasses.replace(
            choice, reason=f"inline='auto' by {by}: the path record says launch: {why}"))
    reason = record.info.get("reason")  # an inlining kept only jointly with others says so
    why = reason if reason == TRIAL else (reason or "the path record measured inlined faster") + (
        f" ({measured})" if measured else "")
    return dataclasses.replace(
        _decision(call, platform, device, True, dataclasses.replace(
            choice, path=INLINED, reason=f"inline='auto' by {by}: {why}")), check=True)


def launch_instead(decision: Decision, call: CallSpec, platform: str, device: Any | None, why: str) -> Decision:
    """An ``"auto"`` inlining whose translation failed the check: launched, saying why."""
    reason = f"{decision.choice.reason}, but {why}; launched"
    return _decision(call, platform, device, False, dataclasses.replace(decision.choice, path=LAUNCHED,
                                                                        reason=reason))


def _decision(call: CallSpec, platform: str, device: Any | None, inline: bool, choice: PathChoice) -> Decision:
    backend = state.host().backend_for(platform, inline)
    return Decision(backend, _target(backend, call, platform, device, inline), choice)


def _target(backend: Backend, call: CallSpec, platform: str, device: Any | None, inline: bool) -> Target:
    target = backend.detect_target(platform, device, call.options.target_hints(inline))
    if target is None:
        raise PluginError(f"backend {backend.name!r} claims platform {platform!r} but detected no target for it")
    return target
