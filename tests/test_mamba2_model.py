"""The Mamba-2 example (``examples/mamba2``): its pieces (the causal convolution, the gated norm, the mixer's
causality), the tiny model training with the ``jax`` SSD, and the ``tritonplug`` SSD (mamba-ssm's kernels through
tritonplug, ``examples/ports/mamba_ssd.py``) against the ``jax`` one in the mixer's value and gradient and in
``train.py --ops compare``'s losses (mamba-ssm's source must be importable: tox's corpus env fetches it)."""

from __future__ import annotations

import numpy as np
import pytest


def _mixer_inputs(dtype, seq=40):
    import jax

    from examples.mamba2 import block
    from examples.mamba2.config import CONFIGS

    cfg = CONFIGS["tiny"].replace(layers=1, seq=seq)
    p = jax.tree.map(lambda a: a[0], block.init_layers(cfg, jax.random.key(1)))
    p = {k: v if k in block.FP32_PARAMS else v.astype(dtype) for k, v in p.items()}
    h = jax.random.normal(jax.random.key(2), (2, seq, cfg.hidden), dtype)
    return cfg, p, h


def _mixer(cfg, choice):
    from examples.llama.ops import rms_norm_jax
    from examples.mamba2 import block

    return lambda h, p: block.mixer(h, p, cfg, block.SSD[choice], rms_norm_jax)


def test_causal_conv_is_numpys_convolution_over_the_past():
    import jax

    from examples.mamba2.block import causal_conv

    x = np.asarray(jax.random.normal(jax.random.key(0), (2, 9, 3)))
    w = np.asarray(jax.random.normal(jax.random.key(1), (4, 3)))
    b = np.asarray([0.5, -1.0, 2.0])
    got = np.asarray(causal_conv(x, w, b))
    want = np.stack([np.stack([np.convolve(x[i, :, c], w[::-1, c])[:9] + b[c] for c in range(3)], -1)
                     for i in range(2)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_gated_norm_normalises_each_group_of_channels():
    import jax
    import jax.numpy as jnp

    from examples.llama.ops import rms_norm_jax
    from examples.mamba2.block import gated_norm

    cfg, _, _ = _mixer_inputs(jnp.float32)  # groups 2 over inner 64
    y, z = (jax.random.normal(k, (1, 3, cfg.inner)) for k in jax.random.split(jax.random.key(4)))
    y = y.at[..., : cfg.inner // 2].multiply(100.0)  # one group far larger: normalised on its own
    out = np.asarray(gated_norm(y, z, jnp.ones(cfg.inner), cfg, rms_norm_jax))
    g = np.asarray(y * jax.nn.silu(z)).reshape(1, 3, 2, -1)
    want = g / np.sqrt(np.mean(g * g, axis=-1, keepdims=True) + cfg.eps)
    np.testing.assert_allclose(out, want.reshape(out.shape), rtol=1e-5, atol=1e-5)


def test_the_mixer_is_causal():
    """Changing the inputs from step 25 on leaves every output before step 25 as it was, and changes some after
    (the convolution looks back only, the SSD's padding and chunks leak nothing backwards)."""
    import jax.numpy as jnp

    cfg, p, h = _mixer_inputs(jnp.float32)
    f = _mixer(cfg, "jax")
    before, after = np.asarray(f(h, p)), np.asarray(f(h.at[:, 25:].add(1.0), p))
    np.testing.assert_array_equal(before[:, :25], after[:, :25])
    assert np.max(np.abs(before[:, 25:] - after[:, 25:])) > 1e-3


@pytest.mark.parametrize("choice", ["jax", "tritonplug"])
def test_packed_sequences_are_each_mixed_as_if_alone(choice):
    """``seq_idx``: three sequences packed in a row of 40 steps (chunks of 16: one starts inside the first chunk,
    one inside the third) give, step for step, what the mixer gives each sequence alone: the convolution reads no
    step of the sequence before, and the SSD's state restarts."""
    import jax
    import jax.numpy as jnp

    from examples.llama.ops import rms_norm_jax
    from examples.mamba2 import block

    cfg, p, h = _mixer_inputs(jnp.float32)
    h = h[:1]
    bounds = [0, 13, 33, 40]
    seq_idx = jnp.asarray(np.repeat(np.arange(3), np.diff(bounds))[None], jnp.int32)
    mix = jax.jit(lambda h, p, s: block.mixer(h, p, cfg, block.SSD[choice], rms_norm_jax, seq_idx=s))
    packed = np.asarray(mix(h, p, seq_idx))
    pieces = zip(bounds[:-1], bounds[1:], strict=True)
    alone = np.concatenate([np.asarray(_mixer(cfg, choice)(h[:, a:b], p)) for a, b in pieces], axis=1)
    np.testing.assert_allclose(packed, alone, rtol=2e-4, atol=2e-4 * float(np.max(np.abs(alone))))
    assert np.max(np.abs(packed - np.asarray(_mixer(cfg, choice)(h, p)))) > 1e-2  # without seq_idx: another result


def test_the_tiny_model_learns_with_the_jax_ssd(tmp_path):
    from examples.mamba2 import train

    report = train.main(["--config", "tiny", "--ops", "jax", "--steps", "30", "--json", str(tmp_path / "r.json")])
    losses = report["runs"]["jax"]["losses"]
    assert len(losses) == 30 and all(np.isfinite(losses))
    assert abs(losses[0] - np.log(report["config"]["vocab"])) < 0.3  # a fresh model, near ln(vocab)
    assert np.mean(losses[-5:]) < losses[0] - 0.15, losses


def test_choices_and_configs_are_checked():
    from examples.mamba2.config import CONFIGS
    from examples.mamba2.model import Mamba2Ops

    with pytest.raises(ValueError, match="--ops: 'triton'; expected one of"):
        Mamba2Ops("triton")
    with pytest.raises(ValueError, match="heads=5 must divide expand \\* hidden = 64"):
        CONFIGS["tiny"].replace(heads=5)
    with pytest.raises(ValueError, match="groups=3 must divide heads=4"):
        CONFIGS["tiny"].replace(groups=3)


def test_without_the_port_the_tritonplug_choice_names_it(monkeypatch):
    """The port's module missing (here: a name that is no module) is an error naming it, not some other error."""
    import jax.numpy as jnp

    from examples.mamba2 import block

    monkeypatch.setattr(block, "PORT_MODULE", "examples.ports.no_such_port")
    cfg, p, h = _mixer_inputs(jnp.float32)
    with pytest.raises(ModuleNotFoundError, match="needs examples.ports.no_such_port"):
        _mixer(cfg, "tritonplug")(h, p)


@pytest.mark.parametrize("dtype, tol", [("float32", 2e-4), ("bfloat16", 3e-2)])
def test_the_tritonplug_mixer_matches_the_jax_one_in_value_and_gradient(dtype, tol):
    import jax
    import jax.numpy as jnp

    cfg, p, h = _mixer_inputs(jnp.dtype(dtype))
    cot = jax.random.normal(jax.random.key(9), h.shape, h.dtype)

    def run(h, p, choice):
        out, vjp = jax.vjp(_mixer(cfg, choice), h, p)
        return out, vjp(cot)

    got, want = (jax.jit(run, static_argnums=2)(h, p, c) for c in ("tritonplug", "jax"))
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), strict=True):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(b)))),
                                   err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("config, tol, extra", [("tiny", 1e-3, []), ("tiny-bf16", 5e-2, []),
                                               ("tiny", 1e-3, ["--documents", "12"])])
