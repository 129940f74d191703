"""docs/benchmarks.md's kernel, compile, startup, suite and port figures, from their recorded runs.

Each ``*_RUNS`` list is every recorded run of one configuration (one version of the code, one machine kind); a
figure is the median over the runs whose records passed their checks, with the range where there are several.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from _report import RESULTS, Record, cell, excluded, failure, find, load, median, records, runs, span, table

H200_RUNS = ["h200.json"]  #: bench/gpu.py's kernel, launch and compile groups (h200-kernels + h200-compile merged)
HOPPER_RUNS = ["h200-hopper-launch.json"]
COMPILE_RUNS = ["h200-compile-16workers.json"]  #: bench/compile.py on the 16-core H200 machine
CPU_RUNS = ["interpret-cpu.json"]
SUITE_RUNS = ["jax-triton-suite-h200", "jax-triton-suite-h100", "h100-binding", "h100-final/jts"]
PORT_RUNS = ["h100-final/ports-h100.json", "h100-final/ports-cross-entropy-h100.json",
             "h100-subpackages/ports-rope-h100.json"]

KERNELS = [("add 2^28 fp32 (µs, GB/s)", "add", "gbps"), ("matmul fp16 4096³ (µs, TFLOP/s)", "matmul_fp16", "tflops"),
           ("matmul bf16 4096³ (µs, TFLOP/s)", "matmul_bf16", "tflops")]
KERNELS += [(f"softmax 4096×{n} fp32 (µs, GB/s)", f"softmax_4096x{n}", "gbps") for n in (4096, 8192, 16384, 32768)]
KERNELS += [("fused attention (4,16,4096,64) fp16 (µs, TFLOP/s)", "fused_attention", "tflops"),
            ("fused attention causal (µs, TFLOP/s)", "fused_attention_causal", "tflops"),
            ("launch overhead, unrolled (µs per call)", "launch_overhead_unrolled", None),
            ("launch overhead, fori_loop (µs per call)", "launch_overhead_fori_loop", None),
            ("eager dispatch (µs per call, synchronised)", "eager_dispatch", None)]


class Figures:
    """The records of one bench over a set of runs: each run counts only where every named record passed."""

    def __init__(self, paths: Sequence[str], bench: str, impls: Sequence[str]):
        self.by_run: list[dict[str, Record]] = []
        self.failed: list[tuple[str, str]] = []
        for path in paths:
            recs = records(path)
            if find(recs, bench=bench) is None:
                continue
            found = {impl: find(recs, bench=bench, impl=impl) for impl in impls}
            why = next((f"{bench} {impl}: {w}" for impl, r in found.items() if r is not None
                        and not r.get("skipped") and (w := failure(r))), None)
            (self.failed.append((path, why)) if why else self.by_run.append(found))

    def values(self, impl: str, field: str | Callable[[Record], float] = "median_us") -> list[float]:
        get = field if callable(field) else (lambda r: r[field])
        return [get(run[impl]) for run in self.by_run if run.get(impl) and run[impl].get("median_us") is not None]


def _h200(bench: str) -> Figures:
    return Figures(H200_RUNS, bench, ["tritonplug", "triton_native", "jax_triton", "xla"])


def ratios_to(f: Figures, other: str, ours: str = "tritonplug") -> list[float]:
    """Each run's ``ours / other`` of the medians (the recorded ``ratio_vs_triton_native`` is rounded)."""
    return [run[ours]["median_us"] / run[other]["median_us"] for run in f.by_run]


def h200_kernels() -> str:
    rows, failed = [], []
    for label, bench, rate in KERNELS:
        f = _h200(bench)
        failed += f.failed
        cells = [cell(f.values(i)) + (f" ({median(f.values(i, rate)):.0f})" if rate and f.values(i) else "")
                 for i in ("tritonplug", "triton_native", "jax_triton", "xla")]
        rows.append([label, *cells, *(cell(ratios_to(f, o), "{:.3f}") for o in ("triton_native", "jax_triton"))])
    copy = Figures(H200_RUNS, "copy", ["torch", "xla"])
    caption = (f"{runs(len(H200_RUNS))} ({', '.join(f'`bench/results/{p}`' for p in H200_RUNS)}). Measured copy "
               f"bandwidth: {cell(copy.values('torch', 'gbps'), '{:.0f}')} GB/s (torch `copy_`), "
               f"{cell(copy.values('xla', 'gbps'), '{:.0f}')} GB/s (`jnp.copy`).{excluded(failed + copy.failed)}")
    return caption + "\n\n" + table(["bench", "tritonplug", "triton_native", "jax_triton", "xla",
                                     "tritonplug / triton_native", "tritonplug / jax_triton"], rows)


