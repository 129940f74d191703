"""Where one eager ``triton_call`` spends its time, on whatever backend is present (CPU interpret or a GPU).

Three parts, one JSON file:

* **per call**: the same work (``x + y`` on 1,024 floats) as an eager ``triton_call`` of ``examples/add.py``,
  as the call's own jitted program called directly (``dispatch``: JAX's C++ dispatch of the memoised
  program, the floor under our Python), and as JAX's own op (``xla``: ``x + y``); synchronised after each call
  (``sync``, the implementations alternating call by call) and 500 back to back (``async``), in interleaved
  rounds, medians over rounds. ``python_us`` is ``tritonplug - dispatch``: the host's Python work per repeat
  call. On the CPU backend read it from ``async``:
  a synchronised call there mostly measures whether the executor thread had finished before the wait (about 17
  or about 45 µs on a 2-core EPYC, whoever dispatched), not the Python in front of it.
* **python only**: the same repeat call with the memoised program swapped for a no-op (``python_only_us``): the
  host's Python alone, fastest round; steady where a loaded machine scatters ``python_us``.
* **python in the loop**: the same Python timed where it runs, between programs (``python_in_loop_us``): each
  call up to its return less its program's dispatch, synchronised and back to back.
* **profile**: cProfile of repeat calls, the top functions by own time, in microseconds per call.
* **first call**: the path of one unmemoised call (binding, checks, lowering, the custom call), traced with
  ``sys.setprofile``: its calls into the host's functions (``tritonplug/``, not the plugins'), the hops between
  modules, the *returns* (a call into a module that the path had entered before and left), and how often each
  derivation ran.

Usage: python bench/profile_eager.py [--rounds N] [--out FILE] [--top N]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _util import ROOT, batched_seconds, format_table, interleaved_seconds, load_example, write_json  # noqa: E402

N = 1024
ASYNC_CALLS = 500
SYNC_CALLS = 200
#: Functions that derive something from a call; the first-call trace counts how often each ran.
DERIVATIONS = ("named_args", "named_args_for_heuristics", "grid_for", "zeroed_for", "require_constexprs",
               "compatible_configs", "expand_configs", "check_heuristic_names", "check_kernel",
               "constexpr_value", "check_option_names", "environment_key", "kernel_environment",
               "fingerprint", "_resolve")


def per_call(fns: dict[str, Callable[[], Any]], rounds: int, settle: int = 0) -> list[dict[str, Any]]:
    """Synchronised and back-to-back per-call times of each of ``fns``, and their ratios to ``xla``; ``settle``:
    untimed calls of the same implementation before each timed synchronised one (``_util.interleaved_seconds``)."""
    import jax

    def sync_sample(order: list[str]) -> dict[str, float]:  # call by call, alternating: drift reaches all alike
        times = interleaved_seconds({name: fns[name] for name in order}, SYNC_CALLS, warmup=0,
                                    sync=jax.block_until_ready, settle=settle)
        return {name: statistics.median(values) for name, values in times.items()}

    def async_sample(order: list[str]) -> dict[str, float]:  # 500 back to back, one implementation at a time
        return {name: batched_seconds(lambda i, fn=fns[name]: fn(), ASYNC_CALLS, 1, 0, jax.block_until_ready)[0]
                for name in order}

    records = []
    names = list(fns)
    for bench, sample in (("sync", sync_sample), ("async", async_sample)):
        sample(names)  # warm-up
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            for name, value in sample(names[r % len(names):] + names[:r % len(names)]).items():
                samples[name].append(value)
        xla = samples["xla"]
        for name, values in samples.items():
            ratios = [v / b for v, b in zip(values, xla, strict=True)]
            records.append({"bench": bench, "impl": name, "median_us": statistics.median(values) * 1e6,
                            "min_round_us": min(values) * 1e6, "vs_xla": round(statistics.median(ratios), 4),
                            "rounds": rounds})
        ours = statistics.median(samples["tritonplug"]) - statistics.median(samples["dispatch"])
        fastest = min(samples["tritonplug"]) - min(samples["dispatch"])  # less exposed to a shared machine's load
        records.append({"bench": bench, "impl": "python_us", "median_us": ours * 1e6, "min_round_us": fastest * 1e6})
    return records


@contextlib.contextmanager
def dispatch_replaced(entries: list[Any],
                      replace: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """Each memoised entry's ``dispatch`` replaced by ``replace(dispatch)`` for the block; the real one after it.
    The kernels' runners (``eager.runners``), which hold the programs they run, are dropped on both sides: the
    block's first repeat writes them again with what it should run."""
    from tritonplug.process.state import state

    real = [entry.dispatch for entry in entries]
    for entry in entries:
        object.__setattr__(entry, "dispatch", replace(entry.dispatch))
    state.memo.clear_repeats()
    try:
        yield
    finally:
        for entry, dispatch in zip(entries, real, strict=True):
            object.__setattr__(entry, "dispatch", dispatch)
        state.memo.clear_repeats()


