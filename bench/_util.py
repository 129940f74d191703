"""Shared by the benchmark scripts: timing, guarded records, the table, the JSON file.

A result is a plain dict record ``{"bench", "impl", "median_us", ...extra}``; a benchmark
that fails or is skipped still leaves a record (``error`` or ``skipped`` holds why), so one
failure never hides the rest of a run.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

Record = dict[str, Any]


def load_example(name: str) -> Any:
    """``examples/<name>.py`` as a module (named ``tritonplug_example_<name>``).

    The examples import ``_common`` as a top-level module when run as scripts, so the
    examples folder goes on ``sys.path`` first.
    """
    import importlib.util

    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    module_name = f"tritonplug_example_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ timing


def median_seconds(fn: Callable[[], Any], reps: int, warmup: int = 1,
                   sync: Callable[[Any], Any] | None = None) -> float:
    """Median wall time of ``fn()`` (each call timed alone; ``sync`` waits for its result)."""
    samples = sample_seconds(fn, reps, warmup, sync)
    return statistics.median(samples)


def sample_seconds(fn: Callable[[], Any], reps: int, warmup: int = 1,
                   sync: Callable[[Any], Any] | None = None) -> list[float]:
    for _ in range(warmup):
        out = fn()
        if sync is not None:
            sync(out)
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        out = fn()
        if sync is not None:
            sync(out)
        samples.append(time.perf_counter() - start)
    return samples


def interleaved_seconds(fns: dict[str, Callable[[], Any]], reps: int, warmup: int = 1,
                        sync: Callable[[Any], Any] | None = None, settle: int = 0) -> dict[str, list[float]]:
    """Like :func:`sample_seconds` for several implementations, alternating call by call so
    that drift (thermal, other load) hits them all alike. ``settle``: untimed calls of the same implementation
    before each timed one, so that the timed call follows its own kind, as in an eager loop, not another
    implementation's program and Python."""
    for _ in range(warmup):
        for fn in fns.values():
            out = fn()
            if sync is not None:
                sync(out)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            for _ in range(settle):
                out = fn()
                if sync is not None:
                    sync(out)
            start = time.perf_counter()
            out = fn()
            if sync is not None:
                sync(out)
            samples[name].append(time.perf_counter() - start)
    return samples


def batched_seconds(call: Callable[[int], Any], calls: int, reps: int, warmup_calls: int,
                    sync: Callable[[Any], Any]) -> list[float]:
    """Per-call time of ``calls`` back-to-back asynchronous calls, synchronised once at the end.

    ``call(i)`` starts the i-th call (it should pick its inputs by ``i`` to rotate buffers)
    and returns something ``sync`` can wait on. Launching without waiting keeps the device
    queue full, so for kernels longer than the host's dispatch cost this is the device time
    per kernel; each of ``reps`` samples is one such batch.
    """
    out = None
    for i in range(warmup_calls):
        out = call(i)
    if warmup_calls:
        sync(out)
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for i in range(calls):
            out = call(i)
        sync(out)
        samples.append((time.perf_counter() - start) / calls)
    return samples


def summarize(samples_s: Sequence[float]) -> dict[str, float]:
    """median / min / max in microseconds, and the number of samples."""
    return {"median_us": statistics.median(samples_s) * 1e6, "min_us": min(samples_s) * 1e6,
            "max_us": max(samples_s) * 1e6, "samples": len(samples_s)}


# ------------------------------------------------------------------ records