def h200_compile() -> str:
    rows = []
    for label, bench, impl in (("tritonplug cold ({w} workers)", "compile_cold", "tritonplug"),
                               ("tritonplug warm (same cache)", "compile_warm", "tritonplug"),
                               ("tritonplug cold, 1 worker", "compile_workers_1", "tritonplug"),
                               ("tritonplug cold, 16 workers", "compile_workers_16", "tritonplug"),
                               ("jax_triton cold (serial, in-process)", "compile_cold", "jax_triton"),
                               ("Triton cold (`warmup`, serial)", "compile_cold", "triton_native")):
        f = Figures(H200_RUNS, bench, [impl])
        found = [run[impl] for run in f.by_run]
        stats = [r["compile_stats"] for r in found if "compile_stats" in r]
        done = (f"{median([s['compiled'] for s in stats]):.0f} / {median([s['disk_hits'] for s in stats]):.0f}"
                if stats else "— / —")
        workers = f"{median([r['workers'] for r in found]):.0f}" if found and "workers" in found[0] else "?"
        rows.append([label.format(w=workers), cell([r.get("lower_s", r.get("compile_s")) for r in found], "{:.2f}"),
                     done])
    ptx = []
    for label, bench in (("add 2^28", "ptx_vs_cubin_add"), ("matmul fp16 4096³ (autotuned)",
                                                            "ptx_vs_cubin_matmul_fp16")):
        f = Figures(H200_RUNS, bench, ["tritonplug_ptx", "tritonplug_cubin"])
        ptx.append([label] + [cell(f.values(i, "first_call_ms")) for i in ("tritonplug_ptx", "tritonplug_cubin")]
                   + [cell(f.values(i)) for i in ("tritonplug_ptx", "tritonplug_cubin")])
    verdicts = [find(records(p), bench="ptx_vs_cubin_probe")["verdict"] for p in H200_RUNS]
    return "\n\n".join([
        table(["compile (8-config fp16 matmul, new process)", "lowering seconds", "compiled / disk hits"], rows),
        table(["PTX vs cubin", "first call ms (PTX)", "first call ms (cubin)", "steady µs (PTX)", "steady µs (cubin)"],
              ptx),
        "Probe verdict: " + "; ".join(sorted(set(verdicts))) + f" ({runs(len(verdicts))})."])


def hopper() -> str:
    rows, failed = [], []
    for label, bench, rate in (("matmul fp16 4096³, pointer loads (128×256×64, 8 warps, 3 stages)",
                                "matmul_pointer_fp16", " TFLOP/s"),
                               ("matmul fp16 4096³, TMA descriptor loads (same tile)", "matmul_tma_fp16", " TFLOP/s"),
                               ("layer norm 4096×8192 fp16, `eps=1e-5` as a Python float (now fp32)",
                                "layer_norm_4096x8192", None)):
        f = Figures(HOPPER_RUNS, bench, ["tritonplug", "triton_native"])
        failed += f.failed
        ours = cell(f.values("tritonplug"), unit=" µs")
        if rate:
            ours += f" ({median(f.values('tritonplug', 'tflops')):.0f}{rate})"
        rows.append([label, ours, cell(f.values("triton_native"), unit=" µs"),
                     cell(ratios_to(f, "triton_native"), "{:.3f}")])
    caption = f"{runs(len(HOPPER_RUNS))} (`bench/results/{HOPPER_RUNS[0]}`).{excluded(failed)}"
    return caption + "\n\n" + table(["bench", "tritonplug", "Triton's launcher (torch)", "ratio"], rows)


