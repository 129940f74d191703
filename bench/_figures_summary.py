"""The summaries that quote the other blocks' figures: README.md's Performance paragraph, docs/benchmarks.md's
"In short". Each figure is taken from the same runs, by the same functions, as the table it summarises."""

from __future__ import annotations

import re

from _figures_eager import H200_LAUNCH_AB
from _figures_kernels import (
    COMPILE_RUNS,
    H200_RUNS,
    HOPPER_RUNS,
    Figures,
    compile_speeds,
    cpu_speedups,
    ratios_to,
    suite_passed,
    warm_start,
)
from _figures_model import readme_model
from _report import RESULTS, cell, find, load, median, records, runs, span

NCU_ADD = "h200-ncu-add.txt"


def _vs_triton(bench: str, runs_: list[str] = H200_RUNS) -> list[float]:
    return ratios_to(Figures(runs_, bench, ["tritonplug", "triton_native", "jax_triton"]), "triton_native")


def _ncu_add() -> float:
    """The add kernel's own time, tritonplug's launch over Triton's, as Nsight Compute measured it."""
    text = (RESULTS / NCU_ADD).read_text(encoding="utf-8")
    return float(re.search(r"-> ratio (\d+\.\d+)", text).group(1))


def _kernel_spans() -> tuple[str, str]:
    """Matmul and attention's ratios to Triton's own launch, and add's and softmax's."""
    close = [v for b in ("matmul_fp16", "matmul_bf16", "fused_attention", "fused_attention_causal")
             for v in _vs_triton(b)]
    far = [v for b in ("add", *(f"softmax_4096x{n}" for n in (4096, 8192, 16384, 32768))) for v in _vs_triton(b)]
    return span(close), span(far)


def _cpu() -> str:
    speedups, paired = cpu_speedups()
    return (f"kernels compiled by XLA run {span(speedups, '{:.0f}')}× faster than Triton's interpreter, at most "
            f"{max(paired):.2f}× `jnp`'s time")


def readme_performance() -> str:
    close, far = _kernel_spans()
    cold, warm = warm_start()
    return (f"On an H200 (one run each, [benchmarks](docs/benchmarks.md)), kernels take {close}× the time of "
            f"Triton's own launch on torch tensors for matmul and attention, {far}× for add and softmax (Nsight "
            f"Compute: the add kernel alone {_ncu_add():.4f}×). With a warm cache and a tuning record a new "
            f"process compiles nothing (jitted program: {cold:.2f} s cold → {warm:.3f} s). On the CPU, {_cpu()}. "
            + readme_model())


