"""jax.vmap and autodiff of kernel calls, against per-element loops of eager calls and jnp references.

vmap runs the kernel once per batch element inside the program (tritonplug/lowering/batching.py),
so every batched result must equal a Python loop of unbatched eager calls exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from kernels import accumulate_kernel, add_kernel, atomic_sum_kernel, tuple_add_kernel, two_outputs_kernel

import tritonplug

RNG = np.random.default_rng(7)


def spec(a):
    return jax.ShapeDtypeStruct(a.shape, a.dtype)


def add(x, y):
    return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_shape=spec(x),
                                  grid=(triton.cdiv(x.size, 32),), BLOCK=32)


def accumulate(x, acc):
    """acc + x, written in place into acc's buffer (an aliased output with no kernel parameter)."""
    return tritonplug.triton_call(x, acc, x.size, kernel=accumulate_kernel, out_shape=spec(acc),
                                  grid=(triton.cdiv(x.size, 32),), input_output_aliases={1: 0}, BLOCK=32)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def put(device, *arrays):
    return [jax.device_put(a, device) for a in arrays]


def loop(fn, in_axes, args, out_axes=0):
    """The reference: one eager call per batch element, results stacked along ``out_axes``."""
    size = next(np.shape(a)[ax] for a, ax in zip(args, in_axes, strict=True) if ax is not None)
    results = [fn(*[a if ax is None else jnp.take(a, b, axis=ax) for a, ax in zip(args, in_axes, strict=True)])
               for b in range(size)]
    return jax.tree_util.tree_map(lambda *r: np.stack([np.asarray(v) for v in r], axis=out_axes), *results)


def assert_same(got, want):
    jax.tree_util.tree_map(lambda g, w: np.testing.assert_array_equal(np.asarray(g), w), got, want)


@pytest.mark.parametrize("in_axes,out_axes", [((0, 0), 0), ((0, None), 0), ((None, 1), 0), ((1, 0), 1)])
def test_vmap_matches_a_loop_of_calls(device, in_axes, out_axes):
    n, batch = 40, 3
    x = normal(batch, n) if in_axes[0] == 0 else normal(n, batch) if in_axes[0] == 1 else normal(n)
    y = normal(batch, n) if in_axes[1] == 0 else normal(n, batch) if in_axes[1] == 1 else normal(n)
    args = put(device, x, y)
    want = loop(add, in_axes, args, out_axes)
    batched = jax.vmap(add, in_axes=in_axes, out_axes=out_axes)
    assert_same(batched(*args), want)
    assert_same(jax.jit(batched)(*args), want)


def test_vmap_with_a_scalar_and_two_outputs(device):
    (x,) = put(device, normal(4, 70))

    def f(x):
        s = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return tritonplug.triton_call(x, 1.5, x.size, kernel=two_outputs_kernel, out_shape={"a_sum": s, "b_prod": s},
                                      grid=(3,), BLOCK=32)

    out = jax.jit(jax.vmap(f))(x)
    assert_same(out, loop(f, (0,), [x]))
    np.testing.assert_allclose(np.asarray(out["b_prod"]), np.asarray(x) * 1.5, rtol=1e-6)


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0)])
def test_vmap_of_an_aliased_call(device, in_axes):
    """An unbatched aliased input is broadcast first: every element updates its own copy."""
    n, batch = 50, 3
    x = normal(batch, n) if in_axes[0] == 0 else normal(n)
    acc = normal(batch, n) if in_axes[1] == 0 else normal(n)
    xd, accd = put(device, x, acc)
    want = loop(accumulate, in_axes, [xd, accd])
    np.testing.assert_allclose(want, np.broadcast_to(x + acc, want.shape), rtol=1e-6)
    assert_same(jax.vmap(accumulate, in_axes=in_axes)(xd, accd), want)
    assert_same(jax.jit(jax.vmap(accumulate, in_axes=in_axes))(xd, accd), want)
    np.testing.assert_array_equal(np.asarray(accd), acc)  # the caller's array is untouched


