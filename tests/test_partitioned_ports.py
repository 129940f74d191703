"""The ports of ``examples/ports`` in a sharded ``jit``: each launcher is partitioned by its rule, so the ops and
their ``jax.grad`` run per shard on a (4, 2) mesh of 8 CPU devices and match the same call on one device and the
port's ``jnp`` reference; where the rule keeps the sharded factors split, the compiled program gathers nothing.

Eight CPU devices exist only if XLA_FLAGS is set before JAX initialises, so the cases run in a child process
(``SCRIPT``) that prints one JSON report; each test asserts on its case. Rows and batch are split over ``x``,
heads (or SwiGLU's columns) over ``y``. A few cases split a factor the rule keeps whole (RMSNorm's hidden dim,
the vocabulary, the recurrent scan's time, the heads of grouped-query attention): XLA gathers it first, and the
results are still right.
The launchers that update an argument in place (``torch_launcher(writes=...)``: SwiGLU's backward, RoPE, cross
entropy) make ``jax.new_ref`` s inside the partitioned function; they run per shard too.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT, case_ran, cpu_devices_env, requires_backend


def _installed(package: str) -> bool:
    return importlib.machinery.PathFinder.find_spec(package) is not None  # finds, never imports


pytestmark = [
    requires_backend("interpret"),
    pytest.mark.skipif(not (_installed("liger_kernel") and _installed("fla")),
                       reason="liger_kernel or fla is not installed (tox -e corpus installs them)"),
]

SCRIPT = textwrap.dedent('''
    import json, traceback
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from tritonplug import inspection
    from tritonplug.process.state import state
    from ports import fla_fused_recurrent, liger_cross_entropy, liger_rms_norm, liger_rope, liger_swiglu
    from ports import fla_parallel_attention, liger_fused_linear_cross_entropy

    mesh = jax.make_mesh((len(jax.devices()) // 2, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    rng = np.random.default_rng(0)
    REPORT = {"devices": len(jax.devices()), "platform": jax.devices()[0].platform}

    def rand(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def worst(got, want):
        pairs = zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
        return max(float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)))) for g, w in pairs)

    def case(name, fn, reference, args, specs):
        """``fn`` on one device and under ``jax.jit`` with ``args`` placed by ``specs`` over ``mesh``."""
        try:
            state.partitions.clear()
            one = jax.jit(fn)(*args)
            placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs, strict=True)]
            jitted = jax.jit(fn)
            got = jitted(*placed)
            text = jitted.lower(*placed).compile().as_text()
            REPORT[name] = {
                "ok": True, "vs_one_device": worst(got, one), "vs_reference": worst(got, jax.jit(reference)(*args)),
                "collectives": sorted({c["op"] for c in inspection.collectives(text)}),
                "split": sorted({f"{r.function}:{f}:{','.join(axes)}" for r in inspection.partitions()
                                 for f, axes in r.factors}),
                "out_specs": [str(g.sharding.spec) for g in jax.tree.leaves(got)]}
            return got
        except Exception as exc:  # reported per case; the test names the one that failed
            REPORT[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                            "trace": traceback.format_exc()[-3000:]}

    def with_grad(name, op, reference, args, specs, diff):
        """``op``'s values, and ``jax.grad`` of ``sum(op(*args) * cotangent)`` for the arguments ``diff``."""
        sharded = case(name, op, reference, args, specs)
        outs = jax.tree.leaves(jax.eval_shape(op, *args))
        cotangents = [rand(*o.shape) for o in outs]
        # each cotangent split as its output came (replicated if the forward failed: its case says why)
        cotangent_specs = ([o.sharding.spec for o in jax.tree.leaves(sharded)] if sharded is not None
                           else [P()] * len(outs))

        def loss(fn):
            def scalar(*arrays):
                outs = jax.tree.leaves(fn(*arrays[:len(args)]))
                return sum(jnp.sum(o * c) for o, c in zip(outs, arrays[len(args):], strict=True))
            return jax.grad(scalar, argnums=diff)

        case(name + "/grad", loss(op), loss(reference), (*args, *cotangents), (*specs, *cotangent_specs))

    # RMSNorm: rows (batch, sequence) split, the normalised hidden dim whole; dW is summed over the row shards
    x, w = rand(8, 16, 96), 1.0 + 0.1 * rand(96)
    rms = liger_rms_norm.liger_rms_norm
    with_grad("rms_norm/batch", rms, liger_rms_norm.rms_norm_reference, (x, w), (P("x"), P()), (0, 1))
    # one batch row per x shard (any mesh), so that merging (batch, sequence) into the launcher's rows keeps both splits
    with_grad("rms_norm/batch_and_sequence", rms, liger_rms_norm.rms_norm_reference, (x[:mesh.shape["x"]], w),
              (P("x", "y"), P()), (0, 1))
    case("rms_norm/hidden_gathered", rms, liger_rms_norm.rms_norm_reference, (x, w), (P("x", None, "y"), P("y")))

    # SwiGLU: elementwise, so rows and columns both split
    a, b = rand(8, 16, 80), rand(8, 16, 80)
    with_grad("swiglu/rows_and_columns", liger_swiglu.liger_swiglu, liger_swiglu.swiglu_reference, (a, b),
              (P("x", None, "y"),) * 2, (0, 1))

    # RoPE: batch and heads split (k's heads with q's when as many), positions' cos/sin whole or split with q's batch
    seq, hd = 16, 16
    freqs = np.arange(seq, dtype=np.float32)[:, None] / (100.0 ** (np.arange(hd // 2) / (hd // 2)))
    emb = np.concatenate([freqs, freqs], axis=-1)[None]
    cos, sin = np.cos(emb), np.sin(emb)
    q, k, k_gqa = rand(8, 4, seq, hd), rand(8, 4, seq, hd), rand(8, 2, seq, hd)
    shift = 1.0 + 0.5 * rand(8, 1, 1)
    cos_b, sin_b = np.cos(emb * shift), np.sin(emb * shift)  # a position table per batch row
    rope = lambda c, s: lambda q, k: liger_rope.liger_rope(q, k, c, s)  # noqa: E731
    rope_ref = lambda c, s: lambda q, k: liger_rope.rope_reference(q, k, c, s)  # noqa: E731
    with_grad("rope/batch_and_heads", rope(cos, sin), rope_ref(cos, sin), (q, k), (P("x", "y"),) * 2, (0, 1))
    with_grad("rope/gqa_cos_per_batch", lambda q, k, c, s: liger_rope.liger_rope(q, k, c, s),
              liger_rope.rope_reference, (q, k_gqa, cos_b, sin_b), (P("x", "y"), P("x"), P("x"), P("x")), (0, 1))
    with_grad("rope/sequence", rope(cos, sin), rope_ref(cos, sin), (q, k), (P(None, None, "x"),) * 2, (0, 1))

    # cross entropy: rows split, the vocabulary whole (softmax normalises over it); per-row losses, reduced after
    logits, target = rand(64, 200), rng.integers(0, 200, 64).astype(np.int32)
    target[::5] = -100
    ce = liger_cross_entropy
    for reduction, smoothing in (("mean", 0.0), ("mean", 0.1), ("sum", 0.0), ("none", 0.0)):
        op = lambda x, t, f=ce.liger_cross_entropy, r=reduction, s=smoothing: f(x, t, -100, s, r)  # noqa: E731
        ref = lambda x, t, r=reduction, s=smoothing: ce.cross_entropy_reference(x, t, -100, s, r)  # noqa: E731
        with_grad(f"cross_entropy/rows_{reduction}_{smoothing}", op, ref, (logits, target), (P("x"), P("x")), (0,))
    case("cross_entropy/vocab_gathered", lambda x, t: ce.liger_cross_entropy(x, t), ce.cross_entropy_reference,
         (logits, target), (P("x", "y"), P("x")))

    # FLA's recurrent forward: batch and heads split, the scan's time whole
    fla = fla_fused_recurrent
    qf, kf, vf = rand(8, 12, 4, 16), rand(8, 12, 4, 16) / 16, rand(8, 12, 4, 32)
    gf, h0 = np.asarray(jax.nn.log_sigmoid(rand(8, 12, 4))), rand(8, 4, 16, 32)
    bth = P("x", None, "y")
    case("fla/batch_and_heads", lambda q, k, v: fla.fused_recurrent_fwd(q, k, v, scale=0.25)[0],
         lambda q, k, v: fla.fused_recurrent_reference(q, k, v, scale=0.25)[0], (qf, kf, vf), (bth,) * 3)
    case("fla/gates_and_states", lambda q, k, v, g, h: fla.fused_recurrent_fwd(
        q, k, v, g=g, scale=0.25, initial_state=h, output_final_state=True),
         lambda q, k, v, g, h: fla.fused_recurrent_reference(q, k, v, g=g, scale=0.25, initial_state=h),
         (qf, kf, vf, gf, h0), (bth, bth, bth, bth, P("x", "y")))
    case("fla/time_gathered", lambda q, k, v: fla.fused_recurrent_fwd(q, k, v, scale=0.25)[0],
         lambda q, k, v: fla.fused_recurrent_reference(q, k, v, scale=0.25)[0], (qf, kf, vf), (P(None, "x"),) * 3)

    # fused linear cross entropy: tokens split (each shard scans its own chunks), vocabulary and hidden whole;
    # grad W's row-shard partial sums and the loss's sum and count are added
    flce = liger_fused_linear_cross_entropy
    xl, wl = rand(64, 32), rand(200, 32) / 6
    tl_ = rng.integers(0, 200, 64).astype(np.int32)
    tl_[::5] = -100
    with_grad("flce/rows", lambda x, w, t: flce.fused_linear_cross_entropy(x, w, t, chunk_size=4),
              flce.fused_linear_cross_entropy_reference, (xl, wl, tl_), (P("x"), P(), P("x")), (0, 1))

    # FLA's parallel attention: batch and heads split (each query head with its key/value head); under GQA a
    # split of the heads would break the groups, so the rule keeps them whole (gathered)
    attn = fla_parallel_attention
    qa, ka, kg = rand(8, 24, 4, 16), rand(8, 24, 4, 16), rand(8, 24, 2, 16)
    with_grad("attention/batch_and_heads", attn.attention, attn.attention_reference, (qa, ka, ka), (bth,) * 3,
              (0, 1, 2))
    with_grad("attention/gqa_heads_gathered", attn.attention, attn.attention_reference, (qa, kg, kg), (bth,) * 3,
              (0, 1, 2))
    print("REPORT " + json.dumps(REPORT))
''')

#: case → (the factors that must be split, as "launcher:factor:mesh axes"; the collectives its compiled program
#: may have). An all-gather only where a case splits a factor the rule keeps whole; an all-reduce where row
#: shards' partial sums are added (RMSNorm's dW, cross entropy's sum and count of rows not ignored).
CASES = {
    "rms_norm/batch": ({"rms_norm_forward:r:x"}, set()),
    "rms_norm/batch/grad": ({"rms_norm_forward:r:x", "rms_norm_backward:r:x"}, {"all-reduce"}),
    "rms_norm/batch_and_sequence": ({"rms_norm_forward:r:x,y"}, set()),
    "rms_norm/batch_and_sequence/grad": ({"rms_norm_backward:r:x,y"}, {"all-reduce"}),
    "rms_norm/hidden_gathered": ({"rms_norm_forward:r:x"}, {"all-gather"}),
    "swiglu/rows_and_columns": ({"swiglu_forward:r:x", "swiglu_forward:n:y"}, set()),
    "swiglu/rows_and_columns/grad": ({"swiglu_backward:r:x", "swiglu_backward:n:y"}, set()),
    "rope/batch_and_heads": ({"rope_forward:b:x", "rope_forward:h:y"}, set()),
    "rope/batch_and_heads/grad": ({"rope_backward:b:x", "rope_backward:h:y"}, set()),
    "rope/gqa_cos_per_batch": ({"rope_forward:b:x", "rope_forward:h:y"}, set()),
    "rope/gqa_cos_per_batch/grad": ({"rope_backward:b:x", "rope_backward:h:y"}, set()),
    "rope/sequence": ({"rope_forward:s:x"}, set()),
    "rope/sequence/grad": ({"rope_backward:s:x"}, set()),
    "cross_entropy/vocab_gathered": ({"cross_entropy_forward:r:x"}, {"all-gather", "all-reduce"}),
    "fla/batch_and_heads": ({"fused_recurrent_fwd:b:x", "fused_recurrent_fwd:h:y"}, set()),
    "fla/gates_and_states": ({"fused_recurrent_fwd:b:x", "fused_recurrent_fwd:h:y"}, set()),
    "fla/time_gathered": (set(), {"all-gather"}),
}
CASES.update({
    "flce/rows": ({"fused_linear_cross_entropy_forward:r:x"}, {"all-reduce"}),
    "flce/rows/grad": ({"fused_linear_cross_entropy_forward:r:x", "fused_linear_cross_entropy_backward:r:x"},
                       {"all-reduce"}),
    "attention/batch_and_heads": ({"parallel_attn_fwd:b:x", "parallel_attn_fwd:h:y"}, set()),
    "attention/batch_and_heads/grad": ({"parallel_attn_bwd:b:x", "parallel_attn_bwd:h:y"}, set()),
    "attention/gqa_heads_gathered": ({"parallel_attn_fwd:b:x"}, {"all-gather"}),
    "attention/gqa_heads_gathered/grad": ({"parallel_attn_bwd:b:x"}, {"all-gather"}),
})
for _case in ("mean_0.0", "mean_0.1", "sum_0.0", "none_0.0"):  # the backward's rows are its '...' factor
    CASES[f"cross_entropy/rows_{_case}"] = ({"cross_entropy_forward:r:x"}, {"all-reduce"})
    CASES[f"cross_entropy/rows_{_case}/grad"] = ({"cross_entropy_forward:r:x", "cross_entropy_backward:dots0_1:x"},
                                                 {"all-reduce"})

@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The child's report: on 8 CPU devices, or, with ``SHARDING_TESTS_ON_GPUS=1`` on a machine with an even
    number of GPUs, on those (``bench/results/partitioned-h100x2/ports-*`` ran it so)."""
    script = tmp_path_factory.mktemp("partitioned_ports") / "eight_devices.py"
    script.write_text(SCRIPT)
    on_gpus = os.environ.get("SHARDING_TESTS_ON_GPUS") == "1"
    # Checked mode off: its jax.debug.callback crashes XLA:CPU inside a partitioned body (as in test_partitioned)
    variables = {"TRITONPLUG_INTERPRET_CHECK": "0", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT), str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")])}
    env = {**os.environ, **variables} if on_gpus else cpu_devices_env(8, **variables)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    result = json.loads(lines[-1].removeprefix("REPORT "))
    assert result["devices"] >= 2 if on_gpus else result["devices"] == 8
    return result


def test_every_casecase_ran(report):
    assert set(report) - {"devices", "platform"} == set(CASES)


def _reference_tolerance(report: dict, name: str) -> float:
    """FLA's attention multiplies fp32 blocks with ``tl.dot``, which Triton runs in TF32 on an NVIDIA GPU (its
    default ``input_precision``), as XLA does the reference's fp32 matmuls: both are near the exact values, not each
    other (4 × H100: 3e-3 to 7e-3, while every shard equals one GPU's result exactly)."""
    return 1e-2 if report["platform"] == "gpu" and name.startswith("attention/") else 2e-4


@pytest.mark.parametrize("name", list(CASES))
def test_sharded_port_matches_one_device_and_the_reference(report, name):
    entry = case_ran(report, name)
    assert entry["vs_one_device"] <= 1e-4, entry
    assert entry["vs_reference"] <= _reference_tolerance(report, name), entry


#: the cases whose all-gather is of a factor split over ``x`` alone (none on two GPUs, where ``x`` has size 1)
GATHERED_OVER_X = {"fla/time_gathered"}


def _on_this_mesh(split: set[str], devices: int) -> set[str]:
    """The splits ``split`` names as they show on the (devices / 2, 2) mesh: on two GPUs ``x`` has size 1, and a
    split over it is none (a factor split over ``x,y`` is split over ``y`` alone)."""
    sizes = {"x": devices // 2, "y": 2}
    shown = set()
    for entry in split:
        launcher, factor, axes = entry.split(":")
        live = [axis for axis in axes.split(",") if sizes[axis] > 1]
        if live:
            shown.add(f"{launcher}:{factor}:{','.join(live)}")
    return shown


@pytest.mark.parametrize("name", list(CASES))
def test_rule_splits_the_row_local_factors_and_gathers_only_what_it_keeps_whole(report, name):
    entry = case_ran(report, name)
    split, allowed = CASES[name]
    assert _on_this_mesh(split, report["devices"]) <= set(entry["split"]), entry["split"]
    assert set(entry["collectives"]) <= allowed, entry["collectives"]
    gathers = "all-gather" in allowed and not (name in GATHERED_OVER_X and report["devices"] // 2 == 1)
    assert ("all-gather" in entry["collectives"]) == gathers, entry["collectives"]
