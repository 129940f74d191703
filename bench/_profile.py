"""Where a compiled program's time goes on the device: per kernel, from a ``jax.profiler`` trace.

A benchmark times whole programs; when one is slower than expected, this says which kernels make it so, without
Nsight (the trace is jaxlib's own, read back with ``jax.profiler.ProfileData``). On a GPU the kernels are the
events of the device plane's stream lines (a Triton custom call's kernel by its Triton name, XLA's by its
fusion's); on the CPU, the XLA ops the host's XLA threads ran (so ``--smoke`` checks the path).
"""

from __future__ import annotations

import glob
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable


def kernel_times(fn: Callable[[], object], calls: int) -> list[dict]:
    """Run ``fn()`` (a compiled program on fixed inputs, already warm) ``calls`` times under the profiler:
    ``[{"kernel", "launches", "us"}]`` per call of ``fn``, the slowest kernel first."""
    import jax

    with tempfile.TemporaryDirectory() as where:
        with jax.profiler.trace(where):
            for _ in range(calls):
                jax.block_until_ready(fn())
        return kernels_in(where, calls)


def kernels_in(where: str, calls: int = 1) -> list[dict]:
    """The kernels of the ``jax.profiler`` trace in the folder ``where`` (e.g. ``train.py --profile``'s), as
    :func:`kernel_times` gives them, per one of the ``calls`` the trace holds."""
    from jax.profiler import ProfileData

    (path,) = glob.glob(f"{where}/**/*.xplane.pb", recursive=True)
    data = ProfileData.from_file(path)
    total: dict[str, float] = defaultdict(float)
    launches: dict[str, int] = defaultdict(int)
    for name, ns in _kernel_events(data):
        total[name] += ns
        launches[name] += 1
    rows = [{"kernel": k, "launches": launches[k] / calls, "us": total[k] / calls / 1e3} for k in total]
    return sorted(rows, key=lambda r: -r["us"])


def _kernel_events(data) -> list[tuple[str, float]]:
    """``(name, duration in ns)`` of every kernel: the device planes' stream lines, else the host's XLA threads."""
    device = [line for plane in data.planes if plane.name.startswith("/device:")
              for line in plane.lines if line.name.startswith("Stream")]
    if device:
        return [(e.name, e.duration_ns) for line in device for e in line.events]
    host = [line for plane in data.planes if plane.name == "/host:CPU"
            for line in plane.lines if line.name.startswith("tf_XLA")]
    return [(e.name, e.duration_ns) for line in host for e in line.events
            if not e.name.startswith(("ThreadpoolListener", "ThunkExecutor"))]


def main(argv=None) -> None:
    """``python bench/_profile.py FOLDER [--top N] [--out JSON]``: a trace's kernels by time."""
    import argparse
    import json

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("folder")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out", help="also write every kernel as JSON here")
    args = p.parse_args(argv)
    rows = kernels_in(args.folder)
    print(f"{sum(r['us'] for r in rows):10.0f} us in all, {len(rows)} kernels")
    for r in rows[:args.top]:
        print(f"{r['us']:10.0f} {r['launches']:6.0f}  {r['kernel'][:110]}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": "python bench/_profile.py " + " ".join(argv or sys.argv[1:]), "kernels": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
