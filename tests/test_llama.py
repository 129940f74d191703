"""The Llama-style model of ``examples/llama``: each swapped op's value and gradients against its ``jax`` op,
and ``train.py --ops compare``: both op choices trained from one init on one data stream, their loss curves
agreeing and falling.

Needs optax and the pinned kernel libraries (liger-kernel 0.8.5, fla-core 0.6.0, ``--no-deps``), which the
``cpu`` tox env installs.
"""

from __future__ import annotations

import importlib.machinery
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import load_bench

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_MISSING = [p for p in ("optax", "liger_kernel", "fla") if importlib.machinery.PathFinder.find_spec(p) is None]
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=f"{_MISSING} not installed (tox -e cpu installs them)")


def _inputs(op: str, dtype):
    import jax
    import jax.numpy as jnp

    keys = iter(jax.random.split(jax.random.key(7), 8))

    def rnd(*shape):
        return jax.random.normal(next(keys), shape, jnp.float32).astype(dtype)

    b, t, h, hkv, d = 2, 16, 4, 2, 16
    if op == "rms_norm":
        return (rnd(b, t, 64), 1.0 + 0.1 * rnd(64)), {"eps": 1e-5}
    if op == "rope":
        from examples.llama.config import CONFIGS
        from examples.llama.model import rope_tables

        cos, sin = rope_tables(CONFIGS["tiny"].replace(seq=t, hidden=h * d, heads=h))
        return (rnd(b, t, h, d), rnd(b, t, hkv, d)), {"cos": cos, "sin": sin}
    if op == "swiglu":
        return (rnd(b, t, 48), rnd(b, t, 48)), {}
    if op == "attention":
        return (rnd(b, t, h, d), rnd(b, t, hkv, d), rnd(b, t, hkv, d)), {}
    if op == "loss":
        targets = jax.random.randint(next(keys), (b * t,), 0, 200)
        return (rnd(b * t, 32), 0.5 * rnd(200, 32)), {"targets": targets}
    raise AssertionError(op)


def _scalar(fn, kwargs, cotangent_key=3):
    import jax
    import jax.numpy as jnp

    def f(*args):
        out = fn(*args, **kwargs)
        leaves = jax.tree.leaves(out)
        weights = [jax.random.normal(jax.random.fold_in(jax.random.key(cotangent_key), i), x.shape, jnp.float32)
                   for i, x in enumerate(leaves)]
        return sum(jnp.sum(x.astype(jnp.float32) * w) for x, w in zip(leaves, weights, strict=True))
    return f


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", ["rms_norm", "rope", "swiglu", "attention", "loss"])
def test_each_swapped_op_matches_the_jax_op_in_value_and_gradient(op, dtype):
    import jax
    import jax.numpy as jnp

    from examples.llama.ops import IMPLEMENTATIONS

    args, kwargs = _inputs(op, jnp.dtype(dtype))
    ours, theirs = IMPLEMENTATIONS[op]["tritonplug"], IMPLEMENTATIONS[op]["jax"]
    tol = {"float32": 2e-4, "bfloat16": 3e-2}[dtype]
    # both sides jitted: one compile each, where the jax op run eagerly would compile every jnp primitive alone
    got, want = jax.jit(lambda *a: ours(*a, **kwargs))(*args), jax.jit(lambda *a: theirs(*a, **kwargs))(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(np.float32(g), np.float32(w), rtol=tol, atol=tol, err_msg=f"{op} value")
    argnums = tuple(range(len(args)))
    got = jax.jit(jax.grad(_scalar(ours, kwargs), argnums=argnums))(*args)
    want = jax.jit(jax.grad(_scalar(theirs, kwargs), argnums=argnums))(*args)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        scale = float(np.max(np.abs(np.float32(w)))) or 1.0
        np.testing.assert_allclose(np.float32(g), np.float32(w), rtol=tol, atol=tol * scale,
                                   err_msg=f"{op} gradient of argument {i}")


def _train(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "llama" / "train.py"), *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == json.loads(out.read_text())
    return report


def test_train_compare_agrees_and_learns(tmp_path):
    """Both curves from the same init and batches, in bf16: within bf16 rounding of each other, and falling. (Each
    op's fp32 values and gradients are compared above, tightly.) ``--profile`` traces each choice's last step."""
    steps, tolerance = 8, 5e-2
    report = _train(tmp_path, "--config", "tiny-bf16", "--ops", "compare", "--steps", str(steps),
                    "--profile", str(tmp_path / "trace"))
    runs = report["runs"]
    assert set(runs) == {"jax", "tritonplug"}
    assert all(set(r["ops"].values()) == {name} for name, r in runs.items())
    a, b = (np.asarray(runs[k]["losses"]) for k in ("jax", "tritonplug"))
    assert len(a) == len(b) == steps and np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    np.testing.assert_allclose(b, a, rtol=tolerance, err_msg="the two op choices' losses, step by step")
    assert report["max_loss_difference"] == pytest.approx(float(np.max(np.abs(a - b))))
    for name, losses in (("jax", a), ("tritonplug", b)):
        assert losses[-3:].mean() < losses[:3].mean() - 0.05, f"{name} did not learn: {losses}"
        assert runs[name]["tokens_per_s"] > 0 and runs[name]["plan_bytes"] > 0
        traced = load_bench("_profile").kernels_in(str(tmp_path / "trace" / name))  # its last step
        assert sum(k["us"] for k in traced) > 0


def test_ops_choice_is_checked():
    from examples.llama.ops import Ops

    assert Ops.parse("jax,loss=tritonplug").choice["loss"] == "tritonplug"
    with pytest.raises(ValueError, match="unknown op"):
        Ops.parse("jax,norm=tritonplug")
    with pytest.raises(ValueError, match="expected one of"):
        Ops.parse("torch")
