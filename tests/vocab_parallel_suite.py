"""The Llama example's vocabulary-parallel loss (``examples/llama/vocab_parallel.py``) on every device this process
sees, printed as one JSON report (``REPORT {...}``): run by ``tests/test_llama_vocab_parallel.py`` in a child on 8
CPU devices (a (data=2, model=4) mesh), or directly on a GPU machine with 8 GPUs.

Cases: the op against a ``jnp`` cross entropy of the whole logits (fp32 and bf16; values and gradients); the tiny
fp32 model's loss and every parameter's gradient under the mesh against the unsharded ``jax`` choice; the
compiled training step's collectives (the parent asserts on their shapes) for the ``tritonplug`` loss, and for
today's Liger loss given a split output projection (which must gather it: the assertion's control).
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examples.llama import model, step, vocab_parallel  # noqa: E402
from examples.llama.config import CONFIGS  # noqa: E402
from examples.llama.ops import Ops  # noqa: E402
from tritonplug import inspection  # noqa: E402

REPORT: dict = {}
CASES: list = []
MESH = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
#: the issue's layout, data=2,model=2: the tiny config's 2 key/value heads split over ``model`` (the RoPE and
#: attention ports' rules keep a head whole)
MESH_2X2 = jax.make_mesh((2, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2,
                         devices=jax.devices()[:4])


def case(fn):
    CASES.append(fn)
    return fn


def run(fn) -> None:
    try:
        REPORT[fn.__name__] = {"ok": True, **(fn() or {})}
    except Exception as exc:  # noqa: BLE001 - recorded for the parent, which fails naming the case
        REPORT[fn.__name__] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:4000],
                               "trace": traceback.format_exc()[-4000:]}


def whole_logits_loss(h, w, target, ignore_index=-100):
    """The reference: the (tokens, vocab) logits whole, in fp32, their mean negative log-likelihood."""
    logits = jnp.einsum("th,vh->tv", h.astype(jnp.float32), w.astype(jnp.float32))
    keep = target != ignore_index
    picked = jnp.take_along_axis(logits, jnp.where(keep, target, 0)[:, None], axis=1)[:, 0]
    nll = jax.scipy.special.logsumexp(logits, axis=-1) - picked
    return jnp.sum(jnp.where(keep, nll, 0.0)) / jnp.sum(keep)


def _close(got, want, rtol, atol, what):
    for name, g, w in zip(("loss", "d h", "d w"), jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=rtol, atol=atol,
                                   err_msg=f"{what}: {name}")


def _op(dtype, rtol, atol):
    tokens, hidden, vocab = 72, 32, 256  # 36 rows per data shard: chunks of 16 leave a ragged one
    kh, kw, kt = jax.random.split(jax.random.key(3), 3)
    h = jax.random.normal(kh, (tokens, hidden), jnp.float32).astype(dtype)
    w = (0.5 * jax.random.normal(kw, (vocab, hidden), jnp.float32)).astype(dtype)
    # every block's first and last ids (0, 63, 64, ..., 255) among the targets, and ignored rows
    edges = jnp.array([0, 63, 64, 127, 128, 191, 192, 255], jnp.int32)
    target = jax.random.randint(kt, (tokens,), 0, vocab).at[1:9].set(edges).at[::7].set(-100)

    def loss(h, w):
        return 2.5 * vocab_parallel.vocab_parallel_cross_entropy(h, w, target, chunk_bytes=16 * 64 * h.dtype.itemsize)

    hs = jax.device_put(h, NamedSharding(MESH, P("data", None)))
    ws = jax.device_put(w, NamedSharding(MESH, P("model", None)))
    with jax.set_mesh(MESH):
        got = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(hs, ws)
    want = jax.value_and_grad(lambda h, w: 2.5 * whole_logits_loss(h, w, target), argnums=(0, 1))(h, w)
    assert got[1][0].dtype == h.dtype and got[1][1].dtype == w.dtype
    assert got[1][1].sharding.is_equivalent_to(ws.sharding, 2), got[1][1].sharding  # d w stays split
    _close(got, want, rtol, atol, f"op {dtype.__name__}")
    assert float(jnp.max(jnp.abs(got[1][0][::7]))) == 0.0  # ignored rows get no gradient


@case
def op_fp32():
    _op(jnp.float32, 1e-5, 1e-6)


@case
def op_bf16():
    _op(jnp.bfloat16, 2e-2, 2e-3)


@case
def refusals():
    """Bad input refused at the call, naming what was expected."""
    h, target = jnp.zeros((8, 16)), jnp.zeros((8,), jnp.int32)
    said = {}
    for name, (w, t) in {"vocab_not_divided": (jnp.zeros((250, 16)), target),
                         "float_target": (jnp.zeros((256, 16)), target.astype(jnp.float32)),
                         "hidden_mismatch": (jnp.zeros((256, 8)), target)}.items():
        try:
            with jax.set_mesh(MESH):
                vocab_parallel.vocab_parallel_cross_entropy(h, w, t, chunk_bytes=1 << 20)
        except (ValueError, TypeError) as exc:
            said[name] = str(exc)
    return {"said": said}


def _sharded_params(params, specs):
    return jax.tree_util.tree_map_with_path(
        lambda path, a: jax.device_put(a, NamedSharding(MESH, specs[path[-1].key])), params)


@case
def model_gradients():
    """The tiny fp32 model: loss and every gradient under the mesh, the vocabulary-parallel loss, against the
    unsharded ``jax`` choice (one device, no mesh)."""
    cfg = CONFIGS["tiny"]
    params = model.init(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (cfg.batch, cfg.seq), 0, cfg.vocab)
    targets = jnp.roll(tokens, -1, axis=1)
    want = jax.jit(jax.value_and_grad(lambda p: model.loss(p, tokens, targets, cfg, Ops.of("jax"))))(params)
    ops = Ops.of("jax", loss="tritonplug")
    sharded = _sharded_params(params, step.specs_for(ops))
    assert sharded["lm_head"].sharding.spec == P("model", None)
    batch = NamedSharding(MESH, P("data", None))
    with jax.set_mesh(MESH):
        got = jax.jit(jax.value_and_grad(lambda p, x, y: model.loss(p, x, y, cfg, ops)))(
            sharded, jax.device_put(tokens, batch), jax.device_put(targets, batch))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, err_msg="loss")
    for path, g in jax.tree_util.tree_leaves_with_path(got[1]):
        w = want[1]
        for key in path:
            w = w[key.key]
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=f"d {jax.tree_util.keystr(path)}")
    return {"loss": float(got[0])}


def _step_collectives(ops, param_specs=None, mesh=MESH):
    cfg = CONFIGS["tiny"]
    params = model.init(cfg, jax.random.key(0))
    trainer = step.Trainer(cfg, ops, params, mesh, param_specs=param_specs)
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (cfg.batch, cfg.seq), 0, cfg.vocab))
    targets = np.roll(tokens, -1, axis=1)
    trainer.compile(tokens, targets)
    loss = trainer.step(tokens, targets)
    assert np.isfinite(loss), loss
    return {"collectives": inspection.collectives(trainer.compiled.as_text()), "loss": loss,
            "lm_head_spec": [e for e in trainer.params["lm_head"].sharding.spec]}


@case
def step_vocab_parallel():
    return _step_collectives(Ops.of("jax", loss="tritonplug"))


@case
def step_tritonplug():
    """Every op the ``tritonplug`` choice's: the ports and the vocabulary-parallel loss in one step."""
    return _step_collectives(Ops.of("tritonplug"), mesh=MESH_2X2)


@case
def step_jax():
    return _step_collectives(Ops.of("jax"))


@case
def step_liger_split_head():
    """The control: today's Liger loss (its rule keeps the vocabulary whole) given a split output projection."""
    return _step_collectives(Ops.of("jax", loss="liger"), {**step.PARAM_SPECS, "lm_head": P("model", None)})


if __name__ == "__main__":  # python tests/vocab_parallel_suite.py shardy|gspmd [case ...]
    REPORT["devices"] = len(jax.devices())
    REPORT["mode"] = sys.argv[1] if len(sys.argv) > 1 else "shardy"
    jax.config.update("jax_use_shardy_partitioner", REPORT["mode"] == "shardy")
    for fn in CASES:
        if len(sys.argv) <= 2 or fn.__name__ in sys.argv[2:]:
            run(fn)
    print("REPORT " + json.dumps(REPORT), flush=True)
