"""The eager repeat path's corners that the mutation run of ``eager`` (``tests/mutation.py``; docs/development.md,
"Mutation testing") found no test for: each test here failed a mutant of ``eager/guards.py``, ``keys.py``,
``memo.py`` or ``runners.py`` that the other eager tests passed. Every call is checked against NumPy on each of its
paths (the full path, the quick key, the kernel's runner; ``out_shape=`` calls through the memo's keys), and where
the path itself is the behaviour (a repeat that must not bind, build a key or write a runner again) the test counts
it as ``tests/test_call_repeats.py`` does."""

from __future__ import annotations

from contextlib import nullcontext

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from kernels import add_kernel, grid3_kernel, tuple_add_kernel

import tritonplug
from tritonplug.calls import binding
from tritonplug.eager import keys, runners
from tritonplug.process.state import state

pytestmark = requires_backend("interpret")

N = 64
SPEC = jax.ShapeDtypeStruct((N,), jnp.float32)
X = jnp.arange(N, dtype=jnp.float32)
Y = jnp.linspace(-1.0, 1.0, N, dtype=jnp.float32)


@pytest.fixture(autouse=True)
def _no_memoised_calls():
    state.memo.clear()


def _counting(monkeypatch, module, name):
    """How many times ``module.name`` was called from now on."""
    count = [0]
    real = getattr(module, name)

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return count


def add(x, y, n=N, **kwargs):
    return tritonplug.triton_call(x, y, n, kernel=add_kernel, **{"out_type": SPEC, "grid": (1,), "BLOCK": N,
                                                                 **kwargs})


# ------------------------------------------------------------------ what a repeat returns (memo.Entry.single)

@pytest.mark.parametrize("outs", [(SPEC,), [SPEC], {"sum": SPEC}], ids=["tuple", "list", "dict"])
@pytest.mark.parametrize("spelling", ["out_type", "out_shape"])
def test_one_output_in_a_container_repeats_in_its_container(outs, spelling):
    """One output inside a tuple (a quick kind: recorded), a list or a dict (the general key) is returned in it on
    every repeat, never as the bare array: only a leaf alone is a "single" output."""
    for scale in (1, 2, 3, 4):
        with pytest.warns(DeprecationWarning) if spelling == "out_shape" else nullcontext():
            got = add(X * scale, Y, **{"out_type": None, spelling: outs})
        assert type(got) is type(outs) and len(got) == 1
        (value,) = got.values() if isinstance(got, dict) else got
        np.testing.assert_array_equal(value, X * scale + Y)


# ------------------------------------------------------------------ what is never recorded (guards.recordable)

def test_a_numpy_array_by_keyword_is_never_recorded_and_repeats_right():
    """A NumPy array can change in place, by keyword as by position: no record is made of such a call (a guard
    cannot be written for it), and each repeat computes with the array as it is then."""
    y = np.ones(N, np.float32)

    def call(x):
        return tritonplug.triton_call(x, n=N, y_ptr=y, kernel=add_kernel, out_type=SPEC, grid=(1,), BLOCK=N)

    for scale in (1, 2, 3):
        np.testing.assert_array_equal(call(X * scale), X * scale + y)
    assert id(add_kernel) not in state.memo.recent
    y[:] = 5.0  # in place: the next repeat reads the new values
    np.testing.assert_array_equal(call(X), X + 5.0)


# ------------------------------------------------------------------ the general key (keys.signature)

_A, _B = jnp.ones(8, jnp.float32), jnp.zeros(8, jnp.float32)  # one aval


def test_the_general_key_is_none_for_an_unhashable_option_or_an_output_without_a_shape():
    """``signature`` says None ("not memoisable") where a part cannot be keyed, and raises nothing."""
    kernel = object()
    assert keys.signature(kernel, (_A,), {"grid": _A}, SPEC) is None  # an array is no hashable option
    assert keys.signature(kernel, (_A,), {"grid": (1,)}, [object()]) is None  # a leaf with no shape


def test_an_output_without_a_shape_is_refused_by_name():
    with pytest.raises(TypeError, match=r"out_type leaf 0 must have \.shape and \.dtype"):
        tritonplug.triton_call(X, Y, N, kernel=add_kernel, out_type=[object()], grid=(1,), BLOCK=N)


