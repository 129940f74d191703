"""The eager loop's repeats (``eager.runners``): a call that repeats one of its kernel's recent calls runs that call's
program without a key being built, and only a call whose quick key would be the same does (drawn pairs of
calls below); every near miss takes the quick key and behaves as it would unmemoised."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from hypothesis import given, settings
from hypothesis import strategies as st
from kernels import add_kernel, gapped_sub_kernel, two_outputs_kernel
from test_debug_replay import unmasked_copy
from tuning_kernels import BLOCKS, tagged_copy_kernel

import tritonplug
from tritonplug.debug import OutOfBoundsError
from tritonplug.eager import keys, runners
from tritonplug.process.state import CallMemo, state

pytestmark = requires_backend("interpret")

N = 64
SPEC = jax.ShapeDtypeStruct((N,), jnp.float32)


@pytest.fixture(autouse=True)
def _no_memoised_calls():
    """Each test starts with no memoised call (another module's, on this worker): what it counts is its own doing."""
    state.memo.clear()


@pytest.fixture
def keys_built(monkeypatch):
    """How many quick keys were built (each a call that no recent call matched)."""
    count = [0]
    real = keys.quick_key

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(keys, "quick_key", counting)
    return count


def add(x, y, n=N, out=SPEC, **kwargs):
    return tritonplug.triton_call(x, y, n, kernel=add_kernel, out_type=out, grid=(1,), BLOCK=N, **kwargs)


def test_a_loop_repeats_without_keys_and_computes_with_its_new_arrays(keys_built):
    x, y = jnp.arange(N, dtype=jnp.float32), jnp.ones(N, jnp.float32)
    add(x, y), add(x, y)  # the first call binds; the second is found by its key and recorded
    keys_built[0] = 0
    for scale in (2, 3, 4):
        z = x * scale
        np.testing.assert_array_equal(add(z, y), z + y)
    assert keys_built[0] == 0


def test_kernels_and_shapes_called_in_turn_each_repeat(keys_built):
    x, y = jnp.arange(N, dtype=jnp.float32), jnp.full(N, 2.0, jnp.float32)
    half = jax.ShapeDtypeStruct((N // 2,), jnp.float32)

    def step():
        a = add(x, y)
        b = tritonplug.triton_call(x, N, y, kernel=gapped_sub_kernel, out_type=SPEC, grid=(1,), BLOCK=N)
        c = add(x[:N // 2], y[:N // 2], N // 2, half)
        return a, b, c

    step(), step()
    keys_built[0] = 0
    a, b, c = step()
    np.testing.assert_array_equal(a, x + y)
    np.testing.assert_array_equal(b, x - y)
    np.testing.assert_array_equal(c, (x + y)[:N // 2])
    assert keys_built[0] == 0


def test_a_loop_over_more_forms_than_are_recorded_writes_no_guard_after_the_first_ones(monkeypatch):
    written = []
    real = runners.write
    monkeypatch.setattr(runners, "write", lambda *a: written.append(1) or real(*a))
    forms = [(jnp.arange(n, dtype=jnp.float32), jax.ShapeDtypeStruct((n,), jnp.float32), n)
             for n in (8, 16, 24, 32, 40, 48)]  # more than runners.RECENT_PER_KERNEL
    for _ in range(4):
        for x, spec, n in forms:
            np.testing.assert_array_equal(add(x, x, n, spec), x + x)
    assert len(written) == runners.RECENT_PER_KERNEL  # each record: the runner written again, once
    assert len(state.memo.recent[id(add_kernel)].repeats) == runners.RECENT_PER_KERNEL


def test_an_operand_by_keyword_repeats_and_each_call_computes_with_its_own_arrays(keys_built):
    """``n`` by keyword: the record gathers its arrays by binding the call again, not by position."""
    x, y = jnp.arange(N, dtype=jnp.float32), jnp.ones(N, jnp.float32)

    def by_keyword(a, b):
        return tritonplug.triton_call(a, b, kernel=add_kernel, out_type=SPEC, grid=(1,), n=N, BLOCK=N)

    by_keyword(x, y), by_keyword(x, y)
    assert state.memo.recent[id(add_kernel)].repeats[0].entry.positions is None
    keys_built[0] = 0
    for scale in (2, 3):
        np.testing.assert_array_equal(by_keyword(x * scale, y - scale), x * scale + y - scale)
    assert keys_built[0] == 0


def test_several_outputs_repeat_as_their_tree(keys_built):
    x = jnp.arange(8, dtype=jnp.float32)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    outs = {"sum": spec, "prod": spec}  # a dict is not recorded: the key path; a tuple is
    for out_value in (outs, (spec, spec)):
        for scale in (2, 2, 2):
            got = tritonplug.triton_call(x, scale, 8, kernel=two_outputs_kernel, out_type=out_value, grid=(1,),
                                         BLOCK=8)
            want = (x + scale, x * scale)
            if isinstance(out_value, dict):
                assert set(got) == {"prod", "sum"}  # leaves in the tree's (sorted) order
                got = (got["prod"], got["sum"])
            assert type(got) is type(out_value) or isinstance(out_value, dict)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


def test_an_out_of_bounds_access_is_reported_on_every_repeat(monkeypatch):
    """Checked mode's report comes from the program; a repeat run by its kernel's runner raises it as the first
    call does. (On the CPU, where checked mode runs, whatever JAX's default device is.)"""
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "1")
    x = jax.device_put(jnp.arange(100, dtype=jnp.float32), jax.devices("cpu")[0])
    for _ in range(4):  # the full path, the quick signature, then the runner
        with pytest.raises(OutOfBoundsError, match=r"unmasked_copy.*x_ptr"):
            tritonplug.triton_call(x, kernel=unmasked_copy, out_type=jax.ShapeDtypeStruct((128,), x.dtype),
                                   grid=(2,), BLOCK=64)
    assert id(unmasked_copy) in state.memo.recent


def test_a_tuning_session_sees_an_autotuned_call_that_the_eager_loop_repeats(private_cache):
    """The session must see the call (to time every configuration), recorded or not."""
    x = jnp.arange(200, dtype=jnp.float32)
    outs = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((1,), jnp.int32))

    def copy(v):
        return tritonplug.triton_call(v, 200, kernel=tagged_copy_kernel, out_type=outs, grid=(7,))  # 7 × 32 ≥ 200

    for _ in range(3):
        np.testing.assert_array_equal(copy(x)[0], x)
    assert id(tagged_copy_kernel) in state.memo.recent
    (tuned,) = tritonplug.tune(copy, x).calls
    assert sorted(t.config["BLOCK"] for t in tuned.timings) == list(BLOCKS)


def test_a_plain_kernel_repeats_inside_a_tuning_session_with_its_result(keys_built):
    x, y = jnp.arange(N, dtype=jnp.float32), jnp.ones(N, jnp.float32)
    add(x, y), add(x, y)
    keys_built[0] = 0
    seen = []
    report = tritonplug.tune(lambda a: seen.append(add(a, y)), x * 3)
    assert report.calls == () and keys_built[0] == 0  # nothing autotuned: the session has nothing to see
    np.testing.assert_array_equal(seen[0], x * 3 + y)


def test_clearing_the_memo_forgets_the_runners(keys_built):
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x), add(x, x)
    state.memo.clear()
    keys_built[0] = 0
    np.testing.assert_array_equal(add(x, x), x + x)
    assert keys_built[0] >= 1 and id(add_kernel) not in state.memo.recent  # the full path, which records nothing


def test_an_equal_int_repeats_and_another_int_does_not(keys_built):
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x, 10), add(x, x, 10)
    keys_built[0] = 0
    got = np.asarray(add(x, x, int("10")))  # equal, another object
    assert keys_built[0] == 0 and np.array_equal(got[:10], np.asarray(x + x)[:10])
    got = np.asarray(add(x, x, 20))
    assert keys_built[0] >= 1 and np.array_equal(got[:20], np.asarray(x + x)[:20])


def test_a_bool_where_an_int_ran_is_another_call(keys_built):
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x, 1), add(x, x, 1)
    keys_built[0] = 0
    add(x, x, True)
    assert keys_built[0] >= 1


def test_the_sign_of_a_zero_scalar_reaches_the_kernel_on_repeats():
    x = jnp.arange(8, dtype=jnp.float32)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    outs = (spec, spec)  # one object for every call: the repeats compare it by identity

    def product(scale):
        return np.asarray(tritonplug.triton_call(x, scale, 8, kernel=two_outputs_kernel, out_type=outs, grid=(1,),
                                                 BLOCK=8)[1])

    zero, negative = 0.0, -0.0
    for _ in range(3):
        assert not np.signbit(product(zero)[1]) and np.signbit(product(negative)[1])
        assert not np.signbit(product(float("0.0"))[1]) and np.signbit(product(float("-0.0"))[1])


def test_turning_x64_on_is_another_call(keys_built):
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x), add(x, x)
    keys_built[0] = 0
    with jax.enable_x64(True):
        np.testing.assert_array_equal(add(x, x), x + x)
    assert keys_built[0] >= 1


def test_numpy_operands_are_never_recorded():
    """A NumPy array can change shape in place, so the same object is not the same call."""
    x = np.arange(N, dtype=np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(add(x, x), x + x)
    assert id(add_kernel) not in state.memo.recent
    x.shape = (2, N // 2)
    np.testing.assert_array_equal(add(x, x), (x + x).ravel())


# ------------------------------------------------------------------ drawn pairs of calls

_A, _B = jnp.ones(8, jnp.float32), jnp.zeros(8, jnp.float32)  # one aval
#: each pool holds values that are identical, equal but distinct, or equal in value but not in type
_ARGS = [_A, _B, jnp.ones(4, jnp.float32), jnp.ones(8, jnp.float16), 7, int("7"), 8, True, 1, 1.0, 0.0, -0.0,
         float("0.0"), np.ones(8, np.float32), None, "a", "".join("a"), (1, 2)]
_KWARG_VALUES = [(1,), tuple([1]), (True,), (1.0,), (1, 1), 64, int("64"), True, 1, "a", None, 2.0, _A, _B,
                 jnp.ones(8, jnp.float16)]
_NAMES = ["grid", "BLOCK", "flag", "y"]  # grid: an option, whose array value takes the full path
_OUTS = [SPEC, jax.ShapeDtypeStruct((N,), jnp.float32), jax.ShapeDtypeStruct(tuple([N]), jnp.float32),
         jax.ShapeDtypeStruct((float(N),), jnp.float32), jax.ShapeDtypeStruct((N,), jnp.float16),
         jax.ShapeDtypeStruct((N,), jnp.bfloat16), jax.ShapeDtypeStruct((N, 1), jnp.float32), (SPEC, SPEC),
         (SPEC, jax.ShapeDtypeStruct(tuple([N]), jnp.float32)), (SPEC, jax.ShapeDtypeStruct((float(N),), jnp.float32)),
         (SPEC,)]


@st.composite
def _call_pairs(draw):
    """A call, and a second one that is the same but for one part drawn again from its pool (or none)."""
    args = tuple(draw(st.lists(st.sampled_from(_ARGS), min_size=1, max_size=4)))
    names = draw(st.lists(st.sampled_from(_NAMES), unique=True, max_size=3))
    kwargs = {name: draw(st.sampled_from(_KWARG_VALUES)) for name in names}
    out = draw(st.sampled_from(_OUTS))

    part = draw(st.sampled_from(["none", "arg", "kwarg", "out", "added", "removed"]))  # the second call's change
    second_args, second_kwargs, second_out = list(args), dict(kwargs), out
    if part == "arg":
        second_args[draw(st.integers(0, len(args) - 1))] = draw(st.sampled_from(_ARGS))
    elif part == "kwarg" and kwargs:
        second_kwargs[draw(st.sampled_from(sorted(kwargs)))] = draw(st.sampled_from(_KWARG_VALUES))
    elif part == "out":
        second_out = draw(st.sampled_from(_OUTS))
    elif part == "added" and len(kwargs) < len(_NAMES):
        second_kwargs[draw(st.sampled_from(sorted(set(_NAMES) - set(kwargs))))] = draw(st.sampled_from(_KWARG_VALUES))
    elif part == "removed" and kwargs:
        del second_kwargs[draw(st.sampled_from(sorted(kwargs)))]
    second = (tuple(second_args), second_kwargs, second_out)
    return (args, kwargs, out), second


def _pair(second_args=None, second_kwargs=None, second_out=None, args=(_A, 7), kwargs=None, out=SPEC):
    kwargs = {"grid": (1,), "BLOCK": 64} if kwargs is None else kwargs
    return ((args, kwargs, out), (args if second_args is None else second_args,
                                  kwargs if second_kwargs is None else second_kwargs,
                                  out if second_out is None else second_out))


_SAME_BUT = [  # each near miss that an equality a step too loose would take for the recorded call
    _pair(second_out=jax.ShapeDtypeStruct((float(N),), jnp.float32)),
    _pair(second_out=jax.ShapeDtypeStruct((N,), jnp.bfloat16)),
    _pair(out=(SPEC, SPEC), second_out=(SPEC, jax.ShapeDtypeStruct((float(N),), jnp.float32))),
    _pair(out=(SPEC, SPEC), second_out=(SPEC, jax.ShapeDtypeStruct((N,), jnp.float16))),
    _pair(second_args=(_A, True)), _pair(second_args=(_A, 7.0)), _pair(second_args=(_B, int("7"))),
    _pair(second_kwargs={"grid": (True,), "BLOCK": 64}), _pair(second_kwargs={"grid": (1.0,), "BLOCK": 64}),
    _pair(second_kwargs={"grid": tuple([1]), "BLOCK": int("64")}), _pair(second_kwargs={"BLOCK": 64, "grid": (1,)}),
    _pair(second_kwargs={"grid": (1,), "flag": 64}), _pair(args=(_A, 0.0), second_args=(_A, -0.0)),
    _pair(second_kwargs={"grid": (1,), "BLOCK": 64, "flag": None}), _pair(second_kwargs={"grid": (1,)}),
    _pair(kwargs={"grid": (1,), "y": _A}, second_kwargs={"grid": (1,), "y": jnp.ones(8, jnp.float16)}),
    _pair(args=(_A, None), second_args=(_A, "a")), _pair(args=(_A, "a"), second_args=(_A, "b")),
]


@settings(max_examples=300)
@given(_call_pairs())
def test_a_call_matches_a_record_only_where_its_quick_key_is_the_records(pair):
    _check_pair(pair)


@pytest.mark.parametrize("pair", _SAME_BUT)
def test_near_misses_match_only_where_their_quick_key_is_the_records(pair):
    _check_pair(pair)


def _check_pair(pair):
    first, second = pair
    kernel, entry, memo = object(), _FakeEntry(), CallMemo()
    key = keys.quick_key(kernel, *first, True)
    if key is None:
        return
    runners.remember(memo, entry, kernel, *first)
    if memo.recent:
        assert _recorded(memo.recent, kernel, *first) is entry  # a call repeats itself
    if _recorded(memo.recent, kernel, *second) is entry:
        args, kwargs, out = second
        assert set(kwargs) == set(first[1])
        in_first_order = {name: kwargs[name] for name in first[1]}  # order names another entry, not another call
        assert keys.quick_key(kernel, args, in_first_order, out, True) == key


def _recorded(recent, kernel, args, kwargs, out):
    """The entry of the record whose guard holds for this call, as ``triton_call``'s runner picks it."""
    known = recent.get(id(kernel))
    return None if known is None else known.match(kernel, args, kwargs, out)


class _FakeEntry:
    """What a record reads of its entry; the drawn calls are never run, only matched."""

    positions, single, out_tree, sources, names = (0,), True, None, (("a", ()),), ("a",)

    @staticmethod
    def dispatch(*arrays):
        raise AssertionError("a drawn call is matched, never run")
