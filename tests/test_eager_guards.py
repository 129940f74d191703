"""A recorded eager call's guard (``eager.guards``) against the calls that differ from it in one thing: a keyword
added or removed, a keyword's value, an operand's dtype or shape, two operands swapped between position and keyword.
Each must run what it asks for (checked against NumPy) and, where it is another call, not match the record; where
it is the same call (equal avals swapped), the record's program must take each array from where the call put it.
The generated runner's text is in ``linecache`` (tracebacks show it), logged at debug level and returned by
``tritonplug.inspection.eager_runner_source``."""

from __future__ import annotations

import linecache
import logging
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend

import tritonplug
from tritonplug import inspection
from tritonplug.process.state import state

pytestmark = requires_backend("interpret")

N, BLOCK = 256, 128
OUT = jax.ShapeDtypeStruct((N,), jnp.float32)
X = jnp.arange(N, dtype=jnp.float32) / 8
Y = jnp.linspace(-1.0, 1.0, N, dtype=jnp.float32)


@triton.jit
def affine_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, scale=1.0, shift=0, y_ptr=None, POWER: tl.constexpr = 1):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs).to(tl.float32)
    if POWER == 2:
        x = x * x
    acc = x * scale + shift
    if y_ptr is not None:
        acc += tl.load(y_ptr + offs).to(tl.float32)
    tl.store(out_ptr + offs, acc)


@triton.jit
def mix_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.float32) + 2 * tl.load(y_ptr + offs).to(tl.float32))


@pytest.fixture(autouse=True)
def _no_memoised_calls():
    state.memo.clear()


