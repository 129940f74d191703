"""The call's keys (``eager.keys``), written from the table of argument kinds (``eager.kinds``), against a plain
description of a call written here without the table: two calls have the same quick key exactly where they are the
same call (every value of the same type and value, arrays of the same aval, floats to the bit, the same keyword
names in the same order, the same outputs), and the same general key where they are the same call up to keyword
order. Drawn pairs of calls, each differing in at most one part."""

from __future__ import annotations

import linecache
import struct

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tritonplug.eager import keys, kinds

KERNEL = object()
SPEC = jax.ShapeDtypeStruct((8,), jnp.float32)
_A, _B = jnp.ones(8, jnp.float32), jnp.zeros(8, jnp.float32)  # one aval
VALUES = [_A, _B, jnp.ones(4, jnp.float32), jnp.ones(8, jnp.float16), np.ones(8, np.float32), np.ones(4, np.float32),
          7, int("7"), 8, True, False, 1, 0, 1.0, 0.0, -0.0, float("0.0"), 2.5, "a", "".join("a"), "b", None, (1,),
          tuple([1]), (True,), (1.0,), (1, 1), (), np.float32(1.0), np.int32(1), [1]]
NAMES = ["grid", "BLOCK", "flag", "y"]  # grid: an option
OUTS = [SPEC, jax.ShapeDtypeStruct((8,), jnp.float32), jax.ShapeDtypeStruct((8.0,), jnp.float32),
        jax.ShapeDtypeStruct((8,), jnp.float16), jax.ShapeDtypeStruct((8, 1), jnp.float32), (SPEC,), (SPEC, SPEC),
        (SPEC, jax.ShapeDtypeStruct((4,), jnp.float32)), [SPEC]]


def described(value):
    """A value as binding sees it, exactly: its type and value, an array's aval, a float's bits."""
    if isinstance(value, jax.Array):
        return ("jax array", value.aval)
    if isinstance(value, np.ndarray):
        return ("numpy array", value.shape, value.dtype)
    if isinstance(value, float):
        return (type(value), struct.pack("<d", value))
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(map(described, value)))
    if isinstance(value, jax.ShapeDtypeStruct):
        return ("out", described(value.shape), value.dtype)
    return (type(value), value)


def the_call(args, kwargs, out, sort=False):
    keywords = [(name, described(value)) for name, value in kwargs.items()]
    return described(args), tuple(sorted(keywords) if sort else keywords), described(out)


@st.composite
def calls(draw):
    args = tuple(draw(st.lists(st.sampled_from(VALUES), max_size=3)))
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
    return args, {name: draw(st.sampled_from(VALUES)) for name in names}, draw(st.sampled_from(OUTS))


@st.composite
def pairs(draw):
    """A call and another: the same, with one part drawn again, its keywords reordered, or any other call."""
    first = draw(calls())
    args, kwargs, out = first
    change = draw(st.sampled_from(["arg", "keyword", "order", "out", "any"]))
    if change == "arg" and args:
        args = tuple(draw(st.sampled_from(VALUES)) if i == draw(st.integers(0, len(args) - 1)) else a
                     for i, a in enumerate(args))
    elif change == "keyword" and kwargs:
        kwargs = {**kwargs, draw(st.sampled_from(sorted(kwargs))): draw(st.sampled_from(VALUES))}
    elif change == "order":
        kwargs = dict(reversed(kwargs.items()))
    elif change == "out":
        out = draw(st.sampled_from(OUTS))
    elif change == "any":
        return first, draw(calls())
    return first, (args, kwargs, out)


#: near misses drawn rarely: a zero's sign, an int for a bool, a name for a name
NEAR = [(((0.0,), {}, SPEC), ((-0.0,), {}, SPEC)), (((1,), {}, SPEC), ((True,), {}, SPEC)),
        (((_A,), {"flag": 1}, SPEC), ((_A,), {"BLOCK": 1}, SPEC))]


@settings(max_examples=400)
@given(pairs())
@example(NEAR[0])
@example(NEAR[1])
@example(NEAR[2])
def test_two_calls_have_one_quick_key_exactly_where_they_are_the_same_call(pair):
    (first, second) = pair
    one, other = (keys.quick_key(KERNEL, *call, True) for call in pair)
    if one is not None and other is not None:
        assert (one == other) == (the_call(*first) == the_call(*second)), pair


@settings(max_examples=400)
@given(pairs())
@example(NEAR[0])
@example(NEAR[1])
@example(NEAR[2])
def test_two_calls_have_one_general_key_exactly_where_they_are_the_same_call_up_to_keyword_order(pair):
    (first, second) = pair
    one, other = (keys.signature(KERNEL, *call) for call in pair)
    if one is not None and other is not None:
        assert (one == other) == (the_call(*first, sort=True) == the_call(*second, sort=True)), pair


def test_what_takes_no_quick_key():
    def quick(*args, out=SPEC, **kwargs):
        return keys.quick_key(KERNEL, args, kwargs, out, True)

    assert quick(_A, 7, grid=(1,), BLOCK=8, y=_B) is not None
    for refused in (quick(_A, grid=_A), quick(_A, grid=np.ones(1)), quick(_A, grid=(1,), zeroed_outputs=(0,)),
                    quick(_A, grid=[1]), quick(_A, (1.0,)), quick(np.float32(1.0)), quick(_A, out=[SPEC]),
                    quick(_A, out=jax.ShapeDtypeStruct((8.0,), jnp.float32)), quick(_A, out={"a": SPEC})):
        assert refused is None


def test_the_table_gives_each_value_one_quick_kind_and_no_option_an_array():
    quick = [t for kind in kinds.OPERANDS for t in kind.types]
    assert len(quick) == len(set(quick))
    assert not any(kind.types and kind.types[0] in (kinds.ARRAY, np.ndarray) for kind in kinds.OPTION_VALUES)
    assert all(kind.guard is not None or kind.types == (np.ndarray,) for kind in kinds.OPERANDS if kind.types)


def test_the_generated_keys_are_in_linecache():
    for name, source in keys.SOURCES.items():
        code = getattr(keys, name).__code__
        assert code.co_filename.startswith("<tritonplug eager: ")
        assert "".join(linecache.getlines(code.co_filename)) == source