def compile_workers() -> str:
    """bench/compile.py's four measurements against their goals."""
    data = [load(p) for p in COMPILE_RUNS]

    def of(get: Callable[[dict], float], fmt: str = "{:.0f}", scale: float = 1.0) -> str:
        return cell([get(d) * scale for d in data], fmt)

    def met(key: str) -> str:
        verdicts = [d[key]["met"] for d in data]
        return "met" if all(verdicts) else "not met" if not any(verdicts) else f"met in {sum(verdicts)} of {len(data)}"

    b, c, d, a = "b_parallel_configs", "c_new_process", "d_cold_compile", "a_worker_overhead"
    rows = [
        ["(b) 8-configuration GEMM lowering, 1 warm worker vs 16",
         f"{of(lambda x: x[b]['one_worker']['median_s'], scale=1e3)} ms vs "
         f"{of(lambda x: x[b]['all_workers']['median_s'], scale=1e3)} ms: {of(lambda x: x[b]['speedup'], '{:.2f}')}×",
         f"≥ 0.75 × min(8, cores) = 6× ({met(b)})"],
        ["(b) the most 16 workers can gain, sum / max(slowest, sum / workers) of the configurations' own compile times",
         f"{of(lambda x: x[b]['ideal_speedup'], '{:.2f}')}× (slowest "
         f"{of(lambda x: x[b]['slowest_config_s'], scale=1e3)} ms of "
         f"{of(lambda x: sum(x[b]['config_compile_s'].values()), '{:.2f}')} s); reached "
         f"{of(lambda x: x[b]['efficiency'], scale=100)} % of it", "—"],
        ["(d) a new process's cold lowering vs (slowest configuration + a new process's pool start)",
         f"{of(lambda x: x[d]['cold_lower_s'], scale=1e3)} ms vs {of(lambda x: x[d]['slowest_config_s'], scale=1e3)} + "
         f"{of(lambda x: x[d]['pool_start']['median_s'], scale=1e3)} ms: {of(lambda x: x[d]['ratio'], '{:.2f}')}×",
         f"≤ 1.3× ({met(d)})"],
        ["(c) a new process with a warm cache vs a cold one",
         f"{of(lambda x: x[c]['warm']['lower']['median_s'], scale=1e3)} ms vs "
         f"{of(lambda x: x[c]['cold']['lower']['median_s'], scale=1e3)} ms: "
         f"{of(lambda x: x[c]['lowering_speedup'], '{:.1f}')}×, "
         f"{of(lambda x: max(x[c]['warm']['compiled']))} compiles", f"≥ 10× ({met(c)})"],
        ["(a) one configuration through a warm worker vs in this process",
         f"{of(lambda x: x[a]['warm_pool']['median_s'], scale=1e3)} vs "
         f"{of(lambda x: x[a]['in_process']['median_s'], scale=1e3)} ms: {of(lambda x: x[a]['ratio'], '{:.2f}')}×",
         f"≤ 1.10× ({met(a)})"]]
    caption = f"{runs(len(data))} ({', '.join(f'`bench/results/{p}`' for p in COMPILE_RUNS)}):"
    return caption + "\n\n" + table(["measurement", "result", "goal"], rows)


def compile_speeds() -> tuple[float, float]:
    """The 8-configuration lowering's seconds with all (16) warm workers and with one, medians over the runs."""
    data = [load(p)["b_parallel_configs"] for p in COMPILE_RUNS]
    return median([d["all_workers"]["median_s"] for d in data]), median([d["one_worker"]["median_s"] for d in data])


