"""``examples/moe/parallel.py``: the MoE MLP with its experts split over the ``model`` axis of a (2, 4) mesh of 8
CPU devices, in one ``jax.jit`` (tokens exchanged with all-to-alls, the grouped matmuls partitioned by expert).

Eight CPU devices exist only if XLA_FLAGS is set before JAX initialises, so the cases run in a child process
(``SCRIPT``) that prints one JSON report; each test asserts on a part of it. Each case is one compiled program
that returns the output, the load-balancing loss and ``jax.vjp``'s gradients in ``h`` and every parameter, for
the cotangent ``(COT, 1)``. The references: ``layer.moe_mlp(..., "jax")`` on one device where no slot is
dropped, and, where slots are dropped, a ``jnp`` MLP of every expert on every token whose kept slots a NumPy
loop chose (per source shard, in token order, then ``k``, each expert taking ``capacity`` of them).

Needs vLLM 0.33.0 (``tox -e corpus``); skipped where it is not installed.
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
from helpers import ROOT, case_ran, cpu_devices_env, for_backend

pytestmark = pytest.mark.skipif(importlib.machinery.PathFinder.find_spec("vllm") is None,  # finds, never imports
                                reason="vllm is not installed (tox -e corpus installs vllm==0.33.0 with --no-deps)")

T, D, F, E, K = 64, 32, 16, 8, 2

SCRIPT = textwrap.dedent('''
    import json, math, sys, traceback
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from tritonplug import inspection
    from tritonplug.process.state import state
    from examples.moe import layer, parallel, ragged
    from examples.moe.config import MoEConfig
    from moe_inputs import mlp_arrays

    T, D, F, E, K = (int(a) for a in sys.argv[1:6])
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    SPECS = {"router": P(), "w_gate_up": P("model"), "w_down": P("model")}
    H, PARAMS, COT = mlp_arrays(T, D, F, E)
    REPORT = {"devices": len(jax.devices())}

    def config(capacity_factor):
        return MoEConfig(vocab=256, hidden=D, layers=1, heads=2, kv_heads=1, ffn=0, seq=8, batch=T // 8, experts=E,
                         top_k=K, expert_ffn=F, capacity_factor=capacity_factor, dtype="float32")

    def with_grads(mlp):
        """``(out, aux, (dh, dparams))``: the gradients of ``sum(out * COT) + aux``."""
        def run(h, p):
            (out, aux), vjp = jax.vjp(mlp, h, p)
            return out, aux, vjp((COT, jnp.ones_like(aux)))
        return run

    def compiled(mlp, h, p):
        program = jax.jit(with_grads(mlp)).lower(h, p).compile()
        return program(h, p), program.as_text()

    WANTED = {}  # a reference's results, by the function (the one-device ``jax`` choice serves two cases)

    def kept_slots(chosen, shards, capacity):
        """NumPy: per source shard, each expert keeps the first ``capacity`` slots routed to it in token order."""
        kept, per = np.zeros(chosen.shape, bool), chosen.shape[0] // shards
        for s in range(shards):
            filled = np.zeros(E, int)
            for t in range(s * per, (s + 1) * per):
                for k in range(K):
                    kept[t, k] = filled[chosen[t, k]] < capacity
                    filled[chosen[t, k]] += 1
        return kept

    def reference(cfg, shards):
        """Every expert on every token in ``jnp``, the slots that ``kept_slots`` keeps summed with their weights."""
        per = T // shards
        capacity = max(1, min(per, math.ceil(cfg.capacity_factor * per * K / E)))
        chosen = np.asarray(jax.jit(lambda h, r: layer.route(h, r, cfg)[1])(H, PARAMS["router"]))
        kept = kept_slots(chosen, shards, capacity)

        def mlp(h, p):
            weights, chosen, aux = layer.route(h, p["router"], cfg)
            hi = jax.lax.Precision.HIGHEST
            gate_up = jnp.einsum("td,edh->eth", h, p["w_gate_up"], precision=hi)
            y = jnp.einsum("etf,efd->etd", layer.swiglu(gate_up), p["w_down"], precision=hi)
            rows = y[chosen, jnp.arange(T)[:, None]]  # (T, K, D): token t's row of its k-th expert
            return jnp.sum(rows * (weights * kept)[..., None], axis=1), aux
        return mlp, int((~kept).sum())

    def differences(got, want):
        """Per leaf: max |got - want| / max |want|."""
        scaled = lambda g, w: float(np.max(np.abs(np.asarray(g) - np.asarray(w))) / max(np.max(np.abs(w)), 1e-30))
        return {jax.tree_util.keystr(path): scaled(g, w) for (path, g), w in
                zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), strict=True)}

    def case(name, cfg, want, token_axes=("model",), axis="model", mlp=parallel.moe_mlp_expert_parallel,
             inputs=(H, PARAMS)):
        """``mlp`` (``parallel.moe_mlp_expert_parallel`` or ``ragged.moe_mlp_ragged``) with the experts split over
        ``axis`` and the tokens over ``token_axes`` (``None``: no mesh), on ``inputs`` ``(h, params)``."""
        try:
            state.partitions.clear()
            if token_axes:
                h = jax.device_put(inputs[0], NamedSharding(mesh, P(token_axes)))
                specs = {**SPECS, "w_gate_up": P(axis), "w_down": P(axis)}
                p = {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in inputs[1].items()}
            else:
                h, p = inputs
            ep = lambda h, p: mlp(h, p, cfg, mesh if token_axes else None, axis, token_axes=token_axes)  # noqa: E731
            (out, aux, grads), text = compiled(ep, h, p)
            if (want, id(inputs)) not in WANTED:
                WANTED[want, id(inputs)] = compiled(want, *inputs)[0]
            want_out, want_aux, want_grads = WANTED[want, id(inputs)]
            REPORT[name] = {
                "ok": True, "out": differences(out, want_out)[""], "aux": abs(float(aux) - float(want_aux)),
                "grads": differences(grads, want_grads), "out_spec": str(getattr(out.sharding, "spec", None)),
                "grad_specs": [str(getattr(g.sharding, "spec", None)) for g in jax.tree.leaves(grads)[1:]],
                "collectives": sorted({(c["op"], tuple(c["shape"])) for c in inspection.collectives(text)}),
                "partitions": sorted({(r.function, f, ",".join(axes), len(r.transfers)) for r in inspection.partitions()
                                      for f, axes in r.factors})}
        except Exception as exc:  # reported per case; the test names the one that failed
            REPORT[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                            "trace": traceback.format_exc()[-3000:]}

    no_drops = config(E / K)
    one_device = lambda h, p: layer.moe_mlp(h, p, no_drops, "jax")  # noqa: E731
    case("no_drops", no_drops, one_device)
    case("no_drops_2d", no_drops, one_device, token_axes=("data", "model"))
    case("experts_over_data", no_drops, one_device, token_axes=("data", "model"), axis="data")
    drops = config(1.0)
    mlp, REPORT["dropped"] = reference(drops, 4)
    case("drops", drops, mlp)
    mlp, REPORT["dropped_one_device"] = reference(drops, 1)
    case("drops_one_device", drops, mlp, token_axes=None)
    # the ragged all-to-all (no capacity: nothing dropped at any capacity factor), and every slot routed to the
    # experts of the first `model` device (0 and 1): its receive buffer full, the other devices' experts idle
    skewed = (np.concatenate([np.full((T, 1), 10.0, np.float32), H[:, 1:]], axis=1),
              {**PARAMS, "router": np.concatenate([np.eye(1, E, dtype=np.float32) * 10 + np.eye(1, E, 1) * 9,
                                                   PARAMS["router"][1:]])})
    for name, axes, axis, inputs in (("ragged", ("model",), "model", (H, PARAMS)), ("ragged_2d", ("data", "model"),
                                     "model", (H, PARAMS)), ("ragged_over_data", ("data", "model"), "data",
                                     (H, PARAMS)), ("ragged_one_device", None, "model", (H, PARAMS)),
                                     ("ragged_skewed", ("model",), "model", skewed)):
        case(name, drops, lambda h, p: layer.moe_mlp(h, p, drops, "jax"), axes, axis, ragged.moe_mlp_ragged, inputs)
    try:  # the ragged layer's gradient lowered for GPUs (sm_90) on this mesh: XLA's own ragged all-to-all
        h, p = jax.device_put(H, NamedSharding(mesh, P("model"))), {
            k: jax.device_put(v, NamedSharding(mesh, SPECS[k])) for k, v in PARAMS.items()}
        text = jax.jit(with_grads(lambda h, p: ragged.moe_mlp_ragged(h, p, drops, mesh))).trace(h, p).lower(
            lowering_platforms=("cuda",)).as_text()
        REPORT["ragged_sm90"] = [text.count("@ragged_all_to_all("), text.count("stablehlo.all_to_all")]
    except Exception as exc:  # no CUDA plugin: the test says so
        REPORT["ragged_sm90"] = f"{type(exc).__name__}: {exc}"
    REPORT["skewed_experts"] = np.unique(np.asarray(layer.route(jnp.asarray(skewed[0]), skewed[1]["router"],
                                                                drops)[1])).tolist()

    def exchange_numpy(operands, sizes, offsets, recv, out_rows, slices):
        """``ragged_all_to_all``'s docstring, in NumPy: device d's slice i goes to device i // slices, at
        ``offsets[d][i]`` there (``sizes``: input offsets 0, s0, s0 + s1, ...)."""
        outs = [np.zeros((out_rows,), np.float32) for _ in operands]
        for d, operand in enumerate(operands):
            starts = np.cumsum(sizes[d]) - sizes[d]
            for i, (start, size) in enumerate(zip(starts, sizes[d])):
                outs[i // slices][offsets[d][i]:offsets[d][i] + size] = operand[start:start + size]
        return np.stack(outs)

    def exchange_case(seed, slices=2, rows=6):
        """Random slice sizes (zeros among them) on the 4 `model` devices, each receiver packing what it receives
        by source then slice, one row of gap after each source: ``ragged.exchange``'s CPU path against NumPy."""
        rng = np.random.default_rng(seed)
        n = 4 * slices
        sizes = np.stack([rng.multinomial(rng.integers(0, rows + 1), [1 / n] * n) for _ in range(4)])
        recv = sizes.reshape(4, 4, slices).transpose(1, 0, 2).reshape(4, n)  # recv[r][s * slices + j]
        gap = np.zeros((4, n), int)
        gap[:, slices - 1::slices] = 1
        landing = np.cumsum(recv + gap, axis=1) - recv - gap
        offsets = landing.reshape(4, 4, slices).transpose(1, 0, 2).reshape(4, n)  # sender-side
        operands = rng.standard_normal((4, rows)).astype(np.float32)
        out_rows = 4 * rows + 4
        m = jax.make_mesh((4,), ("model",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:4])
        body = lambda x, o, s, w, r: ragged.exchange(  # noqa: E731
            x[0], o[0], (jnp.cumsum(s[0]) - s[0]).astype(jnp.int32), s[0], w[0], r[0], axis_name="model")[None]
        exchanged = jax.shard_map(body, mesh=m, in_specs=(P("model"),) * 5, out_specs=P("model"), check_vma=False)
        got = jax.jit(exchanged)(
            operands, np.zeros((4, out_rows), np.float32), *(a.astype(np.int32) for a in (sizes, offsets, recv)))
        return float(np.max(np.abs(np.asarray(got) - exchange_numpy(operands, sizes, offsets, recv, out_rows,
                                                                      slices))))
    REPORT["exchange"] = [exchange_case(seed, slices) for seed in range(6) for slices in (1, 2)]
    print("REPORT " + json.dumps(REPORT))
