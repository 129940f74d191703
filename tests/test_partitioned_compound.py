"""Compound factors ``(a b)`` in rules (issue 39, item 4): grouped heads split by their kv heads, heads flattened
into a result's dimension, on 8 CPU devices under Shardy, GSPMD and explicit axes.

``compound_suite.py`` runs every case in one child process; each is checked against NumPy (through ``jnp``) and
the same function on one device, the factors the call split, and the compiled program's collectives: none
beyond the rule's (a rule that keeps a factor whole costs one all-gather where it arrives split).
"""

from __future__ import annotations

import pytest
from helpers import requires_backend, run_sharding_suite

pytestmark = requires_backend("interpret")

#: case → (the factors split, each with its mesh axes; the collectives the compiled program holds)
CASES = {
    "grouped/heads": ([["k", ["x"]]], []),
    "grouped/batch_y_heads_x": ([["b", ["y"]], ["k", ["x"]]], []),
    "grouped/k_and_g": ([["g", ["y"]], ["k", ["x"]]], []),  # k in pieces of one, then g
    "global_heads/heads": ([["k", ["x"]]], []),  # shard_offset('k') in kv heads
    "global_heads/k_and_g": ([["g", ["y"]], ["k", ["x"]]], []),  # and shard_offset('g') in group members
    "merge/heads": ([["h", ["x"]]], []),
    "merge/seq_x_heads_y": ([["h", ["y"]], ["s", ["x"]]], []),
    "merge/minor_gathered": ([], ["all-gather"]),  # d alone cannot split (h d): gathered
}


@pytest.fixture(scope="module")
def report():
    return run_sharding_suite("compound_suite.py", "all")


@pytest.mark.parametrize("mode", ["shardy", "gspmd", "explicit"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_compound_factor_splits_as_its_rule_says_and_computes_the_unsharded_result(report, mode, case):
    entry = report[f"{mode}/{case}"]
    assert entry["ok"], f"{mode} {case}: {entry.get('error')}\n{entry.get('trace', '')}"
    factors, collectives = CASES[case]
    assert entry["factors"] == factors, f"{mode} {case}: split {entry['factors']}"
    assert entry["correct"] and entry["same_as_one_device"], f"{mode} {case}: wrong result"
    assert entry["collectives"] == collectives, f"{mode} {case}: {entry['collectives']}"
