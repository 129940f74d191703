"""docs/model.md's figures (and the README's), from every ``bench/model.py`` run under ``bench/results/model-gpu/``.

A one-GPU figure of an op choice is the median over every run that trained that choice and ``jax`` on one GPU
(whatever the machine and batch: each ratio is to ``jax`` in the same run), with the range; the runs are listed.
"""

from __future__ import annotations

import re
import statistics

from _report import RESULTS, Record, cell, find, load, median, runs, span, table

MODEL = RESULTS / "model-gpu"
#: runs of other code, listed but not counted (why)
OTHER_CODE = {"model-1b-batch4-first.json": "measured before the fused loss's chunks were sized by a 1 GiB logits "
                                            "budget (commit 0687cee), so its `tritonplug` loss is other code"}
CHOICES = [("jax", "`jax` (cuDNN attention)"), ("tritonplug", "`tritonplug` (all five ops)"),
           ("jax,loss=tritonplug", "`jax,loss=tritonplug`")]
COMPARE = "compare-small-50steps.json"  #: the lr 1e-3 run before it (``-first-lr1e-3``) trained another config
TRAIN = re.compile(r"^train (\w+) batch (\d+)$")


def model_runs() -> list[tuple[str, dict]]:
    """``(file name, JSON)`` of every bench/model.py run, in name order."""
    found = []
    for path in sorted(MODEL.glob("*.json")):
        data = load(str(path.relative_to(RESULTS)))
        if "records" in data and "bench/model.py" in data.get("command", ""):
            found.append((path.name, data))
    return found


def _gpu(record: Record, data: dict) -> str:
    name = record.get("machine", "?").replace("NVIDIA ", "").split(" ")[0]
    fraction = data["environment"].get("env", {}).get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    return f"{name} (memory fraction {fraction})" if fraction else name


def one_gpu() -> list[tuple[str, str, int, Record]]:
    """``(file, GPU, batch, record)`` of each one-GPU training record of a run of this code that also trained
    ``jax`` on one GPU at the same batch."""
    found = []
    for name, data in model_runs():
        if name in OTHER_CODE:
            continue
        for r in data["records"]:
            match = TRAIN.match(r["bench"])
            if match and r.get("tokens_vs_jax") is not None and find(data["records"], bench=r["bench"], impl="jax"):
                found.append((name, _gpu(r, data), int(match.group(2)), r))
    return found


def mix_summary() -> tuple[list[float], list[float], int, int]:
    """``jax,loss=tritonplug``'s tokens/s to ``jax`` (every one-GPU run), its peak memory to ``jax``'s at batch 8,
    and the largest batches of ``jax`` and of the mix."""
    mix = [r for _, _, _, r in one_gpu() if r["impl"] == "jax,loss=tritonplug"]
    _, largest = _largest()
    return ([r["tokens_vs_jax"] for r in mix], [r["peak_vs_jax"] for r in mix if r["bench"].endswith("batch 8")],
            largest["jax"]["batch"], largest["jax,loss=tritonplug"]["batch"])


def one_gpu_tables() -> str:
    found = one_gpu()
    listed = [[f"`{name}`", gpu, str(batch), label, f"{r['tokens_per_s']:,.0f}", f"{r['tokens_vs_jax']:.3f}",
               f"{r['device_peak_gb']:.1f} GB", f"{r['peak_vs_jax']:.3f}"]
              for name, gpu, batch, r in found for impl, label in CHOICES if r["impl"] == impl]
    summary = []
    for impl, label in CHOICES[1:]:
        mine = [(batch, r) for _, _, batch, r in found if r["impl"] == impl]
        peaks = {b: [r["peak_vs_jax"] for batch, r in mine if batch == b] for b in sorted({b for b, _ in mine})}
        summary.append([label, str(len(mine)), cell([r["tokens_vs_jax"] for _, r in mine], "{:.3f}", "×"),
                        "; ".join(f"batch {b}: {cell(v, '{:.2f}', '×')}" for b, v in sorted(peaks.items()))])
    others = "".join(f" Not counted: `{name}` ({why})." for name, why in OTHER_CODE.items())
    return "\n\n".join([
        f"Every run that trained an op choice and `jax` on one GPU ({runs(len({f for f, *_ in found}))}; "
        f"tokens/s and device peak each to `jax`'s in the same run).{others}",
        table(["run (`bench/results/model-gpu/`)", "GPU", "batch", "op choice", "tokens/s", "vs `jax`", "device peak",
               "vs `jax`"], listed),
        "Over those runs (median, range in brackets):",
        table(["op choice", "runs", "tokens/s vs `jax`", "device peak vs `jax`"], summary)])


