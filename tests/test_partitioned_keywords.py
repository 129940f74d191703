"""``tritonplug.partitioned`` functions called with their arrays by keyword, in any order, mixed with
positional ones, defaults left out: the operands are always in the signature's order, the rule's.

Before the arguments were bound to the signature, a call's keyword arguments were flattened in sorted
keyword order (JAX's order for a dict), so a rule written in signature order was matched to the wrong
arrays: a confusing "factor has two sizes" error, or, with arrays of one shape, a wrong result without an
error. The sharded cases run on 8 CPU devices in a child process (``keyword_suite.py``) under Shardy, GSPMD
and explicit axes; the hypothesis cases here draw signatures and spellings (``keyword_cases.py``) on one device.
"""

from __future__ import annotations

import inspect

import jax
import numpy as np
import pytest
from helpers import requires_backend, run_sharding_suite
from hypothesis import given, settings
from keyword_cases import cases

import tritonplug

pytestmark = requires_backend("interpret")

MODES = ("shardy", "gspmd", "explicit")
SPELLINGS = ("positional", "keywords_signature_order", "keywords_other_order", "mixed", "mixed_with_constant")
FIXED = [f"{launcher}/{s}" for launcher in ("string_rule", "torch_launcher") for s in SPELLINGS] + [
    "keyword_only/sorted_is_not_declared", "keyword_only/all_by_keyword", "rule_function/optional_array_given",
    "vmap/keywords_other_order", "vmap/keyword_only"]


@pytest.fixture(scope="module", params=MODES)
def report(request):
    return run_sharding_suite("keyword_suite.py", request.param, "25")


@pytest.mark.parametrize("case", FIXED)
def test_any_spelling_gives_the_unsharded_result(report, case):
    entry = report[case]
    assert entry["ok"], f"{report['mode']} {case}: {entry.get('error')}\n{entry.get('trace', '')}"
    assert entry["correct"], f"{report['mode']} {case}: differs from the jnp reference"
    assert entry["same_as_one_device"], f"{report['mode']} {case}: differs from the same call on one device"
    # the compiled program's only collective is w's gather: no operand is moved (all-to-all) or summed (all-reduce)
    assert entry["collectives"] == ["all-gather"], f"{report['mode']} {case}: {entry['collectives']}"
    if case.startswith(("string_rule", "torch_launcher", "keyword_only")):
        assert entry["transfers"] == [["w", ["k"], 32 * 16 * 4]], entry["transfers"]  # w, and only w, gathered


def test_drawn_signatures_and_spellings_sharded(report):
    entry = report["random"]
    assert entry["ok"], f"{report['mode']}: {entry['error']}\n{entry.get('trace', '')}"
    assert entry["examples"] >= 25


@settings(deadline=None, max_examples=60)
@given(cases())
def test_drawn_signatures_and_spellings(case):
    """On one device: a rule in signature order fits every spelling, and a rule function is handed the bound
    arguments, defaults filled in."""
    fn, _ = case.function()
    want = case.reference(case.values)
    np.testing.assert_allclose(case.call(fn, case.values), want, rtol=1e-6)
    got = case.call(tritonplug.partitioned(case.rule())(fn), case.values)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    seen = []

    def rule(*args, **kwargs):
        bound = inspect.signature(fn).bind(*args, **kwargs)
        seen.append(bound.arguments)
        return case.rule()

    np.testing.assert_allclose(case.call(tritonplug.partitioned(rule)(fn), case.values), want, rtol=1e-5, atol=1e-5)
    arguments = seen[0]
    assert list(arguments) == [n for n in inspect.signature(fn).parameters
                               if n in arguments], "a rule function gets the arguments in signature order"
    for p in case.params:  # arrays arrive as the tracers of the call's jit
        expected, got = case.values.get(p.name, p.default), arguments[p.name]
        assert jax.typeof(got).shape == expected.shape if p.role != "number" else got == expected, p.name


def test_an_operand_is_named_by_its_parameter_whatever_the_spelling():
    @tritonplug.partitioned("r c, r c -> r c")
    def first(x, /, y, *, z=None):
        return x * 1

    x, y = np.ones((4, 8), np.float32), np.ones((4, 6), np.float32)
    with pytest.raises(ValueError, match=r"8 in operand 0 \(x\) dimension 1 and 6 in operand 1 \(y\)"):
        first(x, y=y)
    with pytest.raises(ValueError, match=r"has 2 operand group\(s\), but the function has 3 array operand\(s\) "
                                         r"\(x, y, z\)"):
        first(x, z=x, y=x)


def test_a_method_and_varargs_bind_like_python():
    class Layer:
        @tritonplug.partitioned("r c, r c, k c, k c -> r c")
        def __call__(self, x, *rest, **extra):
            (y,), w = rest, extra["w"] + extra["v"]
            return x + y + w.sum(0)

    x, y = np.ones((4, 8), np.float32), np.full((4, 8), 2, np.float32)
    w, v = np.full((3, 8), 3, np.float32), np.zeros((3, 8), np.float32)
    # **extra's arrays are operands in sorted keyword order (v, w), whatever the call's order
    np.testing.assert_allclose(Layer()(x, y, w=w, v=v), x + y + w.sum(0))
    np.testing.assert_allclose(jax.jit(lambda a, b: Layer()(a, b, w=w, v=v))(x, y), x + y + w.sum(0))
    with pytest.raises(TypeError, match="missing a required argument: 'x'"):
        Layer()(y=y)


def test_a_rule_function_is_called_as_the_function_is():
    """Keywords stay keywords (a ``**kwargs`` rule works), positional arguments stay positional, and an omitted
    parameter's default comes by keyword; a rule whose parameters do not take the call is named in the error."""
    seen = []

    def by_keyword(**arrays):
        seen.append(sorted(arrays))
        return "r c, r c -> r c"

    def first_and_rest(x, **rest):
        seen.append(sorted(rest))
        return "r c, r c -> r c"

    def add(x, y, scale=2.0):
        return x * scale + y

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_allclose(tritonplug.partitioned(by_keyword)(add)(y=x, x=x), 3 * x)
    np.testing.assert_allclose(jax.jit(lambda a: tritonplug.partitioned(by_keyword)(add)(x=a, y=a, scale=1.0))(x),
                               2 * x)
    np.testing.assert_allclose(tritonplug.partitioned(first_and_rest)(add)(x, y=x), 3 * x)
    assert seen == [["scale", "x", "y"], ["scale", "x", "y"], ["scale", "y"]]
    with pytest.raises(TypeError, match=r"partitioned add: its rule function .*by_keyword is called as the function "
                                        r"is, \(float32\[4, 8\], float32\[4, 8\], scale=2.0\), and raised: "):
        tritonplug.partitioned(by_keyword)(add)(x, x)