def test_a_keyword_operand_has_a_general_key_shared_by_arrays_of_one_aval():
    """A keyword operand is keyed as an operand (its aval), an option as an option: a traced call passing an array
    by keyword can be memoised."""
    kernel = object()
    one = keys.signature(kernel, (_A,), {"y_ptr": _A, "grid": (1,)}, SPEC)
    assert one is not None and one == keys.signature(kernel, (_B,), {"y_ptr": _B, "grid": (1,)}, SPEC)
    assert one != keys.signature(kernel, (_A,), {"y_ptr": jnp.ones(8, jnp.float16), "grid": (1,)}, SPEC)
    assert keys.signature(kernel, (_A,), {"grid": (1,), "backend_options": {"a": 1}}, SPEC) is not None


# ------------------------------------------------------------------ the memo's hits (memo.find)

def test_a_repeat_with_a_numpy_scalar_binds_once(monkeypatch):
    """A NumPy scalar has no quick key: the repeat is found by the general key and reuses the binding."""
    bound = _counting(monkeypatch, binding, "bind")
    for scale in (1, 2, 3):
        np.testing.assert_array_equal(add(X * scale, Y, np.int32(N)), X * scale + Y)
    assert bound[0] == 1


def test_a_repeat_with_out_shape_builds_no_general_key(monkeypatch):
    """An ``out_shape=`` call (jax-triton 0.3) is found by its quick key, at once."""
    built = _counting(monkeypatch, keys, "signature")
    for scale in (1, 2, 3):
        if scale == 2:
            assert built[0] > 0  # the first call's: looked up, then memoised under it
            built[0] = 0
        with pytest.warns(DeprecationWarning):
            got = add(X * scale, Y, out_type=None, out_shape=SPEC)
        np.testing.assert_array_equal(got, X * scale + Y)
    assert built[0] == 0


def test_keywords_in_another_order_are_found_then_repeat_without_keys(monkeypatch):
    """The same call with its keywords in another order: found by the general key and memoised under its own quick
    key too, so that its next repeat is recorded and the ones after it build no key at all."""
    add(X, Y, grid=(1,), BLOCK=N)
    quick = _counting(monkeypatch, keys, "quick_key")

    def reordered(x):
        return tritonplug.triton_call(x, Y, N, kernel=add_kernel, BLOCK=N, grid=(1,), out_type=SPEC)

    for scale in (1, 2):  # the general key finds it (and stores its quick key); its quick key finds it
        np.testing.assert_array_equal(reordered(X * scale), X * scale + Y)
    quick[0] = 0
    for scale in (3, 4):
        np.testing.assert_array_equal(reordered(X * scale), X * scale + Y)
    assert quick[0] == 0


def test_a_traced_repeat_is_the_same_equation_as_the_first_trace():
    """A call traced again (its tracers found by the general key) binds the primitive itself, as the first trace
    did, and not the eager path's jitted program wrapped around it."""
    first, again = (jax.make_jaxpr(lambda x, y: add(x, y))(X, Y) for _ in range(2))
    assert [e.primitive.name for e in again.eqns] == [e.primitive.name for e in first.eqns] == ["tritonplug_call"]


# ------------------------------------------------------------------ where the arrays are (memo.Entry.gather)

def test_arrays_inside_a_tuple_repeat_with_their_new_values():
    """Arrays inside a tuple argument (no quick key: the general key, and each array gathered by its path)."""
    z = jnp.full(N, 3.0, jnp.float32)
    for scale in (1, 2, 3):
        got = tritonplug.triton_call(X, (Y * scale, z), N, kernel=tuple_add_kernel, out_type=SPEC, grid=(1,),
                                     BLOCK=N)
        np.testing.assert_allclose(got, X + Y * scale * z, rtol=1e-5, atol=1e-6)  # an FMA or not