def _keywords(given: dict) -> dict:
    return {"grid": (N // BLOCK,), "BLOCK": BLOCK, **given}


def affine(x, **given):
    return tritonplug.triton_call(x, kernel=affine_kernel, out_type=OUT, **_keywords(given))


def reference(x, scale=1.0, shift=0, y_ptr=None, POWER=1):
    x = np.asarray(x, np.float32)[:N]
    x = x * x if POWER == 2 else x
    return x * np.float32(scale) + shift + (0 if y_ptr is None else np.asarray(y_ptr, np.float32))


def recorded(kernel, make_call) -> None:
    """Make a call twice: the first binds, the second is found by its quick key and recorded."""
    make_call(), make_call()
    assert id(kernel) in state.memo.recent


def matches(kernel, args, kwargs, out=OUT) -> bool:
    """Whether a recorded call's guard holds for this call (the runner's guards, returning the entry)."""
    return state.memo.recent[id(kernel)].match(kernel, args, kwargs, out) is not None


#: Each optional parameter, given another value than its default: a scalar, an int scalar, a constexpr, an operand.
GIVEN = {"scale": 3.0, "shift": 5, "POWER": 2, "y_ptr": Y}


@pytest.mark.parametrize("name", sorted(GIVEN))
def test_a_keyword_added_to_a_recorded_call_is_another_call(name):
    recorded(affine_kernel, lambda: affine(X))
    added = {name: GIVEN[name]}
    assert not matches(affine_kernel, (X,), _keywords(added))
    for _ in range(3):  # the full path, the quick key, its own record
        np.testing.assert_allclose(affine(X, **added), reference(X, **added), rtol=1e-6)
    np.testing.assert_allclose(affine(X), reference(X), rtol=1e-6)  # and the first call is still itself


@pytest.mark.parametrize("name", sorted(GIVEN))
def test_a_keyword_removed_from_a_recorded_call_takes_its_default(name):
    recorded(affine_kernel, lambda: affine(X, **GIVEN))
    rest = {k: v for k, v in GIVEN.items() if k != name}
    assert not matches(affine_kernel, (X,), _keywords(rest))
    np.testing.assert_allclose(affine(X, **rest), reference(X, **rest), rtol=1e-6)


@pytest.mark.parametrize(("name", "first", "then"), [("scale", 3.0, 0.5), ("shift", 2, 7), ("POWER", 2, 1),
                                                     ("BLOCK", BLOCK, BLOCK // 2)])
def test_a_keyword_with_another_value_is_another_call(name, first, then):
    """A float scalar, an int scalar, two constexprs (``BLOCK`` with the grid it needs)."""
    def given(value):
        return {name: value, "grid": (N // value,)} if name == "BLOCK" else {name: value}

    recorded(affine_kernel, lambda: affine(X, **given(first)))
    assert not matches(affine_kernel, (X,), _keywords(given(then)))
    np.testing.assert_allclose(affine(X, **given(then)), reference(X, **{name: then} if name != "BLOCK" else {}),
                               rtol=1e-6)


def test_a_keyword_renamed_is_another_call():
    """The same values under other names: ``shift=2`` recorded, then ``scale=2`` (each key part follows its name)."""
    recorded(affine_kernel, lambda: affine(X, shift=2))
    assert not matches(affine_kernel, (X,), _keywords({"scale": 2}))
    for _ in range(3):
        np.testing.assert_allclose(affine(X, scale=2), reference(X, scale=2), rtol=1e-6)


def test_a_keyword_array_with_new_values_repeats_with_them():
    recorded(affine_kernel, lambda: affine(X, y_ptr=Y))
    other = Y * 3 + 1
    assert matches(affine_kernel, (X,), _keywords({"y_ptr": other}))
    np.testing.assert_allclose(affine(X, y_ptr=other), reference(X, y_ptr=other), rtol=1e-6)


def test_an_operand_of_another_dtype_is_another_call():
    """The CPU path lowers a program for the avals it is given, so a dtype the guard let through would still compute
    right there: the guard's verdict, and a dtype binding refuses, show it."""
    recorded(affine_kernel, lambda: affine(X, POWER=2))
    half = X.astype(jnp.float16)
    assert not matches(affine_kernel, (half,), _keywords({"POWER": 2}))
    np.testing.assert_allclose(affine(half, POWER=2), reference(half, POWER=2), rtol=1e-3)
    with pytest.raises(TypeError, match="x_ptr.*complex64 is not supported"):
        affine(X.astype(jnp.complex64), POWER=2)


def test_an_operand_of_another_shape_is_another_call():
    """As for a dtype, the CPU path would compute right for a shape the guard let through: its verdict shows it."""
    recorded(affine_kernel, lambda: affine(X))
    longer = jnp.arange(2 * N, dtype=jnp.float32) - 7
    assert not matches(affine_kernel, (longer,), _keywords({}))
    np.testing.assert_allclose(affine(longer), reference(longer), rtol=1e-6)


def mix(*args, **kwargs):
    return tritonplug.triton_call(*args, kernel=mix_kernel, out_type=OUT, **_keywords(kwargs))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_operands_swapped_between_position_and_keyword(dtype):
    """``mix(a, y_ptr=b)`` recorded, then ``mix(b, y_ptr=a)``: of equal avals, the same call on other arrays; of
    other dtypes, another call. Either way ``x = b`` and ``y = a``."""
    a, b = X, (Y * 4).astype(dtype)
    recorded(mix_kernel, lambda: mix(a, y_ptr=b))
    assert matches(mix_kernel, (b,), _keywords({"y_ptr": a})) == (dtype == jnp.float32)
    want = np.asarray(b, np.float32) + 2 * np.asarray(a)
    for _ in range(3):
        np.testing.assert_allclose(mix(b, y_ptr=a), want, rtol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_keyword_operands_swapped(dtype):
    """``mix(x_ptr=a, y_ptr=b)`` recorded, then ``mix(y_ptr=a, x_ptr=b)``: values go by name, not by order."""
    a, b = X, (Y * 4).astype(dtype)
    recorded(mix_kernel, lambda: mix(x_ptr=a, y_ptr=b))
    assert matches(mix_kernel, (), _keywords({"y_ptr": a, "x_ptr": b})) == (dtype == jnp.float32)
    want = np.asarray(b, np.float32) + 2 * np.asarray(a)
    for _ in range(3):
        np.testing.assert_allclose(mix(y_ptr=a, x_ptr=b), want, rtol=1e-6)
        np.testing.assert_allclose(mix(x_ptr=b, y_ptr=a), want, rtol=1e-6)


# ------------------------------------------------------------------ the generated source, where readers see it

def test_a_runners_source_is_inspectable_logged_and_in_linecache(caplog):
    assert inspection.eager_runner_source(affine_kernel) is None
    with caplog.at_level(logging.DEBUG, logger="tritonplug.eager"):
        recorded(affine_kernel, lambda: affine(X, shift=2))
    source = inspection.eager_runner_source(affine_kernel)
    assert source.startswith("def runner(kernel, args, kwargs, out_value):") and "'shift': int" in source
    assert any(source in record.getMessage() for record in caplog.records)
    code = state.memo.recent[id(affine_kernel)].run.__code__
    assert code.co_filename.startswith("<tritonplug eager: runner of affine_kernel")
    assert "".join(linecache.getlines(code.co_filename)) == source


def test_a_traceback_through_a_runner_shows_its_line():
    recorded(affine_kernel, lambda: affine(X))
    gone = jnp.ones(N, jnp.float32)
    gone.delete()
    with pytest.raises(RuntimeError, match="deleted") as caught:
        affine(gone)
    text = "".join(traceback.format_exception(caught.value))
    assert "<tritonplug eager: runner of affine_kernel" in text and "return r0_P(args[0])[0]" in text