def test_vmap_zeroes_outputs_per_element(device):
    (x,) = put(device, normal(3, 300))

    def total(x):
        return tritonplug.triton_call(x, x.size, kernel=atomic_sum_kernel,
                                      out_shape=jax.ShapeDtypeStruct((1,), x.dtype), grid=(3,), zeroed_outputs=(0,),
                                      BLOCK=128)

    out = jax.jit(jax.vmap(total))(x)
    np.testing.assert_allclose(np.asarray(out), loop(total, (0,), [x]), rtol=0, atol=1e-6 * np.abs(np.asarray(x)).sum())
    np.testing.assert_allclose(np.asarray(out)[:, 0], np.asarray(x).sum(1), rtol=0,
                               atol=1e-6 * np.abs(np.asarray(x)).sum())  # sums may be near 0


def test_nested_vmap(device):
    x, y = put(device, normal(2, 3, 20), normal(3, 20))
    inner = jax.vmap(add)
    want = loop(lambda x: loop(add, (0, 0), [x, y]), (0,), [x])
    assert_same(jax.vmap(inner, in_axes=(0, None))(x, y), want)
    assert_same(jax.jit(jax.vmap(inner, in_axes=(0, None)))(x, y), want)


def test_vmap_of_a_tuple_operand(device):
    x, y, z = put(device, normal(4, 30), normal(30), normal(4, 30))

    def f(x, y, z):
        return tritonplug.triton_call(x, (y, z), x.size, kernel=tuple_add_kernel, out_shape=spec(x), grid=(1,),
                                      BLOCK=32)

    want = loop(f, (0, None, 0), [x, y, z])
    assert_same(jax.jit(jax.vmap(f, in_axes=(0, None, 0)))(x, y, z), want)


def accumulate_into_ref(x, acc):
    ref = jax.new_ref(acc)
    assert tritonplug.triton_call(x, ref, x.size, kernel=accumulate_kernel, out_shape=(), grid=(1,), BLOCK=64) == ()
    return ref[...]


@pytest.mark.parametrize("in_axes", [(0, 0), (0, None), (None, 1)])
def test_vmap_of_a_call_on_a_ref(device, in_axes):
    n, batch = 40, 3
    x = normal(batch, n) if in_axes[0] == 0 else normal(n)
    acc = normal(batch, n) if in_axes[1] == 0 else normal(n, batch) if in_axes[1] == 1 else normal(n)
    xd, accd = put(device, x, acc)
    want = loop(accumulate_into_ref, in_axes, [xd, accd])
    np.testing.assert_allclose(want, np.asarray(loop(lambda x, a: x + a, in_axes, [xd, accd])), rtol=1e-6)
    assert_same(jax.vmap(accumulate_into_ref, in_axes=in_axes)(xd, accd), want)
    assert_same(jax.jit(jax.vmap(accumulate_into_ref, in_axes=in_axes))(xd, accd), want)


def test_nested_vmap_of_a_call_on_a_ref(device):
    x, acc = put(device, normal(2, 3, 16), normal(3, 16))
    nested = jax.vmap(jax.vmap(accumulate_into_ref), in_axes=(0, None))
    want = loop(lambda x: loop(accumulate_into_ref, (0, 0), [x, acc]), (0,), [x])
    assert_same(jax.jit(nested)(x, acc), want)


def test_vmap_over_a_ref_argument_updates_it(device):
    x, acc = put(device, normal(3, 16), normal(3, 16))
    ref = jax.new_ref(acc)

    def f(x, r):
        return tritonplug.triton_call(x, r, x.size, kernel=accumulate_kernel, out_shape=(), grid=(1,), BLOCK=16)

    assert jax.vmap(f)(x, ref) == ()
    np.testing.assert_allclose(np.asarray(ref[...]), np.asarray(acc) + np.asarray(x), rtol=1e-6)


