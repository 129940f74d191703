"""``triton_call(vmap_method=...)``: JAX's ``ffi_call`` names for how a call transforms under ``jax.vmap``.

``sequential`` (the default) loops, one launch per element; ``sequential_unrolled`` unrolls that loop;
``broadcast_all`` and ``expand_dims`` launch once over a leading batch dimension of every array, the grid
resolved from the batched shapes (tests/vmap_kernels.py). Checked against ``jnp`` under ``jax.vmap``, nested
too, with ``in_axes`` mixing None, 0 and 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_backend
from kernels import add_kernel
from vmap_kernels import accumulate_rows_kernel, rows, rows_mul, scale_columns

import tritonplug

pytestmark = requires_backend("interpret")

M, N = 3, 20  # 3 rows of 20 (BLOCK 32: a masked tail)
B, C = 4, 2  # batch sizes, outer and inner


def data(*shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))


def launches(fn, *args) -> tuple[int, bool, bool]:
    """(tritonplug calls in the traced program, whether it maps over the batch (a ``scan``), whether the
    compiled program loops (a ``while``: an unrolled scan has none))."""
    text = str(jax.make_jaxpr(fn)(*args))
    lowered = jax.jit(fn).lower(*args).as_text()
    return text.count("tritonplug_call"), "scan" in text, "while" in lowered


@pytest.mark.parametrize("in_axes", [(0, 0), (0, None), (None, 0), (1, 0), (None, 1)])
@pytest.mark.parametrize("method", ["broadcast_all", "sequential", "sequential_unrolled"])
def test_a_row_kernel_under_vmap_matches_jnp(method, in_axes):
    x = data(B, M, N) if in_axes[0] == 0 else data(M, B, N) if in_axes[0] == 1 else data(M, N)
    y = data(B, M, N, seed=1) if in_axes[1] == 0 else data(M, B, N, seed=1) if in_axes[1] == 1 else data(M, N, seed=1)
    fn = jax.vmap(lambda a, b: rows_mul(a, b, method), in_axes=in_axes)
    np.testing.assert_allclose(np.asarray(fn(x, y)), np.asarray(jax.vmap(jnp.multiply, in_axes=in_axes)(x, y)),
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(x, y)), np.asarray(fn(x, y)), rtol=1e-6)


@pytest.mark.parametrize(("method", "expected"), [
    ("broadcast_all", (1, False, False)), ("expand_dims", (1, False, False)), ("sequential", (1, True, True)),
    ("sequential_unrolled", (1, True, False))])
def test_each_method_launches_as_its_name_says(method, expected):
    """One launch, no map over the batch, for the batch methods; a loop for sequential; unrolled, no loop."""
    x, y = data(B, M, N), data(B, M, N, seed=1)
    assert launches(jax.vmap(lambda a, b: rows_mul(a, b, method)), x, y) == expected


@pytest.mark.parametrize(("outer", "inner"), [((0, None), (1, 0)), ((None, 0), (0, 0)), ((1, 0), (None, 0))])
@pytest.mark.parametrize("method", ["broadcast_all", "sequential"])
def test_nested_vmap_matches_jnp(method, outer, inner):
    def shaped(axes_outer, axis_inner, seed):  # the operand's shape for its axes at each level
        shape = [M, N]
        if axis_inner is not None:
            shape.insert(axis_inner, C)
        if axes_outer is not None:
            shape.insert(axes_outer, B)
        return data(*shape, seed=seed)

    x, y = shaped(outer[0], inner[0], 0), shaped(outer[1], inner[1], 1)
    ours = jax.vmap(jax.vmap(lambda a, b: rows_mul(a, b, method), in_axes=inner), in_axes=outer)
    want = jax.vmap(jax.vmap(jnp.multiply, in_axes=inner), in_axes=outer)
    np.testing.assert_allclose(np.asarray(ours(x, y)), np.asarray(want(x, y)), rtol=1e-6)
    if method == "broadcast_all":
        assert launches(ours, x, y) == (1, False, False)


@pytest.mark.parametrize("method", ["expand_dims", "broadcast_all"])
def test_weights_read_by_column_stay_unbatched(method):
    """``expand_dims`` passes the unbatched weights with a leading 1, read the same by every element."""
    x, w = data(B, M, N), data(N, seed=1)
    got = jax.vmap(lambda a, b: scale_columns(a, b, method), in_axes=(0, None))(x, w)
    np.testing.assert_allclose(np.asarray(got), np.asarray(x * w), rtol=1e-6)
    jaxpr = str(jax.make_jaxpr(jax.vmap(lambda a, b: scale_columns(a, b, method), in_axes=(0, None)))(x, w))
    passed = "f32[1,20]" if method == "expand_dims" else "f32[4,20]"  # the weights the kernel gets
    assert f"{passed} = broadcast_in_dim" in jaxpr


def test_a_launch_that_cannot_see_the_batch_is_refused():
    """``expand_dims`` with the row operand unbatched: the grid counts x's one row block, whatever the batch."""
    x, w = data(M, N), data(B, N, seed=1)
    with pytest.raises(ValueError, match=r"kernel 'scale_columns_kernel' with vmap_method='expand_dims': the launch "
                                         r"for the batch of 4 is the launch for one element \(grid \(3, 1, 1\)"):
        jax.vmap(scale_columns, in_axes=(None, 0))(x, w)


def test_a_static_grid_is_refused_by_the_batch_methods_and_loops_by_default():
    x = data(B, 64)

    def add(a, method):
        return tritonplug.triton_call(a, a, a.size, kernel=add_kernel, out_type=jax.ShapeDtypeStruct(a.shape, a.dtype),
                                      grid=(1,), BLOCK=64, vmap_method=method)

    with pytest.raises(ValueError, match=r"would compute the first element only.*pass grid as a callable"):
        jax.vmap(lambda a: add(a, "broadcast_all"))(x)
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda a: add(a, "sequential"))(x)), np.asarray(2 * x))


def test_a_batched_ref_is_updated_in_place_by_one_launch():
    x, acc = data(B, M, N), data(B, M, N, seed=1)

    def accumulate(a, start):
        ref = jax.new_ref(start)
        n = a.shape[-1]
        tritonplug.triton_call(a, ref, n, kernel=accumulate_rows_kernel, out_type=(), grid=rows("x_ptr"), BLOCK=32,
                               vmap_method="broadcast_all")
        return ref[...]

    np.testing.assert_allclose(np.asarray(jax.vmap(accumulate)(x, acc)), np.asarray(x + acc), rtol=1e-6)


@pytest.mark.parametrize("name", ["vectorized", "legacy_vectorized", "Sequential", 0])
def test_an_unknown_method_is_refused_at_the_call_naming_the_allowed_ones(name):
    with pytest.raises(ValueError, match=r"vmap_method must be one of \['sequential', 'sequential_unrolled', "
                                         r"'expand_dims', 'broadcast_all'\].*got " + repr(name)):
        rows_mul(data(M, N), data(M, N), name)


def test_none_is_the_default_as_in_ffi_call():
    x, y = data(B, M, N), data(B, M, N, seed=1)
    assert launches(jax.vmap(lambda a, b: rows_mul(a, b, None)), x, y) == (1, True, True)