def in_short() -> str:
    one = {b: cell(_vs_triton(b), "{:.3f}") for b in ("matmul_fp16", "matmul_bf16", "fused_attention",
                                                       "fused_attention_causal", "add")}
    hopper = {b: cell(_vs_triton(b, HOPPER_RUNS), "{:.3f}") for b in ("matmul_tma_fp16", "layer_norm_4096x8192")}
    softmax = [v for n in (4096, 8192, 16384, 32768) for v in _vs_triton(f"softmax_4096x{n}")]
    add = Figures(H200_RUNS, "add", ["tritonplug"])
    jt_slower = [1 / v for b in ("matmul_fp16", "matmul_bf16")
                 for v in ratios_to(Figures(H200_RUNS, b, ["tritonplug", "jax_triton"]), "jax_triton")]
    n_suite, passed, failed = suite_passed()
    launch = [records(p) for p in H200_LAUNCH_AB]
    jit, eager = ([find(r, bench=b, impl="tritonplug")["vs_jax_triton"] for r in launch] for b in ("jit", "eager"))
    sixteen, one_worker = compile_speeds()
    warm_compiles = max(max(load(p)["c_new_process"]["warm"]["compiled"]) for p in COMPILE_RUNS)
    by = {r["scenario"]: r for r in records("startup-gpu.json")}
    jax_cache, tuned = by["+ jax cache"], by["+ tuning record"]
    cold, warm = warm_start()
    return (f"Kernel time against the same kernel launched by Triton itself on torch tensors (one run each, the tables "
            f"below): autotuned matmul fp16/bf16 4096³ {one['matmul_fp16']}×/{one['matmul_bf16']}×, TMA-descriptor "
            f"matmul {hopper['matmul_tma_fp16']}×, fused attention {one['fused_attention']}×/"
            f"{one['fused_attention_causal']}× (causal), add 2^28 {one['add']}× at "
            f"{median(add.values('tritonplug', 'pct_of_copy_bw')):.0f} % of copy bandwidth (Nsight Compute: the add "
            f"kernel itself {_ncu_add():.4f}×), softmax {span(softmax)}×, layer norm with a Python-float `eps` "
            f"{hopper['layer_norm_4096x8192']}× (jax-triton 0.3.1 on the same machine: up to {max(jt_slower):.1f}× "
            f"slower on matmul). jax-triton 0.4.0's own test suite against `import tritonplug as jt`: {passed} passed, "
            f"{failed} failed in each of its {n_suite} recorded GPU runs (H200 and H100). Per call against jax-triton "
            f"0.3.1 (`bench/launch_ab.py`, {runs(len(launch))}): {cell(jit, '{:.2f}', '×')} inside `jit`, "
            f"{cell(eager, '{:.2f}', '×')} eagerly (synchronised). An 8-configuration autotuned GEMM lowers in "
            f"{sixteen:.3f} s with 16 warm workers and {one_worker:.3f} s with one "
            f"(`bench/results/h200-compile-16workers.json`); a new process with a warm cache lowers it with "
            f"{warm_compiles} compiles, with JAX's persistent cache it compiles nothing at all "
            f"({jax_cache['triton_compiles']} Triton, {jax_cache['xla_compiles']} XLA compiles), and with a tuning "
            f"record it loads {tuned['disk_hits']} configuration (the jitted program: {cold:.2f} s cold → "
            f"{warm:.3f} s, "
            f"`bench/results/startup-gpu.json`). On the CPU, {_cpu()} (`bench/results/interpret-cpu.json`). Every "
            f"figure between `bench/figures.py` markers in these pages is rendered from `bench/results/` by "
            f"`python bench/figures.py`; `tests/test_readme_figures.py` fails when a page differs from its rendering.")


def ncu_add() -> str:
    """The Nsight Compute comparison of one add binary launched both ways (``bench/ncu_add.py``)."""
    text = (RESULTS / NCU_ADD).read_text(encoding="utf-8")
    ours, theirs = (float(x) for x in re.search(r"tritonplug ([\d.]+) us, triton_native ([\d.]+) us", text).groups())
    launches = re.findall(r"^\d+\s+(tritonplug|triton_native)\s", text, re.M)
    return (f"**Settled for `add` with Nsight Compute** (1 run, `bench/results/{NCU_ADD}`, `bench/ncu_add.py`): the "
            f"kernel alone takes {ours:.1f} µs launched by tritonplug and {theirs:.1f} µs launched by Triton on torch "
            f"tensors (median of {launches.count('tritonplug')} and {launches.count('triton_native')} launches; ratio "
            f"{_ncu_add():.4f}, same registers, same DRAM bytes). The wall-clock gap above is the JAX side of the "
            f"harness (per-call allocation and dispatch), not the kernel.")