def python_only(fn: Callable[[], Any], entries: list[Any], rounds: int) -> dict[str, Any]:
    """The host's Python per repeat call without the program: each memoised entry's ``dispatch`` swapped for a
    no-op, the call timed against the no-op called alone; the fastest of ``rounds`` rounds. No executor thread
    and no device queue in it, so it holds still on a loaded machine where ``python_us`` does not."""
    def noop(*arrays: Any) -> Any:
        return arrays

    def best(call: Callable[[], Any]) -> float:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(ASYNC_CALLS * 4):
                call()
            times.append((time.perf_counter() - start) / (ASYNC_CALLS * 4))
        return min(times)

    with dispatch_replaced(entries, lambda dispatch: noop):
        ours, alone = best(fn), best(lambda: noop(1, 2))
    return {"bench": "no-op dispatch", "impl": "python_only_us", "median_us": (ours - alone) * 1e6,
            "min_round_us": (ours - alone) * 1e6, "rounds": rounds}


def python_in_loop(fn: Callable[[], Any], entries: list[Any], rounds: int) -> list[dict[str, Any]]:
    """The host's Python per repeat call where it really runs, between programs: each call's time up to its return,
    less the memoised program's own dispatch (timed around it), in a synchronised loop (the host waits for the device
    between calls) and a back-to-back one; medians over calls, then over rounds. Set beside ``python_only_us``
    (the same Python, hot, with nothing in between), it shows what running after a wait or after JAX's dispatch
    costs the same Python."""
    import jax

    inner: list[float] = []

    def timed(dispatch: Callable[..., Any]) -> Callable[..., Any]:
        def run(*arrays: Any) -> Any:
            start = time.perf_counter()
            out = dispatch(*arrays)
            inner.append(time.perf_counter() - start)
            return out
        return run

    def sample(sync: bool) -> float:
        inner.clear()
        outer = []
        for _ in range(SYNC_CALLS):
            start = time.perf_counter()
            out = fn()
            outer.append(time.perf_counter() - start)
            if sync:
                jax.block_until_ready(out)
        jax.block_until_ready(out)
        return statistics.median(o - i for o, i in zip(outer, inner, strict=True))

    records = []
    with dispatch_replaced(entries, timed):
        for bench, sync in (("sync", True), ("async", False)):
            values = [sample(sync) for _ in range(rounds)]
            records.append({"bench": bench, "impl": "python_in_loop_us", "median_us": statistics.median(values) * 1e6,
                            "min_round_us": min(values) * 1e6, "rounds": rounds})
    return records


