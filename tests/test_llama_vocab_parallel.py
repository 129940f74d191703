"""The Llama example's vocabulary-parallel loss (``examples/llama/vocab_parallel.py``, issue 39 item 2) on 8 CPU
devices: ``tests/vocab_parallel_suite.py`` in a child on a (data=2, model=4) mesh. Its loss and gradients against
a whole-logits ``jnp`` cross entropy and, in the tiny fp32 model, against the unsharded ``jax`` choice; the compiled
training step holding no all-gather of the output projection (whose control, today's Liger loss given the split
projection, holds one); bad input refused. On one device: the op choices and the mesh the op needs.

Needs optax and the pinned kernel libraries (liger-kernel 0.8.5, fla-core 0.6.0), as ``tests/test_llama.py``.
"""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path

import pytest
from helpers import case_ran, requires_backend, run_sharding_suite

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_MISSING = [p for p in ("optax", "liger_kernel", "fla") if importlib.machinery.PathFinder.find_spec(p) is None]
pytestmark = [requires_backend("interpret"),
              pytest.mark.skipif(bool(_MISSING), reason=f"{_MISSING} not installed (tox -e cpu installs them)")]

VOCAB, HIDDEN = 256, 64  # the tiny config's output projection, (vocab, hidden)


@pytest.fixture(scope="module")
def report() -> dict:
    return run_sharding_suite("vocab_parallel_suite.py", "shardy")


@pytest.mark.parametrize("name", ["op_fp32", "op_bf16", "model_gradients"])
def test_loss_and_gradients_match_the_whole_vocabulary(report, name):
    case_ran(report, name)


def _head_gathers(entry: dict) -> list[dict]:
    """The all-gathers whose result is the whole output projection (or its transpose), in any dtype. The embedding
    has its shape too: under Shardy (the suite's partitioner) neither is gathered; GSPMD computes the replicated
    embedding's update split and gathers it (and its moments), which this would count."""
    return [c for c in entry["collectives"] if c["op"] == "all-gather" and tuple(c["shape"][-2:]) in
            ((VOCAB, HIDDEN), (HIDDEN, VOCAB))]


@pytest.mark.parametrize("name", ["step_vocab_parallel", "step_tritonplug"])
def test_the_step_never_gathers_the_output_projection(report, name):
    entry = case_ran(report, name)
    assert entry["lm_head_spec"] == ["model", None]
    assert any(c["op"] == "all-reduce" for c in entry["collectives"])  # the collectives were read at all
    assert _head_gathers(entry) == [], _head_gathers(entry)


def test_the_control_gathers_it(report):
    """Today's loss (Liger's rule keeps the vocabulary whole) given the split projection: the assertion above
    sees the gather there, so its silence for the vocabulary-parallel step means something."""
    entry = case_ran(report, "step_liger_split_head")
    assert [c["dtype"] for c in _head_gathers(entry)] == ["f32"]


def test_every_choice_trains_the_same_first_step(report):
    """The first step's loss (before any update) of each choice under the mesh, the ``jax`` choice's with the
    projection replicated as before."""
    for name in ("step_jax", "step_liger_split_head", "step_tritonplug"):
        assert case_ran(report, name)["loss"] == pytest.approx(report["step_vocab_parallel"]["loss"], rel=1e-5)
    assert report["step_jax"]["lm_head_spec"] == [None, None]


def test_bad_input_is_refused_naming_what_is_expected(report):
    said = case_ran(report, "refusals")["said"]
    assert "the vocabulary (250) must be a multiple of the mesh's 'model' axis (4)" in said["vocab_not_divided"]
    assert "target must be integers, got float32" in said["float_target"]
    assert "want h (tokens, hidden), w (vocab, hidden)" in said["hidden_mismatch"]


def test_without_a_mesh_the_op_is_refused_and_the_choice_is_liger():
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from examples.llama import step, vocab_parallel
    from examples.llama.ops import IMPLEMENTATIONS, Ops

    with pytest.raises(ValueError, match=r"needs a mesh with a 'model' axis of size > 1 set while tracing"):
        vocab_parallel.vocab_parallel_cross_entropy(jnp.zeros((4, 8)), jnp.zeros((16, 8)), jnp.zeros(4, jnp.int32),
                                                    chunk_bytes=1024)
    assert Ops.parse("tritonplug,loss=liger").loss is IMPLEMENTATIONS["loss"]["liger"]
    with pytest.raises(ValueError, match=r"attention='liger'; expected one of \('jax', 'tritonplug'\)"):
        Ops.parse("jax,attention=liger")
    assert step.specs_for(Ops.of("tritonplug"))["lm_head"] == P("model", None)
    assert step.specs_for(Ops.of("tritonplug", loss="liger"))["lm_head"] == P(None, None)
    assert step.specs_for(Ops.of("jax"))["lm_head"] == P(None, None)