def h200_goals() -> str:
    """The H200 run against its goals, each verdict computed from the same records as the tables."""
    goal = 1.02
    names = {"matmul_fp16": "matmul fp16", "matmul_bf16": "matmul bf16", "fused_attention": "fused attention",
             "fused_attention_causal": "causal attention", "add": "add",
             **{f"softmax_4096x{n}": f"softmax 4096×{n}" for n in (4096, 8192, 16384, 32768)}}
    ratio = {b: median(_vs_triton(b)) for b in names}
    met = [f"{names[b]} ({v:.3f})" for b, v in ratio.items() if v <= goal]
    missed = [f"{names[b]} ({v:.3f})" for b, v in ratio.items() if v > goal]
    add = Figures(H200_RUNS, "add", ["tritonplug"])
    copy = Figures(H200_RUNS, "copy", ["torch"])
    mm = Figures(H200_RUNS, "matmul_fp16", ["tritonplug", "xla"])
    ours_tf, xla_tf = median(mm.values("tritonplug", "tflops")), median(mm.values("xla", "tflops"))
    launch = {b: median(ratios_to(Figures(H200_RUNS, b, ["tritonplug", "jax_triton"]), "jax_triton"))
              for b in ("launch_overhead_unrolled", "launch_overhead_fori_loop", "eager_dispatch")}
    compile_s = {(b, i): median(Figures(H200_RUNS, b, [i]).values(i, lambda r: r.get("lower_s", r.get("compile_s"))))
                 for b, i in (("compile_cold", "tritonplug"), ("compile_cold", "triton_native"),
                              ("compile_cold", "jax_triton"), ("compile_warm", "tritonplug"),
                              ("compile_workers_1", "tritonplug"), ("compile_workers_16", "tritonplug"))}
    warm = Figures(H200_RUNS, "compile_warm", ["tritonplug"]).by_run
    cpu = load("compile-cpu.json")
    jit_met = all(launch[b] <= 1 for b in ("launch_overhead_unrolled", "launch_overhead_fori_loop"))
    return "\n".join([
        f"* **Kernel time ≤ {goal:.2f} × Triton's own launcher**: met for {', '.join(met)}; missed for "
        f"{', '.join(missed)}.",
        f"* **add ≥ 90 % of copy bandwidth**: {median(add.values('tritonplug', 'gbps')):.0f} GB/s = "
        f"{median(add.values('tritonplug', 'pct_of_copy_bw')):.0f} % of torch's copy "
        f"({median(copy.values('torch', 'gbps')):.0f} GB/s).",
        f"* **fp16 matmul ≥ 90 % of `jnp.dot`**: {ours_tf:.0f} vs {xla_tf:.0f} TFLOP/s = "
        f"{100 * ours_tf / xla_tf:.0f} %.",
        f"* **Per-call overhead ≤ jax-triton**: inside jit {'met' if jit_met else 'not met'} (unrolled "
        f"{launch['launch_overhead_unrolled']:.2f}, fori_loop {launch['launch_overhead_fori_loop']:.2f}); eager "
        f"dispatch {launch['eager_dispatch']:.2f} ({'met' if launch['eager_dispatch'] <= 1 else 'not met'} in this "
        f"run; the per-call sections below measure later code).",
        f"* **Compile**: cold lowering of the 8-config GEMM takes {compile_s['compile_cold', 'tritonplug']:.2f} s with "
        f"{median([r['tritonplug']['workers'] for r in Figures(H200_RUNS, 'compile_cold', ['tritonplug']).by_run]):.0f}"
        f" workers vs {compile_s['compile_cold', 'triton_native']:.2f} s for Triton compiling the same configs itself "
        f"and {compile_s['compile_cold', 'jax_triton']:.2f} s for jax-triton; a new process with a warm cache lowers "
        f"it in {compile_s['compile_warm', 'tritonplug']:.2f} s with "
        f"{max(r['tritonplug']['compile_stats']['compiled'] for r in warm)} compiles "
        f"({compile_s['compile_cold', 'tritonplug'] / compile_s['compile_warm', 'tritonplug']:.1f} × here; "
        f"{cpu['c_new_process']['lowering_speedup']:.1f} × on the CPU machine, `bench/results/compile-cpu.json`). "
        f"16 workers vs 1: "
        f"{compile_s['compile_workers_1', 'tritonplug'] / compile_s['compile_workers_16', 'tritonplug']:.2f} ×, "
        f"against a goal of 0.75 × min(8, 16) = 6 ×; warm pools on the 2-core CPU machine: "
        f"{cpu['b_parallel_configs']['speedup']:.2f} × (`bench/compile.py`)."])