def _largest() -> tuple[str, dict[str, Record]]:
    name, data = next((n, d) for n, d in model_runs() if any(r["bench"].startswith("largest") for r in d["records"]))
    return name, {r["impl"]: r for r in data["records"] if r["bench"].startswith("largest")}


def largest_batch() -> str:
    name, by = _largest()
    jax, mix = by["jax"], by["jax,loss=tritonplug"]
    return (f"**Largest batch that fits** under a {jax['limit_gb'] * 1e9 / 2**30:.1f} GiB limit (1 run, "
            f"`bench/results/model-gpu/{name}`: an H200 held to the H100's memory with "
            f"`XLA_PYTHON_CLIENT_MEM_FRACTION`; "
            f"predicted from XLA's memory plan at two batches, then run): `jax` {jax['batch']} sequences, "
            f"`jax,loss=tritonplug` **{mix['batch']}** ({mix['batch'] / jax['batch']:.1f}×). XLA's plan grows by "
            f"{jax['plan_gb_per_sequence']:.2f} GB a sequence with `jax`'s loss (the fp32 logits and their gradient) "
            f"and by {mix['plan_gb_per_sequence']:.2f} GB with the fused one.")


def per_op() -> str:
    runs_with = [(n, d) for n, d in model_runs() if n not in OTHER_CODE and any(r["bench"].startswith("op ")
                                                                                for r in d["records"])]
    rows = []
    for op, label in (("rms_norm", "rms_norm"), ("rope", "rope"), ("swiglu", "swiglu"),
                      ("attention", "attention (cuDNN vs FLA)"), ("loss", "loss (1 GiB logits chunks)")):
        bench = f"op {op} fwd+bwd"
        jax = [find(d["records"], bench=bench, impl="jax") for _, d in runs_with]
        ours = [find(d["records"], bench=bench, impl="tritonplug") for _, d in runs_with]
        unit, scale = ("ms", 1e-3) if jax[0]["median_us"] > 2000 else ("µs", 1.0)
        fmt = "{:.2f}" if unit == "ms" and jax[0]["median_us"] < 10000 else "{:.1f}" if unit == "ms" else "{:.0f}"
        rows.append([label, cell([r["median_us"] * scale for r in jax], fmt, f" {unit}"),
                     cell([r["median_us"] * scale for r in ours], fmt, f" {unit}"),
                     cell([r["vs_jax"] for r in ours], "{:.2f}", "×"),
                     " → ".join(cell([r["per_step_ms"] for r in side], "{:.1f}") for side in (jax, ours)) + " ms"])
    liger = [find(d["records"], bench="op loss fwd+bwd", impl="tritonplug (Liger's chunks)") for _, d in runs_with]
    jax = [find(d["records"], bench="op loss fwd+bwd", impl="jax") for _, d in runs_with]
    rows.append(["loss, Liger's default chunks", cell([r["median_us"] * 1e-3 for r in jax], "{:.1f}", " ms"),
                 cell([r["median_us"] * 1e-3 for r in liger], "{:.1f}", " ms"),
                 cell([r["vs_jax"] for r in liger], "{:.2f}", "×"), ""])
    names = ", ".join(f"`{n}`" for n, _ in runs_with)
    return (f"**Per op**, forward + backward alone at the model's shapes ({runs(len(runs_with))}: {names}; per call, "
            f"and times the calls in a step, rematerialisation not counted):\n\n"
            + table(["op", "`jax`", "`tritonplug`", "ratio", "per step, `jax` → `tritonplug`"], rows))