''')


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    script = tmp_path_factory.mktemp("moe_parallel") / "eight_devices.py"
    script.write_text(SCRIPT)
    # checked mode off: its jax.debug.callback crashes XLA:CPU inside a partitioned body (docs/partitioned.md)
    env = cpu_devices_env(8, TRITONPLUG_INTERPRET_CHECK="0", TRITONPLUG_CUDA_ARCH="90", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(script), *map(str, (T, D, F, E, K))], capture_output=True, text=True,
                          timeout=600, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    result = json.loads(lines[-1].removeprefix("REPORT "))
    assert result["devices"] == 8
    return result


#: the cases without drops: the tokens split over ``model`` (4 source shards), or over ``data`` and ``model`` (8),
#: the experts over ``model``, or over ``data`` (``examples/moe/model.py: expert_axis`` on a data-parallel mesh)
NO_DROPS = {"no_drops": "P('model',)", "no_drops_2d": "P(('data', 'model'),)",
            "experts_over_data": "P(('data', 'model'),)"}


@pytest.mark.parametrize("name", list(NO_DROPS))
def test_values_match_one_device_when_no_slot_is_dropped(report, name):
    entry = case_ran(report, name)
    assert entry["out"] <= 1e-6 and entry["aux"] <= 1e-6, entry
    assert entry["out_spec"] == NO_DROPS[name], entry


@pytest.mark.parametrize("name", list(NO_DROPS))
def test_gradients_match_one_device(report, name):
    entry = case_ran(report, name)
    assert set(entry["grads"]) == {"[0]", "[1]['router']", "[1]['w_down']", "[1]['w_gate_up']"}, entry["grads"]
    assert max(entry["grads"].values()) <= 2e-6, entry["grads"]  # relative to the largest (seen: 2e-7)
    # the experts' gradients come back split by expert, as their weights
    axis = "data" if name == "experts_over_data" else "model"
    assert entry["grad_specs"][1:] == [f"P('{axis}',)"] * 2, entry["grad_specs"]


@pytest.mark.parametrize("name", ["drops", "drops_one_device"])
def test_dropped_slots_contribute_nothing(report, name):
    """Capacity factor 1: 4 rows per (source shard, expert) on the mesh (16 tokens a shard; 19 of the 128 slots
    dropped), 16 on one device (64 tokens; 10 dropped): the slots past it count for nothing, in values and in
    gradients, as the reference drops them."""
    assert report["dropped" if name == "drops" else "dropped_one_device"] > 0
    entry = case_ran(report, name)
    assert entry["out"] <= 1e-6 and entry["aux"] <= 1e-6, entry
    assert max(entry["grads"].values()) <= 2e-6, entry["grads"]


#: per case, how the partitioned functions split their factors (function, factor, mesh axes, operands moved)
SPLITS = {"no_drops": [["_experts_backward", "e", "model", 0], ["_experts_forward", "e", "model", 0]]}
SPLITS["drops"] = SPLITS["no_drops"]
SPLITS["no_drops_2d"] = sorted(SPLITS["no_drops"] + [["_experts_backward", "s", "data", 0],
                                                     ["_experts_forward", "s", "data", 0]])
SPLITS["experts_over_data"] = sorted([[f, factor, axis, 0] for f in ("_experts_backward", "_experts_forward")
                                      for factor, axis in (("e", "data"), ("s", "model"))])


@pytest.mark.parametrize("name", list(SPLITS))
def test_tokens_move_by_all_to_all_and_the_expert_weights_stay_split(report, name):
    """The compiled forward and backward: the buffers go to their experts and back by all-to-all, and nothing is
    all-gathered: neither an expert's weights nor the router's (T, E) probabilities (``lax.top_k`` gathered them:
    XLA does not partition its TopK op along the rows, so ``layer.top_k`` takes rounds of ``argmax``). Both
    partitioned functions split the expert factor over ``model`` (and the source shards over ``data`` where the
    tokens are split over both: the weights' gradients are then all-reduced over ``data``) and need no operand
    moved."""
    entry = case_ran(report, name)
    ops = {op for op, _ in entry["collectives"]}
    assert "all-to-all" in ops, entry["collectives"]
    gathered = {tuple(shape) for op, shape in entry["collectives"] if op == "all-gather"}
    assert not gathered, entry["collectives"]
    assert entry["partitions"] == SPLITS[name]


#: ``ragged.moe_mlp_ragged`` (``tritonplug-ep-ragged``): its output's split per case (``None``: one device)
RAGGED = {"ragged": "P('model',)", "ragged_2d": "P(('data', 'model'),)", "ragged_over_data": "P(('data', 'model'),)",
          "ragged_skewed": "P('model',)", "ragged_one_device": None}


@pytest.mark.parametrize("name", list(RAGGED))
def test_the_ragged_exchange_drops_nothing_and_matches_one_device(report, name):
    """At capacity factor 1, where ``tritonplug-ep`` drops slots, the ragged all-to-all keeps every one: values,
    the loss and every gradient equal the one-device ``jax`` choice's (``ragged_dot``), the experts' gradients
    split by expert, also when every slot goes to one device's experts (``ragged_skewed``: its buffer full)."""
    entry = case_ran(report, name)
    assert entry["out"] <= 1e-6 and entry["aux"] <= 1e-6, entry
    assert max(entry["grads"].values()) <= 2e-6, entry["grads"]
    if RAGGED[name]:
        assert entry["out_spec"] == RAGGED[name], entry
        axis = "data" if name == "ragged_over_data" else "model"
        assert entry["grad_specs"][1:] == [f"P('{axis}',)"] * 2, entry["grad_specs"]
        ops = {op for op, _ in entry["collectives"]}
        assert "all-to-all" in ops and "all-gather" not in ops, entry["collectives"]
    assert report["skewed_experts"] == [0, 1]


@for_backend("cuda")
def test_the_ragged_gradient_on_gpus_moves_rows_by_xla_s_op_and_counts_once(report):
    """Lowered for sm_90 on the mesh: the forward's two exchanges and the backward's two (the cotangents moved
    back by ``ragged.move``'s reverse exchange) are XLA's ``ragged_all_to_all``; the only ``all_to_all`` s are the
    forward's two of counts and offsets (JAX's own transpose adds two per exchange)."""
    assert report["ragged_sm90"] == [4, 2]


def test_the_ragged_exchange_on_cpu_keeps_ragged_all_to_alls_semantics(report):
    """``ragged.exchange`` on XLA:CPU (which has no ``ragged-all-to-all``): slices of drawn sizes, zeros among
    them, one or two per device, land exactly where ``jax.lax.ragged_all_to_all``'s documented semantics put them
    (a NumPy transcription of its docstring), gaps left as the output was."""
    assert report["exchange"] == [0.0] * 12


@for_backend("cuda")
@pytest.mark.parametrize("module", ["parallel", "ragged"])
def test_lowers_for_sm90_without_a_gpu(monkeypatch, module):
    """On one device (no mesh) the forward and its gradient make a CUDA program on a CPU machine: vLLM's kernel
    for gate/up and down, their dX, and our dW kernel for each; the ragged exchange as XLA's own
    ``ragged-all-to-all`` (the padded one is XLA:CPU's)."""
    import importlib

    from tritonplug.inspection import kernel_calls

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from examples.moe.config import MoEConfig

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    cfg = MoEConfig(vocab=256, hidden=D, layers=1, heads=2, kv_heads=1, ffn=0, seq=8, batch=T // 8, experts=E,
                    top_k=K, expert_ffn=F)
    spec = jax.ShapeDtypeStruct
    args = (spec((T, D), jnp.bfloat16), {"router": spec((D, E), jnp.float32),
                                         "w_gate_up": spec((E, D, 2 * F), jnp.bfloat16),
                                         "w_down": spec((E, F, D), jnp.bfloat16)})
    moe_mlp = {"parallel": "moe_mlp_expert_parallel", "ragged": "moe_mlp_ragged"}[module]
    mlp = functools.partial(getattr(importlib.import_module(f"examples.moe.{module}"), moe_mlp), cfg=cfg)
    text = jax.jit(mlp).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert [call["name"] for call in kernel_calls(text)] == ["fused_moe_kernel"] * 2
    assert text.count("@ragged_all_to_all(") == (2 if module == "ragged" else 0)  # a custom call

    def loss(h, p):
        out, aux = mlp(h, p)
        return jnp.sum(out.astype(jnp.float32)) + aux

    text = jax.jit(jax.grad(loss, argnums=(0, 1))).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    # dW reads the rows copied into group order (kernels.GATHER_DW_ROWS), not through the plan's row ids
    assert sorted(call["name"] for call in kernel_calls(text)) == ["fused_moe_kernel"] * 4 + [
        "grouped_matmul_dw_rows_kernel"] * 2


@pytest.mark.parametrize("mesh", ["model=2", "data=2"])
def test_train_compare_on_a_mesh_runs_the_partitioned_choices_and_they_agree(tmp_path, mesh):
    """``train.py --ops compare --mesh ...`` (2 CPU devices, a child process): ``tritonplug``'s kernels are not
    partitioned, so compare runs the choices that work on a mesh, and their curves agree, with the experts
    split over ``model`` or, on a data-parallel mesh, over ``data``, by capacity buffers or the ragged exchange."""
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "moe" / "train.py"), "--config", "tiny", "--ops",
                           "compare", "--mesh", mesh, "--steps", "2", "--json", str(out)],
                          env=cpu_devices_env(2, TRITONPLUG_INTERPRET_CHECK="0"), capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    axis, size = mesh.split("=")
    assert report["mesh"] == {"data": 1, "model": 1, axis: int(size)}
    assert list(report["runs"]) == ["jax", "jax-dense", "tritonplug-ep", "tritonplug-ep-ragged"]
    assert report["max_loss_difference"] < 1e-3


def test_the_experts_axis_is_model_unless_the_mesh_is_data_parallel():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from jax.sharding import PartitionSpec as P

    from examples.moe import model

    def Mesh(data, model):  # noqa: N802 (shapes this process has no devices for: an abstract mesh)
        return jax.sharding.AbstractMesh((data, model), ("data", "model"))

    assert model.expert_axis(None) == "model" and model.expert_axis(Mesh(1, 1)) == "model"
    assert model.expert_axis(Mesh(2, 2)) == "model" and model.expert_axis(Mesh(1, 4)) == "model"
    assert model.expert_axis(Mesh(4, 1)) == "data" and model.expert_axis(Mesh(2, 1)) == "data"
    assert model.param_specs(Mesh(4, 1))["w_down"] == P(None, "data", None, None)
    assert model.param_specs(Mesh(2, 2))["w_gate_up"] == model.PARAM_SPECS["w_gate_up"]
