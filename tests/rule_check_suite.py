"""``tritonplug.check_rule`` on 8 CPU devices, run in one child by ``tests/test_rule_check.py``: the rules of the
ports (``examples/ports``) and of the suites' kernels, each checked and its proposed rule checked again; a set of
wrong rules (a factor the kernel reduces over left splittable); a plain function's proposed rule. One JSON report.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import jax
import numpy as np
import triton
import triton.language as tl
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import tritonplug

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import compound_suite as cs  # noqa: E402
import offset_kernels as ok  # noqa: E402
import sharding_kernels as sk  # noqa: E402
from ports import liger_cross_entropy, liger_rms_norm, liger_rope, liger_swiglu  # noqa: E402

REPORT: dict = {"devices": len(jax.devices()), "mode": "all"}
rng = np.random.default_rng(0)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n + cols, e / tl.sum(e, axis=0), mask=cols < n)


def softmax(x):
    rows, n = x.shape
    return tritonplug.triton_call(x, n=n, kernel=softmax_kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(rows,), BLOCK=triton.next_power_of_2(n))


def check(name, fn, *args, rule=None, **kwargs):
    try:
        found = tritonplug.check_rule(fn, *args, rule=rule, **kwargs)
        again = tritonplug.check_rule(fn, *args, rule=_rule_of(found.proposed), **kwargs)
        REPORT[name] = {"ok": True, "holds": found.holds, "unsafe": list(found.unsafe), "rule": found.rule,
                        "could_split": list(found.could_split), "proposed": found.proposed,
                        "proposed_holds": again.holds, "report": str(found),
                        "collectives": {f.factor: list(f.collectives) for f in found.factors},
                        "changes": {f.factor: f.changes_result for f in found.factors}}
    except Exception as exc:  # reported per case
        REPORT[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}


def _rule_of(spelled):
    """``@tritonplug.partitioned('…', need_replication=(…))`` back into a rule."""
    return eval(spelled.removeprefix("@tritonplug.partitioned").replace("(", "tritonplug.sharding_rule(", 1),
                {"tritonplug": tritonplug})


def main() -> None:
    x, w = rand(16, 96), 1.0 + 0.1 * rand(96)
    # the ports' rules
    check("port/rms_norm", liger_rms_norm.rms_norm_forward, x, w, 1e-6, 0.0, "llama", None)
    check("port/swiglu", liger_swiglu.swiglu_forward, rand(16, 80), rand(16, 80))
    logits, target = rand(16, 200), rng.integers(0, 200, 16).astype(np.int32)
    check("port/cross_entropy", liger_cross_entropy.cross_entropy_forward, logits, target, None, -100, 0.0, 0.0,
          "none", None, False)
    seq, hd = 16, 16
    freqs = np.arange(seq, dtype=np.float32)[:, None] / (100.0 ** (np.arange(hd // 2) / (hd // 2)))
    emb = np.concatenate([freqs, freqs], axis=-1)[None]
    check("port/rope", liger_rope.rope_forward, rand(2, 4, seq, hd), rand(2, 4, seq, hd), np.cos(emb), np.sin(emb))
    # the suites' kernels
    check("suite/rms_norm", sk.rms_norm, rand(8, 4, 48), rand(48))
    check("suite/column_sum", sk.column_sum, rand(32, 48))
    check("suite/attention", sk.attention, rand(1, 2, 32, 16), rand(1, 2, 32, 16), rand(1, 2, 32, 16))
    check("suite/vocab_parallel_parts", ok.cross_entropy_parts, logits, target, logits.max(-1), atol=1e-4)
    check("suite/grouped_scale", cs.grouped_scale, rand(2, 16, 32), rand(2, 8, 32))
    check("suite/positions_kept_whole", ok.positions_kept_whole, np.zeros((4, 64), np.float32))
    # wrong rules: a factor the kernel reduces over left splittable
    check("wrong/softmax", softmax, x, rule="r c -> r c")
    check("wrong/rms_norm", liger_rms_norm.rms_norm_forward, x, w, 1e-6, 0.0, "llama", None,
          rule="r d, d -> r d, r d, r")
    check("wrong/cross_entropy", liger_cross_entropy.cross_entropy_forward, logits, target, None, -100, 0.0, 0.0,
          "none", None, False, rule=tritonplug.sharding_rule("r v, r -> r, r v, ", reduction_factors=("r",)))
    check("wrong/attention", sk.attention, rand(1, 2, 32, 16), rand(1, 2, 32, 16), rand(1, 2, 32, 16),
          rule=tritonplug.sharding_rule("b h s d, b h s d, b h s d -> b h s d", need_replication=("d",)))
    check("wrong/grouped_scale", cs.grouped_scale, rand(2, 16, 32), rand(2, 8, 32),
          rule="b (k g) d, b k d -> b (k g) d")
    # a plain function, no rule: one is proposed
    check("plain/softmax", softmax, x)
    first_call(x)


def first_call(x) -> None:
    """``TRITONPLUG_CHECK_RULES=1``: a partitioned function checks its rule at its first call, inside a jit too."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    placed = jax.device_put(x, NamedSharding(mesh, P("x")))
    os.environ["TRITONPLUG_CHECK_RULES"] = "1"
    try:
        for name, rule in (("wrong", "r c -> r c"), ("right", tritonplug.sharding_rule("r c -> r c",
                                                                                      need_replication=("c",)))):
            fn = tritonplug.partitioned(rule)(softmax)
            try:
                got = jax.jit(fn)(placed)
                REPORT[f"first_call/{name}"] = {"ok": True, "correct": bool(np.allclose(
                    np.asarray(got), np.asarray(jax.nn.softmax(x, -1)), atol=1e-5))}
            except Exception as exc:  # reported
                REPORT[f"first_call/{name}"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        del os.environ["TRITONPLUG_CHECK_RULES"]


if __name__ == "__main__":
    main()
    print("REPORT " + json.dumps(REPORT))