def test_vmap_refuses_an_unbatched_ref_written_by_a_batched_call(device):
    x, acc = put(device, normal(3, 16), normal(16))
    ref = jax.new_ref(acc)

    def f(x):
        return tritonplug.triton_call(x, ref, x.size, kernel=accumulate_kernel, out_shape=(), grid=(1,), BLOCK=16)

    with pytest.raises(ValueError, match="not batched"):
        jax.vmap(f)(x)


def test_custom_vmap_fast_path_is_one_launch(device):
    from batched_add import add as batched_add

    x, y = put(device, normal(5, 300), normal(300))
    for in_axes, args in (((0, None), (x, y)), ((None, 0), (y, x)), ((0, 0), (x, x))):
        want = loop(batched_add, in_axes, list(args))
        np.testing.assert_allclose(want, loop(lambda a, b: a + b, in_axes, list(args)), rtol=1e-6)
        assert_same(jax.jit(jax.vmap(batched_add, in_axes=in_axes))(*args), want)
    jaxpr = jax.make_jaxpr(jax.vmap(batched_add, in_axes=(0, None)))(x, y)
    calls = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "tritonplug_call"]
    assert len(calls) == 1 and "while" not in str(jaxpr) and "scan" not in str(jaxpr)
    assert calls[0].params["call"].options.grid == (3, 5, 1)  # (cdiv(300, 128), batch)
    fallback = jax.make_jaxpr(jax.vmap(add, in_axes=(0, None)))(x, y)
    assert "scan" in str(fallback) or "while" in str(fallback)  # the general rule loops


@triton.jit
def scale_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3.0, mask=offs < n)


def triple(x):
    return tritonplug.triton_call(x, x.size, kernel=scale_kernel, out_shape=spec(x), grid=(1,), BLOCK=64)


@pytest.mark.parametrize("transform", ["grad", "jvp", "vjp"])
def test_autodiff_points_to_custom_vjp(transform):
    x = jnp.ones(8, jnp.float32)
    message = (r"jax_triton.triton_call does not support automatic differentiation.*"
               r"jax\.custom_jvp or jax\.custom_vjp.*")
    with pytest.raises(NotImplementedError, match=message):
        if transform == "grad":
            jax.grad(lambda x: triple(x).sum())(x)
        elif transform == "jvp":
            jax.jvp(triple, (x,), (x,))
        else:
            jax.vjp(triple, x)[1](x)


def test_custom_vjp_layer_norm_matches_jax_grad(device):
    from layer_norm import layer_norm, layer_norm_reference

    x, w, b, dy = put(device, normal(2, 3, 40), 1 + 0.1 * normal(40), 0.1 * normal(40), normal(2, 3, 40))

    def loss(fn):
        return lambda x, w, b: jnp.sum(fn(x, w, b) * dy)

    np.testing.assert_allclose(np.asarray(layer_norm(x, w, b)), np.asarray(layer_norm_reference(x, w, b)),
                               rtol=1e-5, atol=1e-5)
    want = jax.grad(loss(layer_norm_reference), argnums=(0, 1, 2))(x, w, b)
    for got in (jax.grad(loss(layer_norm), argnums=(0, 1, 2))(x, w, b),
                jax.jit(jax.grad(loss(layer_norm), argnums=(0, 1, 2)))(x, w, b)):
        for name, g, r in zip(("dx", "dw", "db"), got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-4, err_msg=name)


def test_per_example_gradients_compose_vmap_and_custom_vjp(device):
    from layer_norm import layer_norm, layer_norm_reference

    x, w, b = put(device, normal(3, 2, 24), 1 + 0.1 * normal(24), 0.1 * normal(24))

    def per_example(fn):
        return jax.vmap(jax.grad(lambda x, w, b: jnp.sum(jnp.sin(fn(x, w, b))), argnums=1), in_axes=(0, None, None))

    got = jax.jit(per_example(layer_norm))(x, w, b)
    np.testing.assert_allclose(np.asarray(got), np.asarray(per_example(layer_norm_reference)(x, w, b)),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("example", ["layer_norm", "batched_add"])
def test_examples_run(device, example):
    import importlib

    module = importlib.import_module(example)
    with jax.default_device(device):
        module.main()
