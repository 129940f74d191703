"""``tritonplug.tune``'s decision of the ``inline="auto"`` calls' paths: by timing the whole program, greedily.

Whether inlining a call pays depends on its neighbours (XLA fuses the translation with them, or schedules the
program worse), so timing a call alone, in a program of its own, can pick the slower path. Instead ``tune`` times
the function it is given, jitted as one program (:func:`program_of`), with assignments of paths (:func:`greedy`):

* start from every candidate launched and time the program;
* for each candidate in the order the program first calls it, time the program with it inlined and the others as
  chosen so far; keep the inlining only if it beats the current program beyond its noise (:func:`beats`: every
  sample faster than every one of the current program's, and the median by at least :data:`MIN_GAIN`).
  A threshold relative to the whole program would not do: in a model's step one call is a small part of the
  program (in the Llama example about 2 % of a two-layer step, the whole call's cost), so a 2 % threshold
  could never keep one;
* at most :data:`MAX_TRIALS` candidates are tried (each trial compiles the whole program); later ones are not
  tried and stay launched in those trials (``tune`` records nothing for them: they keep any record they had);
* a candidate not kept before a later one was kept was timed in another program than the one chosen (in a
  forward + backward, RMSNorm's forward inlined paid only once its backward was): each is tried once more, in
  order, against the program chosen after the first pass;
* last, when two or more of the tried candidates were not kept, one joint trial inlines them all on top of the
  kept ones, and keeps that if it beats the greedy choice beyond noise: inlinings that pay only together (two
  neighbours XLA fuses into one loop only when neither is a custom call between them) each lose alone.

A candidate is a distinct call (kernel source, every argument, target: its path record's identity) whose
translation holds no gather, scatter or while loop; a call the program makes twice is one candidate, both
inlined or both launched. Calls without a fusible translation are never tried.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from tritonplug.tuning.path_records import trying

#: The least gain (a fraction of the current program's median) an inlining must bring to be kept, however clean
#: its samples' separation: with one sample each, the separation alone is one comparison.
MIN_GAIN = 0.002
#: How many candidates ``tune`` tries for one program (one compile of the program each, plus the baseline's).
MAX_TRIALS = 16


@dataclass(frozen=True)
class Trial:
    """One candidate's trial: the program's median time with it launched (the current assignment) and inlined
    (``None`` with ``error`` if that program failed to compile or run)."""

    identity: str
    launch_us: float
    inline_us: float | None
    kept: bool
    error: str = ""


@dataclass(frozen=True)
class Search:
    """What :func:`greedy` found: the assignment (``"inline"``/``"launch"`` by candidate), its trials in the order
    they ran (a candidate tried again has two: the later one's verdict holds), and the joint trial (``identity``
    :data:`JOINT`, its program with ``joined`` inlined as well) when one ran. The times of a candidate's own trial
    are against the program as it stood then."""

    chosen: dict[str, str]
    trials: list[Trial]
    joint: Trial | None = None
    joined: tuple[str, ...] = ()


#: The joint trial's identity (no candidate's: those are call identities)
JOINT = "(the candidates not kept, inlined together)"


def beats(samples: Sequence[float], current: Sequence[float], min_gain: float = MIN_GAIN) -> bool:
    """Whether a program timed ``samples`` (µs) is faster than one timed ``current`` beyond noise: all of its
    samples below all of ``current``'s (two programs equally fast give that by chance with probability
    ``2 / C(2n, n)``: 2 in 252 at ``tune``'s 5 samples each), and its median below by at least ``min_gain``."""
    return (max(samples) < min(current)
            and statistics.median(samples) < statistics.median(current) * (1.0 - min_gain))


