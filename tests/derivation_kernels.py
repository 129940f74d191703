"""Kernels whose configurations are derived by user code that counts its calls (``CALLS``), for the tests that
hold each derivation to once per call (tests/test_resolver.py)."""

import collections

import triton
import triton.language as tl

#: How often each piece of user code ran: ``prune``, ``heuristic``.
CALLS: collections.Counter[str] = collections.Counter()


def prune(configs, named_args):
    CALLS["prune"] += 1
    return configs


def even(args):
    CALLS["heuristic"] += 1
    return args["n"] % args["BLOCK"] == 0


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"],
                 prune_configs_by={"early_config_prune": prune})
@triton.heuristics({"EVEN": even})
@triton.jit
def counted_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.heuristics({"EVEN": even})
@triton.jit
def heuristic_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
