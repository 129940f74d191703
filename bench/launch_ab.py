"""Per-call cost, tritonplug vs jax-triton, side by side in one process, in interleaved rounds.

The same tiny kernel (examples/add.py, 1024 floats, one program) is called

* ``jit``: 1,000 chained calls unrolled in one jitted program (what each launch costs inside XLA's
  executable: jaxlib's kernel call, its payload lookup, the launch);
* ``eager``: one un-jitted call at a time, synchronised after each (the latency a user sees); the
  implementations alternate call by call (``_util.interleaved_seconds``), so a drift of the machine within
  a round reaches them all alike, and each round's value is an implementation's median call;
* ``eager_loop``: as ``eager``, but each timed call follows an untimed call of the same implementation, as in an
  eager loop that repeats one call: in ``eager`` each implementation always follows the same other one (the order
  rotates by whole rounds), whose program and Python ran just before (XLA's ``x + y`` always follows
  jax-triton, tritonplug always follows XLA's op);
* ``eager_async``: 500 back-to-back un-jitted calls, one synchronisation (the host's dispatch rate).

Single runs of such tiny timings drift by tens of percent with the machine's state (clocks, other
load), more than the differences measured here. So each round measures every implementation once,
in an order that rotates from round to round, and the result is the median over rounds of each
implementation and the median of the per-round ratios to jax-triton (with how many rounds each won).

tritonplug is measured with ``out_type=`` (jax-triton 0.4's spelling) and with ``out_shape=`` (0.3's,
which warns as 0.4 does); the installed jax-triton takes ``out_shape=``. ``xla`` (``x + y``) shows
JAX's own floor for an eager op.

A process's ratios also move with the process itself: on one H100 the synchronised ratio of the same code read
1.01× to 1.09× from one process to the next, each with tightly grouped rounds (where the interpreter's and JAX's
objects happen to lie in memory shapes how a call runs right after a wait). ``--processes P`` measures everything
in P fresh processes one after another and reports each implementation's median over them, with every process's
value beside it (``process_vs_xla``, ``each_process`` in the JSON).

Usage: python bench/launch_ab.py [--rounds N] [--processes P] [--out FILE]   (needs a GPU and jax_triton)
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _util import batched_seconds, format_table, interleaved_seconds, load_example, write_json  # noqa: E402

N = 1024
STEPS = 1000
ASYNC_CALLS = 500
EAGER_CALLS = 100
COLUMNS = ["bench", "impl", "median_us", "min_round_us", "max_round_us", "vs_jax_triton", "rounds_won", "vs_xla",
           "rounds"]


def calls(jt: Any) -> dict[str, Callable[[Any, Any], Any]]:
    """The call of each implementation: ``f(x, y) -> x + y`` through the add kernel."""
    import jax

    import tritonplug

    kernel = load_example("add").add_kernel
    spec = jax.ShapeDtypeStruct((N,), "float32")
    impls = {
        "tritonplug": lambda a, b: tritonplug.triton_call(a, b, N, kernel=kernel, out_type=spec, grid=(1,), BLOCK=N),
        "tritonplug_out_shape": lambda a, b: tritonplug.triton_call(a, b, N, kernel=kernel, out_shape=spec,
                                                                    grid=(1,), BLOCK=N),
    }
    if jt is not None:
        impls["jax_triton"] = lambda a, b: jt.triton_call(a, b, N, kernel=kernel, out_shape=spec, grid=(1,), BLOCK=N)
    return impls


def chained(impls: dict[str, Callable], x: Any, y: Any) -> dict[str, Callable]:
    """Each implementation's jitted program of ``STEPS`` chained calls, compiled."""
    import jax

    def chain(call: Callable) -> Callable:
        def run(a: Any, b: Any) -> Any:
            for _ in range(STEPS):
                a = call(a, b)
            return a
        return run

    return {name: jax.jit(chain(call)).trace(x, y).lower().compile() for name, call in impls.items()}


Sampler = Callable[[list[str]], dict[str, float]]


def programs(impls: dict[str, Callable], jitted: dict[str, Callable], x: Any, y: Any) -> dict[str, Sampler]:
    """For each bench, a sampler: given the round's order of implementations, one sample of each (its per-call
    seconds)."""
    import jax

    def jit_sample(fn: Callable) -> float:
        start = time.perf_counter()
        jax.block_until_ready(fn(x, y))
        return (time.perf_counter() - start) / STEPS

    def async_sample(call: Callable) -> float:
        return batched_seconds(lambda i: call(x, y), ASYNC_CALLS, 1, 0, jax.block_until_ready)[0]

    def one_by_one(sample: Callable[[Callable], float], fns: dict[str, Callable]) -> Sampler:
        return lambda order: {name: sample(fns[name]) for name in order}

    def eager_sampler(order: list[str], settle: int = 0) -> dict[str, float]:  # call by call, alternating
        times = interleaved_seconds({name: functools.partial(eager[name], x, y) for name in order}, EAGER_CALLS,
                                    warmup=0, sync=jax.block_until_ready, settle=settle)
        return {name: statistics.median(values) for name, values in times.items()}

    eager = {**impls, "xla": lambda a, b: a + b}
    return {"jit": one_by_one(jit_sample, jitted), "eager": eager_sampler,
            "eager_loop": functools.partial(eager_sampler, settle=1), "eager_async": one_by_one(async_sample, eager)}


