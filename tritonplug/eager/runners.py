"""The eager loop's repeat of a recent call, recognised by a guard written for it and run in the same breath.

An eager loop calls the same kernel the same way again and again. The quick key (``eager.keys``) finds such a call's
entry by building a flat key and looking it up. On an H100 (``bench/eager_floor.py``) that costs several
microseconds where it really runs, right after each wait for the device, with the interpreter's caches cold: a
synchronised call took 1.07× XLA's ``x + y``, where the same call checked by a single comparison took 0.95×. What
costs there is the amount of Python run: a generic comparison loop was no faster than the key, and a guard of its
own still left 1.03–1.08×, spent in the frames between it and JAX's dispatch (the record loop, the pick, the
result).

So, as ``torch.compile`` guards its graphs, each call that its quick key found gets a *guard* (``eager.guards``,
written from the same table of argument kinds as the key). A kernel's guards are written into one function, its
*runner* (``memo.recent``, by the kernel's id): the first guard that holds runs its record's program on the call's
arrays and returns its result, in that one frame; none holding, it returns None (no call's result) and the call
takes the quick key. The runner checks ``jax_enable_x64`` once, for all the records; the kernel is the same object,
as the runner holds it and is found by its id.

A runner runs in a ``tritonplug.tune`` session too: the session runs its function under ``jax.disable_jit()``,
where the program's ``jit`` calls the primitive itself, whose eager rule hands an autotuned call to the session
(``tests/test_call_repeats.py`` checks that a session sees a call its kernel's runner has recorded).

The runner's text is kept (``KernelRepeats.source``; ``tritonplug.inspection.eager_runner_source(kernel)``), is in
``linecache`` under its own file name (a traceback through it shows its lines) and is logged at debug level
(``eager.generated``). ``KernelRepeats.match`` writes a twin from the same guards that returns the matching entry
instead of running it, for tests to ask which record a call matches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonplug.eager import generated, guards
from tritonplug.eager.kinds import NAMESPACE
from tritonplug.eager.memo import Entry

_X64 = NAMESPACE["X64"]
_MISSING = object()
_SHARED = {"X64": _X64, "ARRAY": NAMESPACE["ARRAY"], "SDS": NAMESPACE["SDS"], "MISSING": _MISSING}
#: Records kept per kernel: the forms of a call past the first four take the key path. A record is never replaced:
#: a loop over more forms than this would write (compile) a runner on every call, about 200 µs each.
RECENT_PER_KERNEL = 4


@dataclass(frozen=True, eq=False, slots=True)
class KernelRepeats:
    """A kernel's records, newest first, and the runner written from their guards (slotted: ``triton_call`` reads
    ``run`` on every eager call)."""

    kernel: Any
    repeats: tuple[guards.Repeat, ...]
    #: ``run(kernel, args, kwargs, out_value)``: the first matching record's program run, its result; else None
    run: Callable[[Any, Sequence[Any], Mapping[str, Any], Any], Any]
    source: str

    def match(self, kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_value: Any) -> Any:
        """The first record whose guard holds for this call, its entry; else None (the runner's guards, written
        again into a function that returns the entry instead of running it)."""
        matcher, _ = write(self.kernel, self.repeats, lambda repeat: f"return {repeat.tag}E", "matcher")
        return matcher(kernel, args, kwargs, out_value)


def kernel_name(kernel: Any) -> str:
    """The kernel's function name, for the generated source's file name."""
    for holder in (kernel, getattr(kernel, "fn", None)):
        name = getattr(holder, "__name__", None)
        if isinstance(name, str):
            return name
    return type(kernel).__name__


def write(kernel: Any, repeats: tuple[guards.Repeat, ...], statement: Callable[[guards.Repeat], str],
          what: str = "runner") -> tuple[Callable[..., Any], str]:
    """One function of the records' guards, each followed by its ``statement``; None after the last."""
    lines = ["def runner(kernel, args, kwargs, out_value):",
             "    if X64.value is not X:",
             "        return None"]
    constants: dict[str, Any] = {**_SHARED, "K": kernel, "X": _X64.value}  # K: the runner keeps its kernel alive
    for repeat in repeats:
        constants.update(repeat.constants)
        lines += [f"    if {repeat.guard}:", f"        {statement(repeat)}"]
    lines.append("    return None")
    source = "\n".join(lines) + "\n"
    return generated.define("runner", source, constants, f"{what} of {kernel_name(kernel)}"), source


def remember(memo: Any, entry: Entry, kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
             out_value: Any) -> None:
    """Keep a call that its quick key just found as its kernel's newest record in ``memo`` (``state.memo``), unless
    some part of it may change in place, it has a record already or its kernel has all it may keep; the kernel's
    runner is written again with it."""
    key = id(kernel)
    known = memo.recent.get(key)
    records = () if known is None else known.repeats
    if len(records) >= RECENT_PER_KERNEL:
        return
    for repeat in records:
        if repeat.entry is entry:
            return
    if not guards.recordable(args, kwargs):
        return
    records = (guards.record(entry, args, kwargs, out_value, f"r{len(records)}_"), *records)
    run, source = write(kernel, records, lambda repeat: repeat.run)
    memo.recent[key] = KernelRepeats(kernel, records, run, source)  # holds the kernel: its id names no other object


def runner_source(memo: Any, kernel: Any) -> str | None:
    """The source of ``kernel``'s runner in ``memo``, or None where no call of it is recorded."""
    known = memo.recent.get(id(kernel))
    return None if known is None or known.kernel is not kernel else known.source