def meshes() -> str:
    rows = []
    for name, data in model_runs():
        scaling = [r for r in data["records"] if r["bench"].startswith("scaling")]
        if not scaling:
            continue
        mesh = scaling[0]["bench"].split("mesh ")[1]
        train = next(r for r in data["records"] if r["bench"].endswith(f"mesh {mesh}"))
        by = {r["impl"]: r["efficiency"] for r in scaling}
        cells = [f"{by[i]:.3f}" if i in by else "—" for i in ("jax", "jax,loss=tritonplug", "tritonplug")]
        mix = find(data["records"], bench=train["bench"], impl="jax,loss=tritonplug")
        peak = f"{mix['peak_vs_jax']:.2f}×" if mix and mix.get("peak_vs_jax") and mix["peak_vs_jax"] != 1 else "—"
        rows.append([f"`{mesh}`", f"{scaling[0]['devices']} × {_gpu(train, data)}", *cells, peak, f"`{name}`"])
    return table(["mesh", "machine", "`jax`", "`jax,loss=tritonplug`", "`tritonplug`",
                  "the mix's device peak vs `jax`", "run (`bench/results/model-gpu/`, 1 each)"], rows)


#: the vocabulary-parallel loss's choices (under ``model=N``), each with its control: the same ops with the loss
#: keeping the vocabulary whole (Liger's fused loss, the projection replicated)
VOCAB_PARALLEL = (("tritonplug", "tritonplug,loss=liger"), ("jax,loss=tritonplug", "jax,loss=liger"))


def vocab_parallel() -> str:
    """Issue 39's loss goal: on each mesh run with a ``model`` axis, a choice with the vocabulary-parallel loss
    against its control (:data:`VOCAB_PARALLEL`) and ``jax``, side by side in the run."""
    rows = []
    for name, data in model_runs():
        for choice, control in VOCAB_PARALLEL:
            for train in (r for r in data["records"] if r["impl"] == choice and "model=" in r["bench"]
                          and r.get("tokens_per_s")):
                whole = find(data["records"], bench=train["bench"], impl=control)
                xla = find(data["records"], bench=train["bench"], impl="jax")
                if not whole or not whole.get("tokens_per_s"):
                    continue
                rows.append([f"`{train['bench'].split('mesh ')[1]}`", f"{train['devices']} × {_gpu(train, data)}",
                             f"`{choice}` vs `{control}`", f"{train['tokens_per_s'] / whole['tokens_per_s']:.3f}×",
                             f"{train['tokens_per_s'] / xla['tokens_per_s']:.3f}×" if xla else "—",
                             f"{train['device_peak_gb'] / whole['device_peak_gb']:.2f}×",
                             f"{train['device_peak_gb'] / xla['device_peak_gb']:.2f}×" if xla else "—", f"`{name}`"])
    return table(["mesh", "machine", "vocabulary-parallel vs whole", "tokens/s vs whole", "tokens/s vs `jax`",
                  "device peak vs whole", "device peak vs `jax`", "run (`bench/results/model-gpu/`, 1 each)"], rows)


def loss_curves() -> str:
    data = load(f"model-gpu/{COMPARE}")
    a, b = data["runs"]["jax"]["losses"], data["runs"]["tritonplug"]["losses"]
    diff = [abs(x - y) / x for x, y in zip(a, b, strict=True)]
    worst = max(range(len(diff)), key=diff.__getitem__)
    cfg = data["config"]
    return (f"**Loss curves**: `--config {cfg['name']}` ({cfg['params'] / 1e6:.0f}M parameters, vocab {cfg['vocab']}, "
            f"batch {cfg['batch']} × {cfg['seq']}) trained {len(a)} steps with both op choices from one init on one "
            f"{data['machine']['device'].replace('NVIDIA ', '').split(' ')[0]} (1 run, "
            f"`bench/results/model-gpu/{COMPARE}`): both fall from {a[0]:.2f} to {a[-1]:.2f} / {b[-1]:.2f}; per step "
            f"they differ (|`jax` − `tritonplug`| / `jax`) by a median of {statistics.median(diff[-10:]):.2%} and at "
            f"most {max(diff[-10:]):.2%} over the last 10 steps, but by up to {diff[worst]:.0%} at step {worst} "
            f"(from 0), where both curves spike (bf16 rounding differences between the two implementations grow "
            f"while the optimiser is unstable, then shrink).")


