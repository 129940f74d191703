"""docs/partitioned.md's figures: the sharding suite's and the ports' GPU runs, weak scaling, the multi-process run.

Each block lists every recorded run of its measurement (the ``bench/results/partitioned-*`` folders; their READMEs
say what each was), with failed tests counted beside the run's other figures.
"""

from __future__ import annotations

import json
import re

from _report import RESULTS, cell, load, pytest_counts, pytest_failures, runs, span, table

SUITE_RUNS = ["partitioned-h100x2", "partitioned-h100x4", "partitioned-h100x4-after-review",
              "partitioned-h100x4-keywords-fix", "partitioned-h100x4-runners"]
SCALING_4 = ["partitioned-h100x4/partitioned-scaling.json"]
XLA_COMPARISON = "partitioned-h100x4/xla-comparison.txt"
PORTS_SCALING = ["partitioned-h200x2-ports/ports-scaling.json"]
#: every GPU run of tests/test_partitioned_ports.py (GPUs)
PORT_TESTS = [("partitioned-h200x2-ports/ports-pytest.txt", "2 × H200"),
              ("partitioned-h100x4-after-review/ports-pytest.txt", "4 × H100"),
              ("partitioned-h100x4-keywords-fix/ports-pytest-before-test-fix.txt", "4 × H100"),
              ("partitioned-h100x4-keywords-fix/ports-pytest.txt", "4 × H100")]
MULTIPROCESS = ["partitioned-h100x2/multiprocess.json", "partitioned-h100x4/multiprocess.json"]
CASES = [("elementwise add 8192×4096 bf16", "add_rows 8192x4096 bf16 /dev"),
         ("RMSNorm fwd + bwd (`jax.grad` through `custom_vjp`, dW all-reduced)",
          "rms_norm fwd+bwd (custom_vjp grad) /dev"),
         ("RoPE 4×32×2048×128 f32", "rope 4x32x2048x128 f32 /dev"),
         ("attention 2×16×2048×64 fp16, heads split", "attention 2x16x2048x64 fp16 (heads split) /dev"),
         ("RMSNorm fwd 8192×4096 bf16", "rms_norm fwd 8192x4096 bf16 /dev")]


def _suite(path: str) -> tuple[int, int, int] | None:
    """(devices, cases, cases right: equal to ``jnp`` and to one device) of a ``tests/sharding_suite.py`` report."""
    file = RESULTS / path
    if not file.exists():
        return None
    line = [x for x in file.read_text(encoding="utf-8").splitlines() if x.startswith("REPORT ")][-1]
    report = json.loads(line[len("REPORT "):])
    cases = [v for v in report.values() if isinstance(v, dict) and "correct" in v]
    return report["devices"], len(cases), sum(bool(v["correct"] and v["same_as_one_device"]) for v in cases)


def suite() -> str:
    rows = []
    for run in SUITE_RUNS:
        found = {mode: _suite(f"{run}/suite-{mode}.txt") for mode in ("shardy", "gspmd", "explicit")}
        devices = next(f[0] for f in found.values() if f)
        rows.append([f"`{run}/`", str(devices)] + [f"{f[2]} of {f[1]}" if f else "—" for f in found.values()])
    return ("The suite (`tests/sharding_suite.py`), every recorded GPU run, cases right (equal to the same function "
            "on one GPU and to a `jnp` reference):\n\n"
            + table(["run (`bench/results/`)", "GPUs", "Shardy", "GSPMD", "explicit axes"], rows))


def _rows(path: str) -> dict[str, dict]:
    return {r["case"]: r for r in load(path)["rows"]}


def scaling() -> str:
    data = [_rows(p) for p in SCALING_4]
    rows, wrong = [], []
    for label, case in CASES:
        found = [d[case] for d in data if d[case].get("matches_one_device")]
        wrong += [f"{label} in `{p}`" for p, d in zip(SCALING_4, data, strict=True)
                  if not d[case]["matches_one_device"]]
        rows.append([label, cell([r["pipelined_one_device_us"] for r in found]),
                     cell([r["pipelined_4_devices_us"] for r in found]), cell([r["pipelined_ratio"] for r in found],
                                                                              "{:.3f}")])
    one_call = [r["ratio"] for d in data for r in d.values()]
    note = f" Not counted (differs from one device): {'; '.join(wrong)}." if wrong else ""
    return (f"Weak scaling (`bench/partitioned_scaling.py`, {runs(len(SCALING_4))}: "
            f"{', '.join(f'`bench/results/{p}`' for p in SCALING_4)}; per-device work fixed; median per call of 20 "
            f"calls in a row, 4 GPUs / 1 GPU; every case's result equal to one device's).{note}\n\n"
            + table(["case per device", "1 GPU µs", "4 GPUs µs", "ratio"], rows)
            + f"\n\nOne call waited for each time (host dispatch included) gives {span(one_call, '{:.2f}')} "
              f"(`ratio` in the JSON).")