def _trial(identity: str, best: Sequence[float], assignment: Mapping[str, str],
           time_us: Callable[[Mapping[str, str]], Sequence[float]], min_gain: float
           ) -> tuple[Trial, Sequence[float] | None]:
    """``assignment`` timed against the current program (timed ``best``), and its samples (``None``
    where its program failed to compile or run: that trial is not kept)."""
    try:
        samples = time_us(assignment)
    except Exception as exc:  # an inlining that cannot compile or run is not kept; the others are still tried
        return Trial(identity, statistics.median(best), None, False,
                     f"{type(exc).__name__}: {str(exc).splitlines()[0]:.300}"), None
    kept = beats(samples, best, min_gain)
    return Trial(identity, statistics.median(best), statistics.median(samples), kept), samples


def greedy(candidates: Sequence[str], time_us: Callable[[Mapping[str, str]], Sequence[float]],
           min_gain: float = MIN_GAIN, max_trials: int = MAX_TRIALS) -> Search:
    """The greedy search over the first ``max_trials`` candidates, then the joint trial of those it did not keep
    (two or more, none of whose own trials failed). ``time_us(assignment)`` is the program's time samples under
    ``assignment``; an exception from the baseline (all launched) propagates, one from a trial drops it."""
    chosen = {identity: "launch" for identity in candidates}
    best = time_us(chosen)
    trials: list[Trial] = []

    def attempt(identity: str) -> Trial:
        nonlocal chosen, best
        assignment = {**chosen, identity: "inline"}
        trial, samples = _trial(identity, best, assignment, time_us, min_gain)
        trials.append(trial)
        if trial.kept and samples is not None:  # kept: it ran
            chosen, best = assignment, samples
        return trial

    first = [attempt(identity) for identity in candidates[:max_trials]]
    last_kept = max((i for i, trial in enumerate(first) if trial.kept), default=0)
    for trial in first[:last_kept]:  # tried before the program changed: once more against the chosen one
        if not trial.kept and not trial.error:
            attempt(trial.identity)
    latest = {trial.identity: trial for trial in trials}
    joined = tuple(t.identity for t in latest.values() if not t.kept and not t.error)
    if len(joined) < 2:
        return Search(chosen, trials)
    assignment = {**chosen, **dict.fromkeys(joined, "inline")}
    joint, _ = _trial(JOINT, best, assignment, time_us, min_gain)
    return Search(assignment if joint.kept else chosen, trials, joint, joined)


def program_of(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
               ) -> tuple[Callable[..., Any], list[Any]]:
    """``fn(*args, **kwargs)`` as a function of its array arguments only (every other leaf, a Python scalar or
    string, is held static as the call gave it), and those arrays."""
    leaves, tree = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
    dynamic = [i for i, leaf in enumerate(leaves) if isinstance(leaf, (jax.Array, np.ndarray))]

    def whole(*arrays: Any) -> Any:
        filled = list(leaves)
        for i, array in zip(dynamic, arrays, strict=True):
            filled[i] = array
        a, k = jax.tree_util.tree_unflatten(tree, filled)
        return fn(*a, **k)

    return whole, [leaves[i] for i in dynamic]


def compiled_with(whole: Callable[..., Any], arrays: Sequence[Any], paths: Mapping[str, str]) -> Any:
    """``whole`` jitted and compiled for ``arrays`` with the candidates' ``paths`` forced. JAX's caches are
    cleared first (they hold programs lowered with other paths: a jitted function ``fn`` calls, ``fn`` itself), and
    the fresh ``jax.jit`` traces and lowers again inside the override."""
    jax.clear_caches()
    with trying(paths):
        return jax.jit(whole).lower(*arrays).compile()


def name_of(fn: Callable[..., Any]) -> str:
    """The name a record gives the program: ``module.qualname`` where ``fn`` has them (a ``functools.partial``'s
    function's, marked ``partial(...)``)."""
    if isinstance(fn, functools.partial):
        return f"partial({name_of(fn.func)})"
    inner = getattr(fn, "__wrapped__", fn)
    qualname = getattr(inner, "__qualname__", None) or type(inner).__name__
    module = getattr(inner, "__module__", None)
    return f"{module}.{qualname}" if module else qualname
