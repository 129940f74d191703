"""Partitioned launchers (``tritonplug.partitioned``) on 8 CPU devices, under Shardy, GSPMD and explicit axes.

Eight CPU devices exist only if XLA_FLAGS is set before JAX starts, so ``sharding_suite.py`` runs in a child
process per mode and prints one JSON report; each test here asserts on its cases: the result against a ``jnp``
reference and against the same function on one device, the collectives in the compiled program (none where
the rule keeps every split factor split; an all-gather where it keeps one whole; an all-reduce where a
reduction factor is split) and the results' shardings. The same suite runs on GPUs (``bench/results/``).
"""

from __future__ import annotations

import pytest
from helpers import requires_backend, run_sharding_suite

pytestmark = requires_backend("interpret")

MODES = ("shardy", "gspmd", "explicit")


def _run_suite(mode: str) -> dict:
    return run_sharding_suite("sharding_suite.py", mode)


@pytest.fixture(scope="module", params=MODES)
def report(request):
    return _run_suite(request.param)


def ran(report: dict, case: str) -> dict:
    entry = report[case]
    assert entry["ok"], f"{report['mode']} {case}: {entry.get('error')}\n{entry.get('trace', '')}"
    assert entry["correct"], f"{report['mode']} {case}: differs from the jnp reference"
    assert entry["same_as_one_device"], f"{report['mode']} {case}: differs from the same call on one device"
    return entry


#: case → (collectives the compiled program may have, each result's sharding or None where the partitioner
#: may choose). Every split factor stays split: no all-gather unless the rule keeps a split factor whole.
CASES = {
    "add_flat/x": ((), [["x"]]),
    "add_rows/rows": ((), [["x"]]),
    "add_rows/cols": ((), [[None, "y"]]),
    "add_rows/2d_mesh": ((), [["x", "y"]]),
    "add_rows/both_axes_on_rows": ((), [[["x", "y"]]]),
    "add_rows/keyword_operands": ((), [["x"]]),
    "add_rows/out_shardings_flow_back": ((), [["x"]]),
    "add_rows/uneven_rows_gathered": ((), [[None, "x"]]),
    "rms_norm/rows": ((), [["x"], ["x"]]),
    "rms_norm/3d_batch_and_seq": ((), [["x", "y"], ["x", "y"]]),
    "rms_norm/bf16": ((), [["x"], ["x"]]),
    "column_sum/cols": ((), [["y"]]),
    "rope/batch": ((), [["x"]]),
    "rope/heads": ((), [[None, "y"]]),
    "rope/batch_and_heads": ((), [["x", "y"]]),
    "attention/heads": ((), [[None, "x"]]),
    "attention/batch_heads_causal": ((), [["y", "x"]]),
    "vmap/add_rows_batch_split": ((), [["x"]]),
    "vmap/add_rows_rows_split": ((), [[None, "x"]]),
    "vmap/one_operand_batched": ((), None),
    "scan_checkpoint/rows": ((), [["x"]]),
    "donation/add_rows": ((), [["x"]]),
    "add_rows/operands_disagree": (("all-to-all", "collective-permute", "all-gather"), [["x"]]),
    "add_rows/one_sharded_one_local": ((), [["x"]]),
    # two operands split one factor over different axes (test_the_first_operand_decides_...): where the result
    # lands is the partitioner's (Shardy leaves it replicated, GSPMD and explicit axes split it as the call ran)
    "add_rows/rows_split_differently_x_first": (("all-to-all", "collective-permute", "all-gather"), None),
    "add_rows/rows_split_differently_y_first": (("all-to-all", "collective-permute", "all-gather"), None),
    # a split reduction factor: the shards' partial sums are added
    "column_sum/rows_reduced": (("all-reduce",), [[]]),
    "grad_rms_norm/rows": (("all-reduce",), [["x"], []]),
    "grad_rms_norm/2d_mesh_3d": (("all-reduce",), [["x", "y"], []]),
    "grad_scan_checkpoint/rows": (("all-reduce",), [["x"], []]),
}
AUTO_ONLY = {"add_rows/constraint_flows_back": ((), [["x", "y"]])}