def readme_model() -> str:
    """The README's sentence on the Llama example."""
    tokens, peaks, jax_batch, mix_batch = mix_summary()
    return (f"The Llama example, one GPU ([model](docs/model.md)): XLA's ops with Liger's fused linear cross entropy "
            f"train {median(tokens):.3f}× as fast as XLA's alone ({runs(len(tokens))}: {span(tokens)}×) in "
            f"{cell(peaks, '{:.2f}', '×')} the memory (batch 8), fitting {mix_batch / jax_batch:.1f}× the batch.")


ATTENTION = RESULTS / "attention-h200"
#: a setting whose outputs differ from FLA's setting's by more than this (relative to their largest magnitude) is
#: wrong: ``BS > BT`` breaks the kernels' causal blocks (run 1: 0.35-0.61)
ATTENTION_TOL = 1e-2


def attention_configs() -> str:
    """FLA's attention kernels at FLA's Hopper setting and at the fastest of ``bench/attention_configs.py``'s grid,
    against torch's cuDNN attention (every run under ``bench/results/attention-h200/``: each figure the median over
    runs, with the range; the fastest setting is the one whose median over runs is least among the settings whose
    outputs matched FLA's setting's, :data:`ATTENTION_TOL`)."""
    timed: dict[tuple[str, tuple], list[float]] = {}
    torch_us: dict[str, list[float]] = {}
    refused: dict[str, set[tuple]] = {}
    wrong: dict[str, set[tuple]] = {}
    paths = sorted(ATTENTION.glob("**/*.json"))
    for path in paths:
        for r in load(str(path.relative_to(RESULTS)))["records"]:
            if r["impl"].startswith("torch "):
                for key in ("forward_us", "forward_backward_us"):
                    if r.get(key) is not None:
                        torch_us.setdefault(f"{r['impl']} {key}", []).append(r[key])
                continue
            setting = (r["BT"], r["BS"], r["num_warps"], r["num_stages"])
            if r.get("median_us") is None:
                refused.setdefault(r["impl"], set()).add(setting)
            elif r["max_relative_diff_vs_fla_setting"] > ATTENTION_TOL:
                wrong.setdefault(r["impl"], set()).add(setting)
            else:
                timed.setdefault((r["impl"], setting), []).append(r["median_us"])
    rows, fla_total, best_total = [], 0.0, 0.0
    for kernel in ("forward", "dq", "dkv"):
        mine = {s: v for (k, s), v in timed.items() if k == kernel}
        if not mine:
            continue
        fla, best = mine[(128, 64, 8, 3)], min(mine, key=lambda s: median(mine[s]))
        fla_total, best_total = fla_total + median(fla), best_total + median(mine[best])
        rows.append([kernel, cell(fla, "{:.0f}"), "BT={} BS={} {} warps {} stages".format(*best),
                     cell(mine[best], "{:.0f}"), f"{median(fla) / median(mine[best]):.2f}×",
                     f"{len(mine)} / {len(wrong.get(kernel, ()))} / {len(refused.get(kernel, ()))}"])
    cudnn = torch_us.get("torch CUDNN_ATTENTION forward_backward_us", [])
    if rows and cudnn:
        rows.append(["the three, over cuDNN's forward + backward", f"{fla_total / median(cudnn):.2f}×", "",
                     f"{best_total / median(cudnn):.2f}×", "", ""])
    header = ["kernel", "FLA's setting, µs", "fastest right setting", "µs", "gain", "settings right / wrong / refused"]
    note = f"cuDNN's forward + backward (torch): {cell(cudnn, '{:.0f}')} µs, {runs(len(paths))}."
    return table(header, rows) + "\n\n" + note