class Results:
    """The records of one run, in order. Given ``out``, they are written there (:func:`write_json`, with ``meta``)
    after every record, so a run cut by its time limit (a device call's) keeps what it measured, and by
    :meth:`save`, after a part has added to its records (ratios)."""

    def __init__(self, out: str | os.PathLike | None = None, **meta: Any) -> None:
        self.records: list[Record] = []
        self.out, self.meta = out, meta

    def save(self) -> None:
        if self.out is not None:
            write_json(self.out, self.records, **self.meta)

    def add(self, bench: str, impl: str, **fields: Any) -> Record:
        record = {"bench": bench, "impl": impl, **fields}
        self.records.append(record)
        self.save()
        return record

    def skip(self, bench: str, impl: str, reason: str, **fields: Any) -> Record:
        return self.add(bench, impl, median_us=None, skipped=reason, **fields)

    @contextlib.contextmanager
    def guard(self, bench: str, impl: str, **fields: Any) -> Iterator[None]:
        """Record an ``error`` entry for (bench, impl) instead of letting an exception escape."""
        try:
            yield
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - one failing benchmark must not stop the run
            message = f"{type(exc).__name__}: {exc}".strip()
            print(f"[{bench} / {impl}] failed: {message[:2000]}", file=sys.stderr)
            traceback.print_exc(limit=6, file=sys.stderr)
            self.add(bench, impl, median_us=None, error=message[:4000], **fields)

    def find(self, bench: str, impl: str) -> Record | None:
        for record in self.records:
            if record["bench"] == bench and record["impl"] == impl and record.get("median_us") is not None:
                return record
        return None

    def add_ratios(self, baseline_impl: str, field: str, of: str = "median_us") -> None:
        """``field`` = record[of] / the baseline's record[of], for every record of a bench that has one."""
        for record in self.records:
            base = self.find(record["bench"], baseline_impl)
            if base and record.get(of) is not None and base.get(of):
                record[field] = round(record[of] / base[of], 4)


# ------------------------------------------------------------------ output


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:.1f}"
        if abs(value) >= 1:
            return f"{value:.3f}"
        return f"{value:.4g}"
    return str(value)


def format_table(records: Sequence[Record], columns: Sequence[str]) -> str:
    """A plain-text table of ``columns``; a record's ``error``/``skipped`` is appended as a note."""
    rows = [[_cell(r.get(c)) for c in columns] for r in records]
    notes = []
    for r in records:
        note = (r.get("error") and f"ERROR {r['error']}" or r.get("skipped") and f"skipped: {r['skipped']}"
                or r.get("note"))
        notes.append((note or "").splitlines()[0][:160] if note else "")
    widths = [max([len(c)] + [len(row[i]) for row in rows]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row, note in zip(rows, notes, strict=True):
        cells = "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True))
        lines.append((cells + ("  " + note if note else "")).rstrip())
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    """Versions and settings that explain the numbers."""
    info: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(),
                            "host": platform.node(), "cpus": os.cpu_count(),
                            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    for name in ("jax", "jaxlib", "triton", "numpy", "torch", "jax_triton"):
        module = sys.modules.get(name)
        if module is not None:
            info[name] = getattr(module, "__version__", "?")
    if "jax" in sys.modules:  # only describe devices a run has already initialised
        try:
            info["devices"] = [str(d) for d in sys.modules["jax"].devices()]
        except Exception as exc:  # noqa: BLE001 - informational only
            info["devices"] = f"unavailable: {exc}"
    info["env"] = {k: v for k, v in sorted(os.environ.items())
                   if k.startswith(("TRITONPLUG_", "TRITON_", "XLA_", "JAX_", "CUDA_VISIBLE"))}
    return info


def command_line() -> str:
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])


def write_json(path: str | os.PathLike, records: Sequence[Record], **meta: Any) -> Path:
    """``{"command", "environment", **meta, "records": [...]}`` to ``path`` (folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": command_line(), "environment": environment(), **meta, "records": list(records)}
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return path


# ------------------------------------------------------------------ checking outputs

def max_abs_diff(a: Any, b: Any) -> float:
    import numpy as np

    return float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))


def check(record: dict, got: Any, want: Any, tol: float) -> None:
    """Note in the record whether the output matches the reference."""
    try:
        diff = max_abs_diff(got, want)
    except Exception as exc:  # noqa: BLE001 - a failed comparison must not lose the timing
        record["check"] = f"not compared: {type(exc).__name__}: {exc}"
        return
    record["max_abs_diff"] = diff
    record["check"] = "ok" if diff <= tol else f"MISMATCH (max abs diff {diff:.3g} > {tol})"


def to_numpy(x: Any) -> Any:
    """A host copy of a JAX array or torch tensor (torch bf16 goes through float32)."""
    import numpy as np

    if hasattr(x, "detach"):
        x = x.detach()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.cpu().numpy()
    return np.asarray(x)
