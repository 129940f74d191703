"""Partitioned launchers called by keyword, in any order, on every device this process sees; one JSON report.

Run in a child process by ``tests/test_partitioned_keywords.py`` (8 CPU devices through ``XLA_FLAGS``); the
argument picks the partitioner (``shardy``, ``gspmd``) or explicit axes (``explicit``). The launchers take
three arrays of one shape, ``x`` and ``y`` (rows may be split) and ``w`` (summed over its rows, so kept
whole): an operand order other than the rule's would split ``w`` and keep ``y`` whole, with the same shapes,
and compute a wrong sum without an error. Each case records (``sharding_suite.run``) whether the sharded
result equals a ``jnp`` reference and the same call on one device; ``random/...`` draws signatures and
spellings (``keyword_cases.py``) with hypothesis.
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
from hypothesis import HealthCheck, given, settings
from jax.sharding import PartitionSpec as P

import tritonplug

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import keyword_cases  # noqa: E402
import sharding_suite as suite  # noqa: E402


@triton.jit
def mul_add_colsum_kernel(x_ptr, y_ptr, w_ptr, b_ptr, n_cols, w_rows, scale, out_ptr, BLOCK: tl.constexpr):
    """``out[r] = x[r] * y[r] * scale + sum_k w[k] + b``."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    acc = tl.load(b_ptr + cols, mask=mask, other=0.0)
    for k in range(0, w_rows):
        acc += tl.load(w_ptr + k * n_cols + cols, mask=mask, other=0.0)
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    y = tl.load(y_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x * y * scale + acc, mask=mask)


def _launch(x, y, w, bias, scale):
    rows, cols = x.shape
    bias = jax.numpy.zeros((cols,), x.dtype) if bias is None else bias
    return tritonplug.triton_call(x, y, w, bias, cols, w.shape[0], scale, kernel=mul_add_colsum_kernel,
                                  out_type=jax.typeof(x), grid=(rows,), BLOCK=triton.next_power_of_2(cols))


@tritonplug.partitioned("r c, r c, k c -> r c")
def mul_add_colsum(x, y, w, scale=2.0):
    return _launch(x, y, w, None, scale)


def _kw_rule(x, *, y, w, bias=None, scale=2.0):
    return "r c, r c, k c" + ", c" * (bias is not None) + " -> r c"


@tritonplug.partitioned(_kw_rule)
def mul_add_colsum_kw(x, *, y, w, bias=None, scale=2.0):
    """Keyword-only arrays, declared (y, w, bias): not their sorted order (bias, w, y)."""
    return _launch(x, y, w, bias, scale)


_mul_add = tritonplug.launch(mul_add_colsum_kernel)


