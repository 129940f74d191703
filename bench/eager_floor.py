"""How close to XLA's own op can an eager ``triton_call`` get in Python? Side by side, synchronised and back to back:

* ``tritonplug``: ``triton_call`` as shipped (its kernel's runner: the recorded call's guard, its program run);
* ``matcher``: the same repeat call recognised by comparing its arguments with the last call's, one by one, with
  no key built (written for this one call shape: what any signature check could at best cost here);
* ``floor``: a function with ``triton_call``'s calling convention that only runs the memoised program (no check
  at all: the cost of the call's Python frame, its keywords and JAX's C++ dispatch);
* ``dispatch``: the memoised program called directly; ``xla``: ``x + y``.

Between ``tritonplug`` and ``matcher``, what ``triton_call``'s repeat does, one piece less at each rung (each a
function with ``triton_call``'s calling convention): ``looked_up`` (the kernel's runner looked up by its id and
called: ``triton_call``'s repeat without its ``try`` and result check), ``runner`` (the runner, bound beforehand,
called).

Each timed synchronised call follows an untimed call of the same function (``settle``): alternated call by call,
each rung would always follow the same other one, and the rung after XLA's op would carry the cost of switching
from XLA's program to ours, the others not.

Each is the same work (``x + y`` on 1,024 floats, examples/add.py). ``floor`` and ``matcher`` are measurements,
not products: they answer whether the goal (≤ 1.05× XLA synchronised) is reachable by a cheaper check in Python.

Usage: python bench/eager_floor.py [--rounds N] [--out FILE]   (a GPU; on the CPU read the async rows)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _util import format_table, write_json  # noqa: E402
from profile_eager import N, add_operands, per_call  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", default=str(HERE / "results" / "eager-floor.json"))
    args = parser.parse_args()
    import jax
    import numpy as np

    import tritonplug
    from tritonplug.process.state import state

    kernel, x, y, spec = add_operands()
    for _ in range(2):  # the first call binds; the second is found by its key and recorded (``eager.runners``)
        np.testing.assert_allclose(np.asarray(tritonplug.triton_call(x, y, N, kernel=kernel, out_type=spec, grid=(1,),
                                                                     BLOCK=N)), np.asarray(x + y), rtol=1e-6)
    (entry,) = {id(e): e for e in state.memo.entries.values() if e.call.kernel.kernel is kernel}.values()
    dispatch, array_type, aval = entry.dispatch, type(x), x.aval

    def floor(*args: Any, kernel: Any, out_shape: Any = None, out_type: Any = None, **kwargs: Any) -> Any:
        return dispatch(args[0], args[1])[0]

    def matcher(*args: Any, kernel: Any, out_shape: Any = None, out_type: Any = None, **kwargs: Any) -> Any:
        if (out_shape is None and kernel is entry.kernel and out_type is spec and len(args) == 3
                and type(args[0]) is array_type and args[0].aval is aval and type(args[1]) is array_type
                and args[1].aval is aval and type(args[2]) is int and args[2] == N and len(kwargs) == 2
                and kwargs.get("grid") == (1,) and type(kwargs.get("BLOCK")) is int and kwargs["BLOCK"] == N):
            return dispatch(args[0], args[1])[0]
        raise AssertionError("not the call this matcher was written for")

    recent = state.memo.recent
    run = recent[id(kernel)].run

    def runner(*args: Any, kernel: Any, out_shape: Any = None, out_type: Any = None, **kwargs: Any) -> Any:
        return run(kernel, args, kwargs, out_type)

    def looked_up(*args: Any, kernel: Any, out_shape: Any = None, out_type: Any = None, **kwargs: Any) -> Any:
        return recent.get(id(kernel)).run(kernel, args, kwargs, out_type)

    fns = {
        "tritonplug": lambda: tritonplug.triton_call(x, y, N, kernel=kernel, out_type=spec, grid=(1,), BLOCK=N),
        "looked_up": lambda: looked_up(x, y, N, kernel=kernel, out_type=spec, grid=(1,), BLOCK=N),
        "runner": lambda: runner(x, y, N, kernel=kernel, out_type=spec, grid=(1,), BLOCK=N),
        "matcher": lambda: matcher(x, y, N, kernel=kernel, out_type=spec, grid=(1,), BLOCK=N),
        "floor": lambda: floor(x, y, N, kernel=kernel, out_type=spec, grid=(1,), BLOCK=N),
        "dispatch": lambda: dispatch(x, y),
        "xla": lambda: x + y,
    }
    for name, fn in fns.items():
        got = fn()
        np.testing.assert_allclose(np.asarray(got[0] if name == "dispatch" else got), np.asarray(x + y), rtol=1e-6)
    records = per_call(fns, args.rounds, settle=1)
    print(format_table(records, ["bench", "impl", "median_us", "min_round_us", "vs_xla", "rounds"]))
    print(f"wrote {write_json(args.out, records, n=N, backend=jax.default_backend())}")


if __name__ == "__main__":
    main()