def measure(sampler: Sampler, names: list[str], rounds: int) -> dict[str, list[float]]:
    """``rounds`` samples per implementation; round r starts at implementation r (mod count)."""
    sampler(names)  # warm-up: compiles, caches, clocks
    sampler(names)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name, value in sampler(names[r % len(names):] + names[:r % len(names)]).items():
            samples[name].append(value)
    return samples


def records_of(bench: str, samples: dict[str, list[float]]) -> list[dict]:
    base, xla = samples.get("jax_triton"), samples.get("xla")
    out = []
    for name, values in samples.items():
        record = {"bench": bench, "impl": name, "median_us": statistics.median(values) * 1e6,
                  "min_round_us": min(values) * 1e6, "max_round_us": max(values) * 1e6, "rounds": len(values),
                  "round_us": [round(v * 1e6, 3) for v in values]}
        if base is not None:
            ratios = [v / b for v, b in zip(values, base, strict=True)]
            record["vs_jax_triton"] = round(statistics.median(ratios), 4)
            record["rounds_won"] = sum(v < b for v, b in zip(values, base, strict=True))
        if xla is not None:  # JAX's own op of the same work: the eager goal's measure
            record["vs_xla"] = round(statistics.median([v / b for v, b in zip(values, xla, strict=True)]), 4)
        out.append(record)
    return out


def measure_all(rounds: int) -> list[dict]:
    """Every bench's records, measured in this process."""
    import jax
    import numpy as np

    sys.path.insert(0, str(HERE))
    from gpu import import_jax_triton

    jt, why = import_jax_triton()
    if jt is None:
        print(f"jax_triton unavailable ({why}): measuring tritonplug alone", file=sys.stderr)
    x = jax.device_put(np.random.default_rng(0).standard_normal(N, dtype=np.float32))
    y = jax.device_put(np.random.default_rng(1).standard_normal(N, dtype=np.float32))
    impls = calls(jt)
    jitted = chained(impls, x, y)
    want = np.asarray(x) + STEPS * np.asarray(y)
    for name, fn in jitted.items():  # every implementation computes the same thing
        got = np.asarray(fn(x, y))
        if not np.allclose(got, want, rtol=1e-4, atol=1e-2):
            raise SystemExit(f"{name}: wrong result, max abs diff {np.abs(got - want).max()}")
    records = []
    names = {"jit": list(jitted), "eager": [*impls, "xla"], "eager_loop": [*impls, "xla"],
             "eager_async": [*impls, "xla"]}
    for bench, sampler in programs(impls, jitted, x, y).items():
        records += records_of(bench, measure(sampler, names[bench], rounds))
    return records


def in_processes(processes: int, rounds: int) -> tuple[list[dict], list[list[dict]]]:
    """The benches measured in ``processes`` fresh processes one after another, and their records combined: for
    each implementation the median over processes of its median and of each ratio, the extremes of its rounds,
    the rounds counted together; each process's own records beside them."""
    each = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(processes):
            out = Path(tmp) / f"process-{i}.json"
            subprocess.run([sys.executable, __file__, "--rounds", str(rounds), "--out", str(out)], check=True,
                           stdout=subprocess.DEVNULL)
            each.append(json.loads(out.read_text())["records"])
    combined = []
    for first in each[0]:
        same = [next(r for r in records if (r["bench"], r["impl"]) == (first["bench"], first["impl"]))
                for records in each]
        record = {"bench": first["bench"], "impl": first["impl"],
                  "median_us": statistics.median(r["median_us"] for r in same),
                  "min_round_us": min(r["min_round_us"] for r in same),
                  "max_round_us": max(r["max_round_us"] for r in same),
                  "rounds": sum(r["rounds"] for r in same),
                  "process_median_us": [round(r["median_us"], 3) for r in same]}
        for ratio in ("vs_jax_triton", "vs_xla"):
            if ratio in first:
                record[ratio] = round(statistics.median(r[ratio] for r in same), 4)
                record[f"process_{ratio}"] = [r[ratio] for r in same]
        if "rounds_won" in first:
            record["rounds_won"] = sum(r["rounds_won"] for r in same)
        combined.append(record)
    return combined, each


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds per process")
    parser.add_argument("--processes", type=int, default=1,
                        help="fresh processes measured one after another (see the module's docstring)")
    parser.add_argument("--out", default=str(HERE / "results" / "launch-ab.json"))
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)  # out_shape= warns once per line; keep the table clean
    meta: dict[str, Any] = {"rounds": args.rounds, "steps": STEPS, "n": N}
    if args.processes > 1:
        records, each = in_processes(args.processes, args.rounds)
        meta.update(processes=args.processes, each_process=each)
        print(format_table(records, COLUMNS))
        for r in records:
            if r["impl"] == "tritonplug" and "process_vs_xla" in r:
                print(f"vs_xla per process, {r['bench']}: {r['process_vs_xla']}")
    else:
        records = measure_all(args.rounds)
        print(format_table(records, COLUMNS))
    print(f"wrote {write_json(args.out, records, **meta)}")


if __name__ == "__main__":
    main()