def test_train_compare_the_two_choices_agree(config, tol, extra, tmp_path):
    from examples.mamba2 import train

    report = train.main(["--config", config, "--ops", "compare", "--steps", "4", "--json", str(tmp_path / "r.json"),
                         *extra])
    assert report["config"]["documents"] == (12 if extra else 0)
    runs = report["runs"]
    assert set(runs) == {"jax", "tritonplug"}
    for run in runs.values():
        assert len(run["losses"]) == 4 and all(np.isfinite(run["losses"]))
    assert report["max_loss_difference"] < tol


def test_packed_documents_begin_with_bos_and_have_their_mean_length():
    from examples.llama.data import BOS, MarkovText

    tokens, targets = MarkovText(256, seed=3, documents=12).batch(64, 96)
    np.testing.assert_array_equal(tokens[:, 1:], targets[:, :-1])
    assert (tokens[:, 0] == BOS).all()  # every row begins a document
    starts = np.flatnonzero(tokens.reshape(-1) == BOS)
    assert 9 < tokens.size / len(starts) < 15  # geometric lengths of mean 12 (8,000 draws' worth)
    plain, _ = MarkovText(256, seed=3).batch(64, 96)
    assert not (plain[:, 0] == BOS).all()  # without documents: no BOS at each row's start


@pytest.mark.parametrize("choice", ["jax", "tritonplug"])
def test_a_packed_rows_documents_are_each_modelled_as_if_alone(choice):
    """``documents``: the model reads its documents' bounds from the BOS tokens (``seq_idx``), so the hidden states
    of a row's second document equal those of that document alone (the first's steps neither convolved nor carried
    in the state), in the model's two layers; without ``documents`` they differ."""
    import jax
    import jax.numpy as jnp

    from examples.llama.data import BOS
    from examples.mamba2 import model
    from examples.mamba2.config import CONFIGS

    cfg = CONFIGS["tiny"].replace(documents=20)
    params = model.init(cfg, jax.random.key(0))
    rng = np.random.default_rng(1)
    first, second = (rng.integers(1, cfg.vocab, size=n).astype(np.int32) for n in (13, 27))
    row = np.concatenate([[BOS], first, [BOS], second])[None]
    alone = np.concatenate([[BOS], second])[None]
    hidden = jax.jit(lambda t, cfg: model.hidden_states(params, t, cfg, model.Mamba2Ops(choice)), static_argnums=1)
    packed, by_itself = np.asarray(hidden(jnp.asarray(row), cfg)), np.asarray(hidden(jnp.asarray(alone), cfg))
    np.testing.assert_allclose(packed[:, 14:], by_itself, rtol=2e-4, atol=2e-4)
    unpacked = np.asarray(hidden(jnp.asarray(row), cfg.replace(documents=0)))
    assert np.max(np.abs(unpacked[:, 14:] - by_itself)) > 1e-2
