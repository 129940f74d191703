"""Misused partitioned launchers in sharded programs (issue 37's held-out set): each refused at the call with an
error naming the function and what to do, or, where it can, working; never a crash or JAX's bare internals.

Eight CPU devices exist only in a child process (``XLA_FLAGS``): ``bad_input_sharded_suite.py`` runs the cases
and prints one JSON report per group. The callbacks run alone: XLA:CPU crashed on a ``jax.debug.print`` inside
a custom-partitioned body (a segfault), which would have taken the other cases down with it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT, cpu_devices_env, requires_backend

pytestmark = requires_backend("interpret")


def _run(group: str) -> dict:
    env = cpu_devices_env(8, TRITONPLUG_INTERPRET_CHECK="0")
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "bad_input_sharded_suite.py"), group],
                          capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, f"the child failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(lines[-1].removeprefix("REPORT "))


@pytest.fixture(scope="module")
def callbacks() -> dict:
    return _run("callbacks")


@pytest.fixture(scope="module")
def others() -> dict:
    return _run("others")


def refused(report: dict, case: str, error: str, *words: str) -> str:
    entry = report[case]
    assert entry.get("error") == error, f"{case}: {entry}"
    for word in words:
        assert word in entry["message"], f"{case}: {word!r} not in {entry['message']!r}"
    return entry["message"]


@pytest.mark.parametrize("case", ["debug_print", "debug_print_in_a_cond"])
def test_a_debug_print_in_a_partitioned_body_on_cpu_devices_is_refused_at_the_call(callbacks, case):
    refused(callbacks, case, "NotImplementedError", "partitioned printing", "debug_print",
            "move the callback out of the function", "explicit mesh axes")


def test_a_debug_print_split_only_by_out_shardings_is_refused_when_xla_partitions_it(callbacks):
    # the operands' types name no mesh while tracing: XLA's partitioner callback refuses it (it wraps the error)
    refused(callbacks, "debug_print_split_by_out_shardings", "JaxRuntimeError", "INTERNAL: custom_partitioner",
            "NotImplementedError: partitioned printing: the function calls back into Python (debug_print")


def test_a_mistake_only_a_shards_shapes_reveal_is_raised_at_trace_time_naming_the_function_and_the_shapes(others):
    words = ("partitioned wrong_on_a_shard: the function failed when traced with one shard's shapes",
             "a: float32[2, 32], b: float32[2, 32]; split: 'r' over ('x',)", "Incompatible shapes for broadcasting")
    # the operands' types name the mesh: each layout of the rule is traced at the call, not left to XLA
    refused(others, "shard_mistake_eager", "PartitionError", *words)
    refused(others, "shard_mistake_jit", "PartitionError", *words)
    refused(others, "shard_mistake_explicit", "PartitionError", "a: float32[4, 32], b: float32[4, 32]",
            "'r' over ('x',)")
    # no mesh in the operands' types (split by out_shardings only): XLA's partitioner finds it, and wraps it
    refused(others, "shard_mistake_split_later", "JaxRuntimeError", "INTERNAL: custom_partitioner", *words)


@pytest.mark.parametrize("case", ["grad_auto", "jvp_auto"])
def test_differentiating_a_partitioned_function_names_the_fix(others, case):
    refused(others, case, "NotImplementedError", "partitioned add_rows: jax.grad, jax.jvp", "jax.custom_vjp",
            "explicit mesh axes")


def test_vmap_over_a_batch_split_on_explicit_axes_runs_split(others):
    assert others["vmap_explicit_batch_split"] == {"result": {"correct": True, "spec": ["x", "None", "None"]}}
    # under explicit axes jax.grad still differentiates the shard_map (here a custom_vjp inside it)
    assert others["grad_explicit_through_the_shard_map"] == {"result": True}


def test_an_unpartitioned_reducing_kernel_is_told_which_factor_to_keep_whole(others):
    message = refused(others, "unpartitioned_reduction", "ValueError", "@tritonplug.partitioned(RULE)",
                      "the kernel reduces (tl.sum)")
    assert "@tritonplug.partitioned('a b, b -> a b, c', need_replication=('b',))" in message
    assert "tritonplug.check_rule(your_function, *example_args, rule='a b, b -> a b, c')" in message


def test_an_unpartitioned_call_is_pointed_to_check_rule_and_offered_no_bare_rule(others):
    # issue 37: a bare rule here lets XLA split what the kernel may reduce over, silently wrong if it does
    message = refused(others, "unpartitioned_elementwise", "ValueError", "@tritonplug.partitioned(RULE)",
                      "tritonplug.check_rule(your_function, *example_args, rule='a b, a b -> a b')",
                      "which factors may be split depends on the kernel")
    assert "@tritonplug.partitioned('a b" not in message