def startup(workload: str) -> str:
    """The startup table; for the GPU, the fully warm program against its goal and what no cache touches."""
    data = load(f"startup-{workload}.json")
    names = {"cold": "cold", "warm cache": "warm tritonplug cache", "+ jax cache": "+ JAX persistent cache",
             "+ tuning record": "+ tuning record"}
    fields = [("first_result_s", "{:.2f}"), ("program_s", "{:.3f}"), ("triton_compiles", "{}"), ("disk_hits", "{}"),
              ("tuned_hits", "{}"), ("runtime_autotuned", "{}"), ("xla_compiles", "{}"), ("jax_cache_hits", "{}"),
              ("program_speedup", "{:.1f}")]
    rows = [[names[r["scenario"]]] + [fmt.format(r[k]) for k, fmt in fields] for r in data["records"]]
    text = (f"1 run (`bench/results/startup-{workload}.json`; each row the median of its {data['reps']} processes):"
            "\n\n" + table(["scenario", "first result s", "program s", "Triton compiles", "disk hits", "tuned hits",
                            "runtime autotuned", "XLA compiles", "JAX cache hits", "program speedup"], rows))
    if workload != "gpu":
        return text
    by = {r["scenario"]: r for r in data["records"]}
    cold, warm = by["cold"], by["+ tuning record"]
    return text + (
        f"\n\nFully warm, the jitted program (trace, lower, load, run) is {warm['program_speedup']:.1f}× faster than "
        f"cold: goal (≥ 20×) {'met' if warm['program_speedup'] >= 20 else 'not met'}. Time to first result improves "
        f"{cold['first_result_s'] / warm['first_result_s']:.1f}×: {warm['first_result_s'] - warm['program_s']:.1f} s "
        f"of the fully warm process is Python, JAX, Triton and the CUDA client starting, and copying the inputs, which "
        f"no cache touches (the cold program itself is {cold['program_s']:.2f} s of the "
        f"{cold['first_result_s']:.2f} s).")


def warm_start() -> tuple[float, float]:
    """The GPU startup's jitted program: cold, and with every cache and a tuning record (seconds)."""
    by = {r["scenario"]: r for r in records("startup-gpu.json")}
    return by["cold"]["program_s"], by["+ tuning record"]["program_s"]


def cpu_xla() -> str:
    rows = []
    cases = [("add 2^18", "add-2^18"), ("add 2^20", "add-2^20"), ("softmax 256×1024", "softmax-256x1024"),
             ("matmul 128³", "matmul-128x128x128"), ("matmul 256³", "matmul-256x256x256")]
    for label, bench in cases:
        f = Figures(CPU_RUNS, bench, ["xla", "interpret", "direct", "jnp"])
        ms = [cell(f.values(i, "median_ms"), "{:.2f}" if i in ("xla", "jnp") else "{:.0f}", " ms")
              for i in ("xla", "interpret", "direct", "jnp")]
        xla_ms, jnp_ms = (cell(f.values(i, "paired_median_ms"), "{:.2f}") for i in ("xla", "jnp"))
        paired = f"{cell(f.values('xla', 'vs_jnp_paired'), '{:.2f}')} ({xla_ms}, {jnp_ms} ms)"
        rows.append([label, *ms, cell(f.values("xla", "speedup"), "{:.0f}", "× faster"),
                     cell(f.values("xla", "vs_jnp"), "{:.2f}"), paired])
    return f"{runs(len(CPU_RUNS))} (`bench/results/{CPU_RUNS[0]}`):\n\n" + table(
        ["case", "xla", "interpret path", "Triton's interpreter", "jnp", "xla vs Triton's interpreter",
         "xla / jnp, interleaved", "xla / jnp, paired (xla, jnp)"], rows)


def cpu_speedups() -> tuple[list[float], list[float]]:
    """Per case: the XLA path's speedup over Triton's interpreter, and its paired ratio to ``jnp`` (medians)."""
    xla = [r for p in CPU_RUNS for r in records(p) if r["impl"] == "xla"]
    benches = sorted({r["bench"] for r in xla})
    return ([median([r["speedup"] for r in xla if r["bench"] == b]) for b in benches],
            [median([r["vs_jnp_paired"] for r in xla if r["bench"] == b]) for b in benches])