def profile(fn: Callable[[], Any], calls: int, top: int) -> list[dict[str, Any]]:
    """The ``top`` functions by own time over ``calls`` repeat calls, per call."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    stats = pstats.Stats(prof)
    rows = []
    for (filename, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = Path(filename)
        short = str(where.relative_to(ROOT)) if where.is_relative_to(ROOT) else where.name
        rows.append({"function": f"{short}:{line}({name})", "calls_per_call": round(ncalls / calls, 2),
                     "own_us": round(tottime / calls * 1e6, 3), "cumulative_us": round(cumtime / calls * 1e6, 3)})
    rows.sort(key=lambda r: -r["own_us"])
    return rows[:top]


def first_call_path(call: Callable[[], Any]) -> dict[str, Any]:
    """Trace one unmemoised call: tritonplug's function calls, module hops, returns, derivations."""
    import jax

    roots = (str(ROOT / "tritonplug"),)  # the host's modules; a plugin's work (compiling, translating) is its own
    stack: list[str | None] = []
    calls: list[tuple[str, str]] = []
    hops = returns = 0
    entered: set[str] = set()
    derivations: collections.Counter[str] = collections.Counter()

    def module_of(code: Any) -> str | None:
        filename = code.co_filename
        if not filename.startswith(roots) or code.co_name.startswith(("<", "__")):  # JAX's hashing, dataclasses
            return None
        return str(Path(filename).relative_to(ROOT).with_suffix("")).replace("/", ".")

    def tracer(frame: Any, event: str, arg: Any) -> None:
        nonlocal hops, returns
        if event == "call":
            module = module_of(frame.f_code)
            if module is not None:
                name = frame.f_code.co_name
                calls.append((module, name))
                if name in DERIVATIONS:
                    derivations[name] += 1
                caller = next((m for m in reversed(stack) if m is not None), None)
                if caller is not None and caller != module:
                    hops += 1
                    if module in entered and module not in stack:
                        returns += 1
                entered.add(module)
            stack.append(module)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(tracer)
    try:
        jax.block_until_ready(call())
    finally:
        sys.setprofile(None)
    return {"function_calls": len(calls), "modules": len({m for m, _ in calls}), "hops": hops, "returns": returns,
            "derivations": dict(sorted(derivations.items())),
            "modules_in_order": list(dict.fromkeys(m for m, _ in calls))}


def add_operands() -> tuple[Any, Any, Any, Any]:
    """``examples/add.py``'s kernel, two arrays of ``N`` floats on the default device and the output's spec."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    x = jax.device_put(np.random.default_rng(0).standard_normal(N, dtype=np.float32))
    y = jax.device_put(np.random.default_rng(1).standard_normal(N, dtype=np.float32))
    return load_example("add").add_kernel, x, y, jax.ShapeDtypeStruct((N,), jnp.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default=str(HERE / "results" / "profile-eager.json"))
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp
    import numpy as np

    import tritonplug
    from tritonplug.process.state import state

    kernel, x, y, spec = add_operands()

    # The first call's path, on a shape no other call uses (nothing memoised or lowered for it yet), after a call
    # of another shape (so that imports and loading the plugins are not part of it).
    jax.block_until_ready(tritonplug.triton_call(x, y, N, kernel=kernel, out_type=spec, grid=(1,), BLOCK=N))
    m = 3 * N
    xm, ym = jnp.ones(m, jnp.float32), jnp.ones(m, jnp.float32)
    path = first_call_path(lambda: tritonplug.triton_call(
        xm, ym, m, kernel=kernel, out_type=jax.ShapeDtypeStruct((m,), jnp.float32), grid=(3,), BLOCK=N))

    def ours() -> Any:
        return tritonplug.triton_call(x, y, N, kernel=kernel, out_type=spec, grid=(1,), BLOCK=N)

    np.testing.assert_allclose(np.asarray(ours()), np.asarray(x + y), rtol=1e-6)
    entries = list({id(e): e for e in state.memo.entries.values()  # an entry is there under each of its keys
                    if e.call.kernel.kernel is kernel and e.call.out_specs[0].shape == (N,)}.values())
    dispatch = entries[0].dispatch
    fns = {"tritonplug": ours, "dispatch": lambda: dispatch(x, y), "xla": lambda: x + y}
    records = per_call(fns, args.rounds)
    records.append(python_only(ours, entries, args.rounds))
    records += python_in_loop(ours, entries, args.rounds)
    print(format_table(records, ["bench", "impl", "median_us", "min_round_us", "vs_xla", "rounds"]))
    top = profile(ours, 5000, args.top)
    print(format_table(top, ["function", "calls_per_call", "own_us", "cumulative_us"]))
    print({k: v for k, v in path.items() if k != "modules_in_order"})
    print(f"wrote {write_json(args.out, records, profile=top, first_call=path, n=N, backend=jax.default_backend())}")


if __name__ == "__main__":
    main()