def test_a_kernel_with_no_input_array_repeats():
    """No array operand at all (only the output): a recorded program of no arguments."""
    out = jax.ShapeDtypeStruct((4, 3, 5), jnp.int32)
    k, j, i = np.meshgrid(np.arange(4), np.arange(3), np.arange(5), indexing="ij")
    for _ in range(4):  # the full path, the quick key, then the runner
        got = tritonplug.triton_call(kernel=grid3_kernel, out_type=out, grid=(5, 3, 4), NX=5, NY=3)
        np.testing.assert_array_equal(got, i + 10 * j + 100 * k)
    assert id(grid3_kernel) in state.memo.recent


@triton.jit
def mode_kernel(x_ptr, MODE: tl.constexpr, out_ptr):
    offs = tl.arange(0, 64)
    x = tl.load(x_ptr + offs)
    if MODE == "neg":
        x = -x
    tl.store(out_ptr + offs, x)


def test_one_array_followed_by_a_string_constexpr_repeats():
    """One array by position, then a positional ``str`` constexpr: the quick path gathers the array alone."""
    for scale in (1, 2, 3):
        got = tritonplug.triton_call(X * scale, "neg", kernel=mode_kernel, out_type=SPEC, grid=(1,))
        np.testing.assert_array_equal(got, -X * scale)


# ------------------------------------------------------------------ how many records (runners.remember)

def _quick_keys_of_repeats(monkeypatch, count: int, rounds: int) -> int:
    """``count`` forms of one call (sizes 8, 16, …), each made twice, then repeated ``rounds`` times, each repeat
    checked against NumPy: how many quick keys the repeats built (the kernel's runner holds
    ``runners.RECENT_PER_KERNEL`` forms; a form past them takes the quick key)."""
    forms = [(jnp.arange(n, dtype=jnp.float32), jax.ShapeDtypeStruct((n,), jnp.float32), n)
             for n in range(8, 8 * count + 1, 8)]
    for _ in range(2):
        for x, spec, n in forms:
            add(x, x, n, out_type=spec)
    quick = _counting(monkeypatch, keys, "quick_key")
    for _ in range(rounds):
        for x, spec, n in forms:
            np.testing.assert_array_equal(add(x, x, n, out_type=spec), x + x)
    return quick[0]


def test_four_forms_of_a_call_each_repeat_without_a_key(monkeypatch):
    assert _quick_keys_of_repeats(monkeypatch, 4, 1) == 0


def test_a_fifth_form_takes_the_quick_key_on_every_call(monkeypatch):
    assert _quick_keys_of_repeats(monkeypatch, 5, 3) == 3  # the fifth form's, once a round


@triton.jit
def scale_kernel(x_ptr, scale, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * scale, mask=offs < n)


def test_a_float_scalar_of_a_new_object_each_call_writes_the_runner_once(monkeypatch):
    """A float's guard is identity (another object of the same value takes the quick key): a loop that makes a new
    float each call has one record, not one more per call until the kernel is full, each a runner written again."""
    written = _counting(monkeypatch, runners, "write")
    for _ in range(6):
        got = tritonplug.triton_call(X, float("2.5"), N, kernel=scale_kernel, out_type=SPEC, grid=(1,),
                                     BLOCK=N)
        np.testing.assert_array_equal(got, X * 2.5)
    assert written[0] == 1 and len(state.memo.recent[id(scale_kernel)].repeats) == 1


# ------------------------------------------------------------------ a keyword's name in the runner (guards._shown)

@triton.jit
def long_name_kernel(x_ptr, out_ptr, A_CONSTEXPR_WHOSE_NAME_IS_LONGER_THAN_ANY_COMMENT_SHOWS: tl.constexpr):
    offs = tl.arange(0, 64)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + A_CONSTEXPR_WHOSE_NAME_IS_LONGER_THAN_ANY_COMMENT_SHOWS)


def test_a_keyword_with_a_long_name_is_recorded_and_repeats():
    for scale in (1, 2, 3, 4):
        got = tritonplug.triton_call(X * scale, kernel=long_name_kernel, out_type=SPEC, grid=(1,),
                                     A_CONSTEXPR_WHOSE_NAME_IS_LONGER_THAN_ANY_COMMENT_SHOWS=7)
        np.testing.assert_array_equal(got, X * scale + 7)
    assert id(long_name_kernel) in state.memo.recent