def _trimmed(spec: list) -> list:
    """A spec without trailing unsplit dimensions (explicit axes print them, automatic ones do not)."""
    spec = list(spec)
    while spec and spec[-1] is None:
        spec.pop()
    return spec


@pytest.mark.parametrize("case", sorted(CASES) + sorted(AUTO_ONLY))
def test_partitioned_call_matches_the_unsharded_call(report, case):
    if case in AUTO_ONLY and report["mode"] == "explicit":
        pytest.skip("automatic axes only: explicit axes carry a result's sharding in its type (reshard moves it)")
    allowed, specs = {**CASES, **AUTO_ONLY}[case]
    entry = ran(report, case)
    assert set(entry["collectives"]) <= set(allowed), f"{case}: unexpected collectives {entry['collectives']}"
    if allowed and allowed[0] == "all-reduce":
        assert "all-reduce" in entry["collectives"], f"{case}: a split reduction factor needs its partial sums added"
    if specs is not None:
        assert [_trimmed(s) for s in entry["out_specs"]] == specs


def test_a_factor_kept_whole_is_gathered_and_its_cost_recorded(report):
    entry = ran(report, "rms_norm/normalised_axis_gathered")
    assert "all-gather" in entry["collectives"] or "all-to-all" in entry["collectives"]
    # x (64x48 f32) arrived split along d over 8 devices; gathered, each device holds it whole: 12288 bytes
    assert ["x", ["d"], 64 * 48 * 4] in entry["transfers"], entry["transfers"]
    assert ran(report, "rms_norm/rows")["transfers"] == []


def test_an_unpartitioned_call_names_the_decorator_and_a_rule(report):
    error = report["refuse/unpartitioned"]["error"]
    assert error.startswith("ValueError") and "@tritonplug.partitioned" in error
    assert "'a b, a b -> a b'" in error and "need_replication" in error and "add_rows_kernel" in error


@pytest.mark.parametrize("case, words", [
    ("refuse/arity", ["1 operand group", "2 array operand", "(x, y)"]),
    ("refuse/rank", ["operand 1 (y)", "rank 2", "'c'"]),
    ("refuse/two_sizes", ["factor 'c' has two sizes", "48 in operand 0 (x)", "32 in operand 1 (y)"]),
    ("refuse/unknown_factor", ["need_replication", "['d']"]),
])
def test_a_rule_that_does_not_fit_is_refused_naming_the_operand(report, case, words):
    error = report[case]["error"]
    assert error.startswith("ValueError"), error
    for word in words:
        assert word in error, f"{word!r} not in {error!r}"


def test_a_mesh_mixing_explicit_and_automatic_axes_is_refused(report):
    error = report["refuse/mixed_axis_types"]["error"]
    assert error.startswith("NotImplementedError") and "mixes explicit axes ['x'] and automatic ones ['y']" in error


def test_decisions_are_recorded_for_inspection(report):
    path = "shard_map" if report["mode"] == "explicit" else "custom_partitioning"
    assert report["partitions"] and all(p["path"] == path for p in report["partitions"])
    assert any(p["factors"] for p in report["partitions"])


@pytest.mark.parametrize(("case", "axis"), [("add_rows/rows_split_differently_x_first", "x"),
                                            ("add_rows/rows_split_differently_y_first", "y")])
def test_the_first_operand_decides_a_factor_two_operands_split_differently(report, case, axis):
    """Both operands split the rows, over mesh axes x and y, one way round and the other: the call runs with the
    rows split as the first operand (``x``) has them, and the second (``y``) is the one moved (docs/partitioned.md)."""
    entry = ran(report, case)
    assert entry["decisions"] and all(d == [["r", [axis]]] for d in entry["decisions"]), entry["decisions"]
    assert [t[:2] for t in entry["transfers"]] == [["y", ["r"]]], entry["transfers"]