def jax_triton_suite() -> str:
    counts = [load(f"{run}/jax_triton_suite.json")["counts"] for run in SUITE_RUNS]
    reasons: dict[str, list[int]] = {}
    for run in SUITE_RUNS:
        for n, why in re.findall(r"SKIPPED \[(\d+)\] [^:]+:\d+: (.*)", (RESULTS / run / "jax_triton_suite.log")
                                 .read_text(encoding="utf-8")):
            reasons.setdefault(why, []).append(int(n))
    skips = "; ".join(f"{span(v, '{}')} {why}" for why, v in sorted(reasons.items(), key=lambda kv: -kv[1][0]))
    return (f"Every recorded GPU run ({', '.join(f'`bench/results/{r}/`' for r in SUITE_RUNS)}): "
            f"**{span([c.get('passed', 0) for c in counts], '{}')} passed, "
            f"{span([c.get('failed', 0) for c in counts], '{}')} failed** in each, "
            f"{span([c.get('skipped', 0) for c in counts], '{}')} skipped by the tests themselves ({skips}), "
            f"{span([c.get('deselected', 0) for c in counts], '{}')} deselected as excluded in "
            f"`bench/jax_triton_suite/run.py`.")


def suite_passed() -> tuple[int, int, int]:
    """(runs, passed in the fewest, failed in the most) of the GPU runs of jax-triton's suite."""
    counts = [load(f"{run}/jax_triton_suite.json")["counts"] for run in SUITE_RUNS]
    return len(counts), min(c.get("passed", 0) for c in counts), max(c.get("failed", 0) for c in counts)


#: (label, bench, the implementation to read: donated where the op writes its operands in place, but for RMSNorm's
#: backward, whose dX is a fresh output, so that donating its inputs only adds a copy)
PORTS = [("RMSNorm fwd", "rms_norm.fwd", "tritonplug"), ("RMSNorm bwd", "rms_norm.bwd", "tritonplug"),
         ("SwiGLU fwd", "swiglu.fwd", "tritonplug"), ("SwiGLU bwd (in place)", "swiglu.bwd", "tritonplug_donated"),
         ("cross entropy fwd (gradient in place; the launcher syncs the host)", "cross_entropy.fwd",
          "tritonplug_donated"),
         ("cross entropy bwd", "cross_entropy.bwd", "tritonplug_donated"),
         ("RoPE fwd (in place)", "rope.fwd", "tritonplug_donated"),
         ("RoPE bwd (in place)", "rope.bwd", "tritonplug_donated"),
         ("FLA fused_recurrent fwd", "fla_fused_recurrent.fwd", "tritonplug")]
PORT_GOAL = 1.05


def ports() -> str:
    rows, failed, within, above, undonated = [], [], [], [], []
    for label, bench, read in PORTS:
        f = Figures(PORT_RUNS, bench, ["tritonplug", "tritonplug_donated", "torch"])
        failed += f.failed
        row = [label]
        for impl in ("tritonplug", "tritonplug_donated"):
            us = f.values(impl)
            row.append(f"{cell(us, unit=' µs')}, {cell(ratios_to(f, 'torch', impl), '{:.3f}', '×')}" if us else "—")
        rows.append(row + [cell(f.values("torch"), unit=" µs"), str(len(f.by_run))])
        name = label.split(" (")[0]
        ratio = ratios_to(f, "torch", read)
        (within if median(ratio) <= PORT_GOAL else above).append(f"{name} {cell(ratio, '{:.3f}', '×')}")
        if label.endswith("(in place)"):
            undonated.append((name, median(ratios_to(f, "torch"))))
    caption = (f"Every recorded run ({', '.join(f'`bench/results/{p}`' for p in PORT_RUNS)}): the median of the "
               f"runs' medians, their range in brackets, and the ratio to the library's launcher.{excluded(failed)}")
    verdict = (f"Reading the donated column where the op writes its operands in place (but for RMSNorm's backward, "
               f"whose `dX` is a fresh output, so that donating its inputs only adds a copy), the median is within "
               f"{PORT_GOAL:.2f}× of the library's launcher for {', '.join(within)}; above it for "
               f"{', '.join(above) or 'none'}. Without donation an op that updates a buffer in place pays for XLA's "
               f"copy of it ({', '.join(n for n, _ in undonated)}: {span([v for _, v in undonated], '{:.2f}')}×), as "
               f"`bench/binding_order.py` shows for `x += 1`.")
    return "\n\n".join([caption, table(["op", "tritonplug", "tritonplug, donated", "library launcher", "runs"], rows),
                        verdict])
