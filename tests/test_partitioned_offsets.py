"""``tritonplug.shard_offset``: a partitioned kernel that takes a global index, split along it.

The sharded cases run on 8 CPU devices in a child process per mode (``offset_suite.py``: Shardy, GSPMD, explicit
axes); each is checked against a ``jnp`` reference and the same function on one device, and the factors the
call split are checked too (an unsplit factor's offset is 0, so a case that was not split would prove nothing).
The one-device cases and the refusals run here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import offset_kernels as ok
import pytest
from helpers import requires_backend, run_sharding_suite
from jax.sharding import PartitionSpec as P

import tritonplug

pytestmark = requires_backend("interpret")

MODES = ("shardy", "gspmd", "explicit")


@pytest.fixture(scope="module", params=MODES)
def report(request):
    return run_sharding_suite("offset_suite.py", request.param)


def ran(report: dict, case: str, factors: list) -> dict:
    entry = report[case]
    assert entry["ok"], f"{report['mode']} {case}: {entry.get('error')}\n{entry.get('trace', '')}"
    assert entry["factors"] == factors, f"{report['mode']} {case}: split {entry['factors']}, meant {factors}"
    assert entry["correct"], f"{report['mode']} {case}: differs from the jnp reference"
    assert entry["same_as_one_device"], f"{report['mode']} {case}: differs from the same call on one device"
    return entry


#: case → the factors the call splits, each with its mesh axes (major to minor)
POSITIONS = {
    "positions/2_devices": [["n", ["x"]]],
    "positions/4_devices": [["n", ["x"]]],
    "positions/8_devices": [["n", ["x"]]],
    "positions/two_axes_xy": [["n", ["x", "y"]]],
    "positions/two_axes_yx": [["n", ["y", "x"]]],
    "positions/rows_x_cols_y": [["b", ["x"]], ["n", ["y"]]],
    "positions/rows_y_cols_x": [["b", ["y"]], ["n", ["x"]]],
    "positions/vmap": [["n", ["x"]]],
}
CROSS_ENTROPY = {
    "cross_entropy/vocab": [["v", ["x"]]],
    "cross_entropy/rows_x_vocab_y": [["b", ["x"]], ["v", ["y"]]],
    "cross_entropy/vocab_two_axes": [["v", ["x", "y"]]],
}
ROPE = {
    "rope/seq": [["s", ["x"]]],
    "rope/batch_y_seq_x": [["b", ["y"]], ["s", ["x"]]],
    "rope/seq_two_axes": [["s", ["x", "y"]]],
}


@pytest.mark.parametrize("case", sorted(POSITIONS))
def test_offset_plus_local_index_is_the_global_position(report, case):
    entry = ran(report, case, POSITIONS[case])
    assert entry["collectives"] == [] and entry["transfers"] == [], entry


def test_a_factor_the_rule_keeps_whole_is_gathered_and_its_offset_is_zero(report):
    entry = ran(report, "positions/kept_whole", [])
    assert entry["transfers"] == [["x", ["n"], 4 * 64 * 4]], entry["transfers"]  # x gathered along n


@pytest.mark.parametrize("case", sorted(CROSS_ENTROPY))
def test_vocabulary_parallel_cross_entropy(report, case):
    entry = ran(report, case, CROSS_ENTROPY[case])
    # the logits stay split: nothing is gathered, the per-row partial sums (and the row max) are all-reduced
    assert entry["transfers"] == [], entry["transfers"]
    assert "all-reduce" in entry["collectives"], entry["collectives"]
    assert not {"all-gather", "all-to-all"} & set(entry["collectives"]), entry["collectives"]


@pytest.mark.parametrize("case", sorted(ROPE))
def test_sequence_parallel_rope(report, case):
    entry = ran(report, case, ROPE[case])
    assert entry["collectives"] == [] and entry["transfers"] == [], entry


def test_on_one_device_the_offset_is_zero():
    x = np.zeros((3, 40), np.float32)
    want = np.broadcast_to(np.arange(40, dtype=np.int32), x.shape)
    np.testing.assert_array_equal(ok.positions(x), want)
    np.testing.assert_array_equal(jax.jit(ok.positions)(x), want)
    rng = np.random.default_rng(1)
    logits, target = rng.standard_normal((8, 100)).astype(np.float32) * 3, rng.integers(0, 100, 8).astype(np.int32)
    np.testing.assert_allclose(jax.jit(ok.vocab_parallel_cross_entropy)(logits, target),
                               ok.cross_entropy_reference(logits, target), rtol=1e-5)
    q = rng.standard_normal((1, 24, 2, 8)).astype(np.float32)
    np.testing.assert_allclose(ok.rope_positions(q), ok.rope_reference(q), rtol=1e-5, atol=1e-5)


def test_inside_the_function_the_offset_is_an_int32_scalar():
    seen = []

    @tritonplug.partitioned("b n -> b n")
    def probe(x):
        seen.append(jax.typeof(tritonplug.shard_offset("n")))
        return x

    probe(np.zeros((2, 4), np.float32))
    assert seen and all(t.shape == () and t.dtype == jnp.int32 for t in seen), seen


def test_outside_a_partitioned_function_it_is_refused():
    with pytest.raises(ValueError, match=r"shard_offset\(factor='v'\) is called outside a partitioned function.*"
                                         r"@tritonplug.partitioned"):
        tritonplug.shard_offset("v")
    with pytest.raises(ValueError, match="outside a partitioned function"):
        jax.jit(lambda x: x + tritonplug.shard_offset("v"))(np.zeros(4, np.int32))


def test_a_factor_the_rule_does_not_name_is_refused_naming_the_rules_factors():
    @tritonplug.partitioned("b n, ... d -> b n")
    def wrong(x, y):
        return x + tritonplug.shard_offset("v").astype(x.dtype)

    x, y = np.zeros((2, 4), np.float32), np.zeros((3, 5), np.float32)
    with pytest.raises(ValueError, match=r"shard_offset\(factor='v'\) in partitioned wrong: the rule names no factor "
                                         r"'v'; its factors are \['b', 'n', 'd'\]"):
        wrong(x, y)
    with pytest.raises(ValueError, match=r"factor='\.\.\.'.*its factors are \['b', 'n', 'd'\]"):
        tritonplug.partitioned("b n, ... d -> b n")(lambda a, b: a + tritonplug.shard_offset("..."))(x, y)
    with pytest.raises(TypeError, match=r"shard_offset: factor is the name of a factor.*got int: 0"):
        tritonplug.partitioned("b n -> b n")(lambda a: a + tritonplug.shard_offset(0))(x)


def test_a_vmap_batch_factor_is_not_the_users_to_ask():
    @tritonplug.partitioned("b n -> b n")
    def asks_batch(x):
        return x + tritonplug.shard_offset("vmap0").astype(x.dtype)

    with pytest.raises(ValueError, match=r"names no factor 'vmap0'; its factors are \['b', 'n'\]"):
        jax.vmap(asks_batch)(np.zeros((3, 2, 4), np.float32))


@pytest.mark.parametrize("kind", ["Auto", "Explicit"])
def test_inside_the_users_shard_map_it_is_refused_naming_axis_index(kind):
    mesh = jax.make_mesh((1,), ("x",), axis_types=(getattr(jax.sharding.AxisType, kind),), devices=jax.devices()[:1])

    @tritonplug.partitioned("n -> n")
    def shifted(x):
        return x + tritonplug.shard_offset("n").astype(x.dtype)

    mapped = jax.jit(jax.shard_map(shifted, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    x = jax.device_put(np.zeros(8, np.float32), jax.sharding.NamedSharding(mesh, P("x")))
    with jax.set_mesh(mesh), pytest.raises(ValueError, match=r"inside a jax.shard_map.*jax.lax.axis_index"):
        mapped(x)