def xla_comparison() -> str:
    """``bench/partitioned_vs_xla.py``'s lines: RMSNorm on 1 and 4 GPUs, ours and XLA's."""
    found = {}
    for line in (RESULTS / XLA_COMPARISON).read_text(encoding="utf-8").splitlines():
        m = re.match(r"(tritonplug|jnp) rms_norm.*rows/dev\s+(\d+): 1 dev\s+([\d.]+) us\s+4 dev\s+([\d.]+) us\s+ratio "
                     r"([\d.]+)", line)
        if m:
            found[m.group(1), int(m.group(2))] = (float(m.group(3)), float(m.group(4)), float(m.group(5)))
    small, large = sorted({rows for _, rows in found})
    xs, ts = found["jnp", small], found["tritonplug", small]
    return (f"`bench/partitioned_vs_xla.py` (1 run, `bench/results/{XLA_COMPARISON}`), 1 → 4 GPUs: {small} rows per "
            f"device, XLA {xs[0]} → {xs[1]} µs (ratio {xs[2]:.2f}), tritonplug {ts[0]} → {ts[1]} µs ({ts[2]:.2f}); "
            f"{large} rows per device, XLA {found['jnp', large][2]:.2f}, tritonplug "
            f"{found['tritonplug', large][2]:.2f}.")


def ports() -> str:
    data = [_rows(p) for p in PORTS_SCALING]
    names = [("Liger SwiGLU", "Liger SwiGLU"), ("cross entropy", "Liger cross entropy"), ("RoPE", "Liger RoPE"),
             ("FLA", "FLA fused_recurrent"), ("Liger RMSNorm fwd+bwd", "Liger RMSNorm")]
    ratios = []
    for label, prefix in names:
        found = [r for d in data for case, r in d.items() if case.startswith(prefix) and r["matches_one_device"]]
        ratios.append(f"{label} {cell([r['pipelined_ratio'] for r in found], '{:.3f}')}")
    rows = []
    for path, gpus in PORT_TESTS:
        counts, failures = pytest_counts(path), pytest_failures(path)
        # the file holds test_every_case_ran and two tests parametrised over the same CASES: 1 + 2 × cases tests
        cases = (counts.get("passed", 0) + counts.get("failed", 0) - 1) // 2
        by_test = "; ".join(f"`{name}`: {n} of {cases}" for name, n in sorted(failures.items())) or "—"
        rows.append([f"`{path}`", gpus, str(counts.get("passed", 0)), str(counts.get("failed", 0)), by_test])
    return (f"Pipelined 2-GPU / 1-GPU ratios of the ports on 2 × H200 ({runs(len(PORTS_SCALING))}, "
            f"{', '.join(f'`bench/results/{p}`' for p in PORTS_SCALING)}; every result equal to one GPU's): "
            f"{', '.join(ratios)}. The ports' tests (`SHARDING_TESTS_ON_GPUS=1 pytest "
            f"tests/test_partitioned_ports.py`), every recorded GPU run:\n\n"
            + table(["run (`bench/results/`)", "GPUs", "passed", "failed", "failed cases, by test"], rows))


def multiprocess() -> str:
    parts = []
    for path in MULTIPROCESS:
        reports = load(path)["reports"]
        right = all(v for r in reports for k, v in r.items() if k.endswith("_ok"))
        compiled = sorted(r["compile_stats"]["compiled"] for r in reports)
        fetched = sorted(r["compile_stats"]["remote_hits"] for r in reports)
        gpus = max(len(r["devices"]) if r.get("devices") else 1 for r in reports)
        parts.append(f"{len(reports)} processes × {gpus} GPU{'s' if gpus > 1 else ''} (`bench/results/{path}`): "
                     f"every check {'right' if right else 'NOT right'}, kernels compiled per process "
                     f"{', '.join(map(str, compiled))}, fetched from the coordination service "
                     f"{', '.join(map(str, fetched))}")
    return "Measured on H100s, every recorded run: " + "; ".join(parts) + "."