@tritonplug.partitioned("r c, r c, k c -> r c")
@tritonplug.torch_launcher
def mul_add_colsum_torch(x, y, w, scale=2.0):
    """The same launch in a ported torch launcher's style, its kernel arguments by keyword."""
    out = tritonplug.empty_like(x)
    bias = tritonplug.zeros(x.shape[1], dtype=x.dtype)
    _mul_add[(x.shape[0],)](w_ptr=w, x_ptr=x, y_ptr=y, b_ptr=bias, out_ptr=out, n_cols=x.shape[1],
                            w_rows=w.shape[0], scale=scale, BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


def reference(x, y, w, bias=None, scale=2.0):
    return x * y * scale + w.sum(0) + (0 if bias is None else bias)


def fixed_cases(line, n: int) -> None:
    rng = np.random.default_rng(0)
    x, y, w = (rng.standard_normal((4 * n, 16)).astype(np.float32) for _ in range(3))
    b = rng.standard_normal(16).astype(np.float32)
    rows = (P("x"), P("x"), P("x"))  # every operand arrives row-split: the rule must gather w and only w
    spellings = {
        "positional": lambda f: lambda x, y, w: f(x, y, w),
        "keywords_signature_order": lambda f: lambda x, y, w: f(x=x, y=y, w=w),
        "keywords_other_order": lambda f: lambda x, y, w: f(w=w, y=y, x=x),
        "mixed": lambda f: lambda x, y, w: f(x, w=w, y=y),
        "mixed_with_constant": lambda f: lambda x, y, w: f(x, scale=2.0, w=w, y=y),
    }
    for name, spell in spellings.items():
        suite.run(f"string_rule/{name}", spell(mul_add_colsum), (x, y, w), reference, rows, line)
        suite.run(f"torch_launcher/{name}", spell(mul_add_colsum_torch), (x, y, w), reference, rows, line)
    suite.run("keyword_only/sorted_is_not_declared", lambda x, y, w: mul_add_colsum_kw(x, w=w, y=y),
              (x, y, w), reference, rows, line)
    suite.run("keyword_only/all_by_keyword", lambda x, y, w: mul_add_colsum_kw(scale=0.5, w=w, y=y, x=x),
              (x, y, w), lambda x, y, w: reference(x, y, w, scale=0.5), rows, line)
    suite.run("rule_function/optional_array_given", lambda x, y, w, b: mul_add_colsum_kw(x, bias=b, w=w, y=y),
              (x, y, w, b), reference, (*rows, P()), line)
    xb, yb = np.stack([x, 2 * y]), np.stack([y, x])
    suite.run("vmap/keywords_other_order", jax.vmap(lambda x, y, w: mul_add_colsum(w=w, y=y, x=x),
                                                    in_axes=(0, 0, None)),
              (xb, yb, w), jax.vmap(reference, in_axes=(0, 0, None)), (P(None, "x"), P(None, "x"), P("x")), line)
    suite.run("vmap/keyword_only", jax.vmap(lambda x, y, w: mul_add_colsum_kw(x, w=w, y=y), in_axes=(0, 0, None)),
              (xb, yb, w), jax.vmap(reference, in_axes=(0, 0, None)), (P(None, "x"), P(None, "x"), P("x")), line)


def random_cases(line, n: int, examples: int) -> None:
    """Drawn signatures and spellings; arrays of one shape, all arriving row-split."""
    done: list[str] = []

    # the same examples each run, as the parent's profile (tests/conftest.py), unless HYPOTHESIS_PROFILE=explore
    @settings(max_examples=examples, derandomize=os.environ.get("HYPOTHESIS_PROFILE") != "explore", deadline=None,
              database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(keyword_cases.cases(rows=2 * n, whole_rows=2 * n, cols=8))
    def check(case):
        fn, _ = case.function()
        f = tritonplug.partitioned(case.rule())(fn)
        labels = [label for label, v in case.values.items() if isinstance(v, np.ndarray)]
        statics = {label: v for label, v in case.values.items() if label not in labels}

        def spelled(g):
            return lambda *arrays: case.call(g, {**statics, **dict(zip(labels, arrays, strict=True))})

        arrays = tuple(case.values[label] for label in labels)
        name = f"random/{len(done)}"
        suite.run(name, spelled(f), arrays, lambda *a: case.reference(case.values), (P("x"),) * len(arrays), line)
        entry = suite.REPORT.pop(name)  # the report keeps the falsifying case only
        done.append(name)
        assert entry.get("ok") and entry["correct"] and entry["same_as_one_device"], (
            f"{case.source()}# call: positional {case.positional}, keywords {case.keywords}, rest {case.rest}, "
            f"extra {case.extra}; rule {case.rule()!r}\n{entry}")

    try:
        check()
        suite.REPORT["random"] = {"ok": True, "examples": len(done)}
    except BaseException as exc:  # noqa: BLE001 - the report names the falsifying case
        suite.REPORT["random"] = {"ok": False, "examples": len(done), "error": f"{type(exc).__name__}: {exc}"[-3000:],
                                  "trace": traceback.format_exc()[-3000:]}


def main(mode: str, examples: int) -> None:
    jax.config.update("jax_use_shardy_partitioner", mode != "gspmd")
    n = len(jax.devices())
    suite.REPORT["devices"], suite.REPORT["mode"] = n, mode
    kind = jax.sharding.AxisType.Explicit if mode == "explicit" else jax.sharding.AxisType.Auto
    line = jax.make_mesh((n,), ("x",), axis_types=(kind,))
    fixed_cases(line, n)
    random_cases(line, n, examples)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "shardy", int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    print("REPORT " + json.dumps(suite.REPORT, default=str))
