"""The kernel corpus (tests/corpus) as a report: per kernel and calling shape, right / wrong / error.

On a GPU machine with torch (the usual run): every kernel is launched by Triton itself on torch tensors and
by tritonplug on JAX arrays, and tritonplug's buffers are compared with Triton's; with ``--time``, the
median time per launch of each (tritonplug: one jitted call, ``out_type`` shape; Triton: ``kernel[grid]``),
both synchronised, and their ratio. Without torch or a GPU: tritonplug on the CPU against the references.

    python bench/kernel_corpus.py --out bench/results/corpus-gpu.json --time      # GPU machine
    python bench/kernel_corpus.py --out bench/results/corpus-cpu.json             # CPU (corpus libraries installed)
    python bench/kernel_corpus.py -k liger/rms                                    # a subset (substring of the id)
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))  # the corpus package lives in tests/corpus

from _util import write_json  # noqa: E402
from corpus import catalog, driver, torch_driver  # noqa: E402


class _Fallbacks(logging.Handler):
    """The interpret plugin's log lines saying a kernel ran in Triton's interpreter, not on the XLA path."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "Triton's interpreter" in record.getMessage():
            self.lines.append(record.getMessage())


def _gpu_outcome(launch, shape: str) -> tuple[str, str]:
    """right / wrong / error of tritonplug against Triton's own launch of the same kernel."""
    try:
        want = torch_driver.run_triton(launch)
    except Exception as exc:  # Triton itself refuses: tritonplug must refuse the same way
        triton_error = f"{type(exc).__name__}: {driver._first_lines(str(exc), 3)}"
        try:
            driver.run(launch, shape)
        except Exception as ours:
            return "error", f"both refuse; Triton: {triton_error}; tritonplug: {driver._first_lines(str(ours), 3)}"
        return "wrong", f"Triton refuses ({triton_error}) but tritonplug ran"
    try:
        got = driver.run(launch, shape)
    except Exception as exc:
        return "error", f"{type(exc).__name__}: {driver._first_lines(str(exc))}"
    try:
        torch_driver.compare(launch, got, want)
    except AssertionError as exc:
        return "wrong", driver._first_lines(str(exc))
    return "right", ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="JSON file to write (default: bench/results/corpus-<where>.json)")
    parser.add_argument("--time", action="store_true", help="time each kernel against Triton's launcher (GPU)")
    parser.add_argument("-k", default="", help="only the entries whose id contains this")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--shapes", default=",".join(driver.SHAPES), help="calling shapes to run (comma-separated)")
    args = parser.parse_args()
    gpu_reason = torch_driver.unavailable()
    on_gpu = gpu_reason is None
    records, ratios = [], []
    fallbacks = _Fallbacks()
    logging.getLogger("tritonplug.interpret").addHandler(fallbacks)
    for launch in catalog.entries():
        if args.k not in launch.id:
            continue
        reason = catalog.missing(launch)
        if reason:
            records.append({"bench": launch.id, "skipped": reason})
            continue
        record = {"bench": launch.id, "kernel": f"{launch.module}.{launch.kernel}"}
        fallbacks.lines.clear()
        for shape in args.shapes.split(","):
            status, detail = _gpu_outcome(launch, shape) if on_gpu else driver.outcome(launch, shape)
            record[shape] = status
            if detail:
                record[f"{shape}_detail"] = detail
        if launch.triton_error:
            record["triton_refuses"] = f"Triton's own front end refuses this kernel too ({launch.triton_error!r})"
        if fallbacks.lines:
            record["interpreter_fallback"] = sorted(set(fallbacks.lines))
        if on_gpu and args.time and record.get("out_type") == "right":
            try:
                triton_s = torch_driver.time_triton(launch, args.reps)
                ours_s = torch_driver.time_tritonplug(launch, "out_type", args.reps)
                record.update(triton_us=round(triton_s * 1e6, 2), tritonplug_us=round(ours_s * 1e6, 2),
                              ratio=round(ours_s / triton_s, 3))
                ratios.append(ours_s / triton_s)
            except Exception as exc:  # timing is informative; the status above stands
                record["timing_error"] = f"{type(exc).__name__}: {exc}"
        records.append(record)
        print(launch.id, {k: v for k, v in record.items() if k in driver.SHAPES or k == "ratio"}, flush=True)
    counts = {shape: {s: sum(r.get(shape) == s for r in records) for s in ("right", "wrong", "error")}
              for shape in args.shapes.split(",")}
    summary = {"where": "gpu: tritonplug vs Triton's launcher" if on_gpu else f"cpu: vs references ({gpu_reason})",
               "counts": counts, "median_ratio": round(statistics.median(ratios), 3) if ratios else None}
    print(summary)
    out = args.out or ROOT / "bench" / "results" / f"corpus-{'gpu' if on_gpu else 'cpu'}.json"
    write_json(out, records, summary=summary)
    return 1 if any(c["wrong"] for c in counts.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
