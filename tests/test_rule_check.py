"""``tritonplug.check_rule`` (issue 39, item 3) on 8 CPU devices: every factor of a rule split alone, the result
against the unsharded call's.

``rule_check_suite.py`` runs in one child: the rules of the ports (``examples/ports``) and of the suites' kernels
must hold and be proposed back (or a finer rule that holds); a set of wrong rules, each leaving a factor the kernel
reduces over splittable, must each be flagged with that factor, and the rule proposed instead must hold;
``TRITONPLUG_CHECK_RULES=1`` refuses a wrong rule at the first call, inside a jit.
"""

from __future__ import annotations

import importlib.machinery
import re

import jax
import numpy as np
import pytest
from helpers import requires_backend, run_sharding_suite

import tritonplug

pytestmark = [
    requires_backend("interpret"),
    pytest.mark.skipif(importlib.machinery.PathFinder.find_spec("liger_kernel") is None,
                       reason="liger_kernel is not installed (tox -e corpus installs it)"),
]

#: case → the rule's keywords that must come back: (need_replication, reduction_factors)
HOLDS = {
    "port/rms_norm": (("d",), ()),
    "port/swiglu": ((), ()),
    "port/cross_entropy": (("v",), ("r",)),
    "port/rope": (("d", "r"), ()),
    "suite/rms_norm": (("d",), ()),
    "suite/column_sum": ((), ("r",)),
    "suite/attention": (("d", "s"), ()),
    "suite/vocab_parallel_parts": ((), ("v",)),
    "suite/grouped_scale": (("d",), ()),
    "suite/positions_kept_whole": ((), ()),  # n kept whole needlessly: shard_offset places it, so it may split
}
#: case → the factor the kernel reduces over that the wrong rule leaves splittable
WRONG = {"wrong/softmax": "c", "wrong/rms_norm": "d", "wrong/cross_entropy": "v", "wrong/attention": "s",
         "wrong/grouped_scale": "d", "plain/softmax": "b"}


@pytest.fixture(scope="module")
def report():
    return run_sharding_suite("rule_check_suite.py", "all")


def keywords(spelled: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    def named(keyword):
        found = re.search(rf"{keyword}=\(([^)]*)\)", spelled)
        return tuple(re.findall(r"'([^']+)'", found.group(1))) if found else ()
    return named("need_replication"), named("reduction_factors")


def entry_of(report, case):
    entry = report[case]
    assert entry["ok"], f"{case}: {entry.get('error')}\n{entry.get('trace', '')}"
    return entry


@pytest.mark.parametrize("case", sorted(HOLDS))
def test_a_rule_that_holds_is_reported_so_and_proposed_back_or_finer(report, case):
    entry = entry_of(report, case)
    assert entry["holds"] and entry["unsafe"] == [], entry["report"]
    groups = entry["rule"].split("'")[1]
    assert entry["proposed"].split("'")[1] == groups, entry["proposed"]
    keep, reduce = keywords(entry["proposed"])
    assert (set(keep), set(reduce)) == tuple(map(set, HOLDS[case])), entry["report"]
    given_keep, _ = keywords(entry["rule"])
    assert set(keep) <= set(given_keep), "a proposal is the rule or finer: it keeps no more whole"
    assert entry["proposed_holds"]
    # what each layout costs: a factor the rule keeps whole, split on arrival, is gathered
    for factor in keep:
        assert entry["collectives"][factor] == ["all-gather"], entry["report"]


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_missing_need_replication_on_a_reduced_factor_is_flagged(report, case):
    entry = entry_of(report, case)
    factor = WRONG[case]
    assert not entry["holds"] and entry["unsafe"] == [factor], entry["report"]
    assert entry["changes"][factor] is True
    assert factor in keywords(entry["proposed"])[0] and entry["proposed_holds"], entry["report"]
    assert f"is WRONG: splitting ['{factor}'] changes the result" in entry["report"]


def test_the_first_call_checks_the_rule_when_asked(report):
    wrong = report["first_call/wrong"]
    assert not wrong["ok"] and wrong["error"].startswith("ValueError: partitioned softmax (TRITONPLUG_CHECK_RULES=1)")
    assert "need_replication=('c',)" in wrong["error"]
    assert report["first_call/right"] == {"ok": True, "correct": True}


def test_on_one_device_check_rule_says_how_to_get_several():
    if len(jax.devices()) > 1 or len(jax.devices("cpu")) > 1:
        pytest.skip("this process sees several devices")
    with pytest.raises(RuntimeError, match="XLA_FLAGS=--xla_force_host_platform_device_count=8"):
        tritonplug.check_rule(lambda x: x, np.ones(4, np.float32))
