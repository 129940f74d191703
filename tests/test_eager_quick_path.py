"""``triton_call``'s quick path: a repeat eager call (``out_type=``) runs its memoised program at once, and only an
identical call does. Every variant here differs from a memoised call in something its quick key must see (a type,
a sign, a dtype, the x64 mode, a deprecated option); each must take the full path (``api._call``) and behave as
it would unmemoised."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from kernels import add_kernel, gapped_add_kernel, two_outputs_kernel

import tritonplug
from tritonplug import api
from tritonplug.process.state import state

pytestmark = requires_backend("interpret")

N = 64


@pytest.fixture(autouse=True)
def _no_memoised_calls():
    """Each test starts with no memoised call (another module's, on this worker): what it counts is its own doing."""
    state.memo.clear()


@pytest.fixture
def full_path(monkeypatch):
    """The calls that reached the full path (``api._call``), by their keywords."""
    seen: list[dict] = []
    real = api._call

    def spy(args, kernel, out_shape, out_type, kwargs):
        seen.append(dict(kwargs))
        return real(args, kernel, out_shape, out_type, kwargs)

    monkeypatch.setattr(api, "_call", spy)
    return seen


def add(x, y, n=N, out=None, **kwargs):
    kwargs = {"grid": (1,), "BLOCK": N, **kwargs}
    out = jax.ShapeDtypeStruct(x.shape, x.dtype) if out is None else out
    return tritonplug.triton_call(x, y, n, kernel=add_kernel, out_type=out, **kwargs)


def test_a_repeat_call_skips_the_full_path_and_computes_with_its_new_arrays(full_path):
    x, y = jnp.arange(N, dtype=jnp.float32), jnp.ones(N, jnp.float32)
    np.testing.assert_array_equal(add(x, y), x + y)
    full_path.clear()
    for scale in (2, 3):
        z = x * scale  # new arrays, same signature
        np.testing.assert_array_equal(add(z, y), z + y)
    assert full_path == []


def test_arrays_between_scalars_are_picked_by_position(full_path):
    x, y = jnp.arange(N, dtype=jnp.float32), jnp.full(N, 2.0, jnp.float32)
    spec = jax.ShapeDtypeStruct((N,), jnp.float32)
    for _ in range(3):
        out = tritonplug.triton_call(x, N, y, kernel=gapped_add_kernel, out_type=spec, grid=(1,), BLOCK=N)
        np.testing.assert_array_equal(out, x + y)
    assert len(full_path) == 1


def test_numpy_and_weak_typed_operands_repeat_correctly(full_path):
    x = np.arange(N, dtype=np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(add(x, x), x + x)
    weak = jnp.asarray(1.5) * jnp.ones(N, jnp.float32)  # strong: the ones are float32
    weak_scalar_array = jnp.full(N, 1.5)  # weak-typed? either way its repeats must be right
    for operand in (weak, weak_scalar_array, weak):
        np.testing.assert_array_equal(add(operand, operand), operand + operand)


def test_an_int_and_a_bool_scalar_are_different_calls(full_path):
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x, n=1)
    full_path.clear()
    out = add(x, x, n=True)  # equal to 1, hashes like 1: binds as i1 all the same
    assert len(full_path) == 1
    np.testing.assert_array_equal(np.asarray(out)[:1], np.asarray(x + x)[:1])


def test_grid_of_a_bool_is_refused_after_the_same_grid_of_ints_ran():
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x, grid=(1,))
    with pytest.raises((TypeError, ValueError)):
        add(x, x, grid=(True,))


def test_an_int_and_a_float_constexpr_are_different_calls(full_path):
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x, BLOCK=N)
    full_path.clear()
    try:
        add(x, x, BLOCK=float(N))
    except Exception:  # noqa: BLE001 (refused or run: either way not the int call's program)
        pass
    assert len(full_path) == 1


def test_the_sign_of_a_zero_scalar_reaches_the_kernel():
    x = jnp.arange(8, dtype=jnp.float32)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)

    def product(scale):
        return np.asarray(tritonplug.triton_call(x, scale, 8, kernel=two_outputs_kernel, out_type=(spec, spec),
                                                 grid=(1,), BLOCK=8)[1])

    for _ in range(2):
        assert not np.signbit(product(0.0)[1]) and np.signbit(product(-0.0)[1])


def test_a_float_output_dimension_is_refused_after_the_int_one_ran():
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x, out=jax.ShapeDtypeStruct((N,), jnp.float32))
    with pytest.raises(TypeError, match="non-static"):
        add(x, x, out=jax.ShapeDtypeStruct((float(N),), jnp.float32))


def test_another_dtype_or_shape_misses(full_path):
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x)
    full_path.clear()
    h = x.astype(jnp.float16)
    np.testing.assert_array_equal(add(h, h), h + h)
    np.testing.assert_array_equal(add(x[:32], x[:32], n=32), x[:32] + x[:32])
    assert len(full_path) == 2


def test_turning_x64_on_is_another_call(full_path):
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x)
    full_path.clear()
    with jax.enable_x64(True):
        np.testing.assert_array_equal(add(x, x), x + x)
    assert len(full_path) == 1
    full_path.clear()
    add(x, x)
    assert full_path == []


def test_a_deprecated_option_warns_on_every_repeat():
    x = jnp.arange(N, dtype=jnp.float32)
    for _ in range(3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            add(x, x, zeroed_outputs=(0,))
        assert any("zeroed_outputs is deprecated" in str(w.message) for w in caught)


def test_a_deleted_operand_is_refused_on_a_repeat():
    x, y = jnp.arange(N, dtype=jnp.float32), jnp.ones(N, jnp.float32)
    add(x, y)
    gone = jnp.ones(N, jnp.float32)
    gone.delete()
    with pytest.raises(RuntimeError, match="deleted"):
        add(x, gone)


def test_traced_operands_bind_inside_jit_after_eager_repeats():
    x = jnp.arange(N, dtype=jnp.float32)
    add(x, x)
    add(x, x)
    np.testing.assert_array_equal(jax.jit(add)(x, x), x + x)
    assert "tritonplug_call" in str(jax.make_jaxpr(add)(x, x))
