"""``tritonplug.launch(kernel)[grid](...)``: Triton's launch syntax on JAX values (tritonplug/porting/launcher.py)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from kernels import add_kernel, heuristic_add_kernel

import tritonplug


@triton.jit
def axpy_rows(y_ptr, y_stride, x_ptr, x_stride, n_cols, a, BLOCK: tl.constexpr):
    """``y[row] += a * x[row]``: the written pointer first and its stride second, as Liger's kernels are."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask)
    y = tl.load(y_ptr + row * y_stride + cols, mask=mask)
    tl.store(y_ptr + row * y_stride + cols, y + a * x, mask=mask)


@triton.jit
def scale_kernel(out_ptr, x_ptr, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def sum_and_square(x_ptr, sum_ptr, n, sq_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(sum_ptr, tl.sum(x, axis=0))
    tl.store(sq_ptr + offs, x * x, mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 16})], key=["n"])
@triton.jit
def tuned_scale(out_ptr, x_ptr, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask), mask=mask)


_axpy = tritonplug.launch(axpy_rows)
_scale = tritonplug.launch(scale_kernel)


def _axpy_twice(x):
    """A launcher written as torch launchers are: allocate, read strides, launch, return."""
    x = tritonplug.tensor(x)
    n_rows, n_cols = x.shape
    y = tritonplug.zeros_like(x)
    _axpy[(n_rows,)](y, y.stride(0), x, x.stride(0), n_cols, 2.0, BLOCK=triton.next_power_of_2(n_cols))
    _axpy[(n_rows,)](y, y.stride(0), x, x.stride(0), n_cols, 1.0, BLOCK=triton.next_power_of_2(n_cols))
    return y[...]


X = jnp.arange(15.0, dtype=jnp.float32).reshape(3, 5)


def test_written_first_then_in_place_eager_and_jit():
    """A zeros placeholder is the first launch's output, then updated in place by the second."""
    np.testing.assert_array_equal(_axpy_twice(X), 3 * X)
    np.testing.assert_array_equal(jax.jit(_axpy_twice)(X), 3 * X)


def test_vmap_loops_over_the_batch():
    batch = jnp.stack([X, -2 * X])
    np.testing.assert_array_equal(jax.vmap(_axpy_twice)(batch), 3 * batch)
    np.testing.assert_array_equal(jax.jit(jax.vmap(_axpy_twice))(batch), 3 * batch)


def test_empty_placeholder_is_an_output_and_the_launch_returns_it():
    def f(x):
        out = tritonplug.empty(x.size, dtype=x.dtype)
        value = _scale[(triton.cdiv(x.size, 8),)](out, x, x.size, 0.5, BLOCK=8)
        return value, out[...]

    value, read = jax.jit(f)(X.reshape(-1))
    np.testing.assert_array_equal(value, 0.5 * X.reshape(-1))
    np.testing.assert_array_equal(read, value)


def test_several_outputs_in_signature_order_and_none_when_all_in_place():
    x = jnp.arange(6.0, dtype=jnp.float32)
    total, squares = tritonplug.launch(sum_and_square)[(1,)](
        x, tritonplug.empty(1), x.size, tritonplug.empty_like(x), BLOCK=8)
    assert float(total[0]) == 15.0
    np.testing.assert_array_equal(squares, x * x)
    ref = jax.new_ref(jnp.zeros((1, 6), jnp.float32))
    assert _axpy[(1,)](ref, 6, x, 6, 6, 1.0, BLOCK=8) is None
    np.testing.assert_array_equal(ref[...][0], x)


def test_refs_in_place_and_a_view_of_a_ref_writes_back():
    def f(x):
        ref = jax.new_ref(jnp.ones((15,), jnp.float32))
        flat = tritonplug.tensor(ref)
        rows = flat.view(3, -1)  # another shape: a ref of its own, written back after the launch
        _axpy[(3,)](rows, rows.stride(0), x, x.shape[1], x.shape[1], 1.0, BLOCK=8)
        return ref[...]

    np.testing.assert_array_equal(f(X), 1 + X.reshape(-1))
    np.testing.assert_array_equal(jax.jit(f)(X), 1 + X.reshape(-1))


def test_one_buffer_for_two_parameters_eager_and_jit():
    """``dX = dY`` in place (Liger's backward): one buffer read and written through two parameters."""
    def f(x):
        buf = tritonplug.empty_like(x)
        _scale[(2,)](buf, x, x.size, 2.0, BLOCK=8)
        _scale[(2,)](buf, buf, x.size, 3.0, BLOCK=8)  # reads buf and writes it
        return buf[...]

    x = jnp.arange(16.0, dtype=jnp.float32)
    np.testing.assert_array_equal(f(x), 6 * x)
    np.testing.assert_array_equal(jax.jit(f)(x), 6 * x)


@triton.jit
def _silu(x):
    return x * tl.sigmoid(x)


@triton.jit
def silu_in_place(dy_ptr, stride, dx_ptr, n, BLOCK: tl.constexpr):
    """Liger's ``dX = dY`` shape: the read pointer's values go through a helper, the written one is stored."""
    row = tl.program_id(0).to(tl.int64)
    dy_base = dy_ptr + row * stride
    cols = tl.arange(0, BLOCK)
    y = _silu(tl.load(dy_base + cols, mask=cols < n))
    dx_base = dx_ptr + row * stride
    tl.store(dx_base + cols, y, mask=cols < n)


def test_stored_parameters_are_read_from_the_source():
    from tritonplug.porting.stores import stored_params

    assert stored_params(tritonplug.launch(silu_in_place).facts) == {"dx_ptr", "stride", "BLOCK"}
    assert stored_params(tritonplug.launch(scale_kernel).facts) == {"out_ptr", "BLOCK"}
    x = jnp.linspace(-2.0, 2.0, 12, dtype=jnp.float32).reshape(3, 4)
    buf = tritonplug.tensor(jax.new_ref(x))
    tritonplug.launch(silu_in_place)[(3,)](buf, 4, buf, 4, BLOCK=4)
    np.testing.assert_allclose(buf[...], jax.nn.silu(x), rtol=1e-6)


def test_grid_callable_sees_scalars_and_metaparameters_autotune_and_heuristics():
    x = jnp.arange(20.0, dtype=jnp.float32)
    grid = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731 (as launchers write it)
    out = tritonplug.launch(tuned_scale)[grid](tritonplug.empty_like(x), x, x.size, 2.0)
    np.testing.assert_array_equal(out, 2 * x)
    y = tritonplug.empty_like(x)
    tritonplug.launch(heuristic_add_kernel)[grid](x, x, x.size, y, BLOCK=4)  # EVEN from the heuristic
    np.testing.assert_array_equal(y[...], 2 * x)


def test_keywords_options_and_numpy_inputs():
    x = np.arange(8, dtype=np.float32)
    y = tritonplug.empty_like(x)
    tritonplug.launch(add_kernel)[(1,)](x, y_ptr=x, n=x.size, out_ptr=y, BLOCK=8, num_warps=2, num_stages=1)
    np.testing.assert_array_equal(y[...], 2 * x)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _scaled(x, a):
    return _scale[(triton.cdiv(x.size, 8),)](tritonplug.empty_like(x), x, x.size, a, BLOCK=8)


def _scaled_fwd(x, a):
    return _scaled(x, a), None


def _scaled_bwd(a, _, dy):
    dx = tritonplug.empty_like(dy)
    _scale[(triton.cdiv(dy.size, 8),)](dx, dy, dy.size, a, BLOCK=8)
    return (dx[...],)


_scaled.defvjp(_scaled_fwd, _scaled_bwd)


def test_inside_custom_vjp_under_grad_and_jit():
    x = jnp.arange(10.0, dtype=jnp.float32)
    grad = jax.jit(jax.grad(lambda x: jnp.sum(_scaled(x, 3.0) * x)))(x)
    np.testing.assert_allclose(grad, 6 * x)


def test_handles_answer_torch_calls():
    t = tritonplug.tensor(jnp.zeros((2, 3, 4), jnp.bfloat16))
    assert (t.shape, t.ndim, t.dim(), t.numel(), t.element_size()) == ((2, 3, 4), 3, 3, 24, 2)
    assert (t.stride(), t.stride(0), t.stride(-1), t.size(), t.size(1)) == ((12, 4, 1), 12, 1, (2, 3, 4), 3)
    assert t.view(-1, 4).shape == (6, 4) and t.reshape(24).shape == (24,) and t.contiguous() is t
    assert t.dtype == jnp.bfloat16 and t.is_contiguous() and t.device.type in ("cpu", "cuda", "rocm")
    assert tritonplug.empty(2, 3).dtype == np.float32 and tritonplug.zeros((4,), dtype=jnp.int32).shape == (4,)
    assert triton.cdiv(t.numel(), 5) == 5 and triton.next_power_of_2(t.size(-1) + 1) == 8
    assert t.flatten().shape == (24,) and t.itemsize == 2 and t.is_cuda == (t.device.type == "cuda")
    assert t.new_empty(3, 2).shape == (3, 2) and t.new_zeros((5,), dtype=jnp.int32).dtype == np.int32


def test_bad_input_names_the_argument():
    x = jnp.ones(8, jnp.float32)
    with pytest.raises(TypeError, match="'BLOCK' is a tl.constexpr, but a buffer"):
        _scale[(1,)](tritonplug.empty_like(x), x, 8, 1.0, tritonplug.empty(8))
    with pytest.raises(TypeError, match="missing argument for parameter 'a'"):
        _scale[(1,)](tritonplug.empty_like(x), x, 8, BLOCK=8)
    with pytest.raises(TypeError, match="multiple values for argument 'x_ptr'"):
        _scale[(1,)](tritonplug.empty_like(x), x, x_ptr=x, BLOCK=8)
    with pytest.raises(ValueError, match="view: shape"):
        tritonplug.empty(8).view(3, 3)
    with pytest.raises(TypeError, match="sizes must be"):
        tritonplug.empty(2.5)
    with pytest.raises(TypeError, match="tensor\\(x\\)"):
        tritonplug.tensor([1, 2])
    with pytest.raises(TypeError, match="kernel must be a @triton.jit"):
        tritonplug.launch(lambda x: x)


@tritonplug.torch_launcher(writes="y")
def _axpy_launcher(y, x, a=1.0):
    """A torch launcher body, verbatim: handles in, handles out."""
    shape = y.shape
    y, x = y.view(-1, shape[-1]), x.view(-1, shape[-1])
    _axpy[(y.shape[0],)](y, y.stride(0), x, x.stride(0), y.shape[1], a, BLOCK=triton.next_power_of_2(y.shape[1]))
    return y.view(*shape), x.size(0)


def test_torch_launcher_gives_handles_and_returns_arrays():
    y, rows = _axpy_launcher(jnp.ones((2, 3, 5), jnp.float32), jnp.stack([X[:3], X[:3]]), a=2.0)
    assert isinstance(y, jax.Array) and rows == 6
    np.testing.assert_array_equal(y, 1 + 2 * jnp.stack([X[:3], X[:3]]))
    y = jax.jit(lambda y, x: _axpy_launcher(y, x)[0])(jnp.zeros_like(X), X)
    np.testing.assert_array_equal(y, X)
    with pytest.raises(TypeError, match="has no parameter\\(s\\) \\['z'\\]"):
        tritonplug.torch_launcher(writes=("z",))(_axpy_twice)
    with pytest.raises(TypeError, match="argument 'y' is written in place"):
        _axpy_launcher(1.0, X)


def test_transpose_is_a_writable_copy_and_squeeze_views():
    @tritonplug.torch_launcher(writes="y")
    def rotate(y, x):
        y = y.transpose(0, 1)  # (5, 3): written, then read back transposed, as Liger's RoPE does
        _axpy[(5,)](y, y.stride(0), x.transpose(0, 1), 3, 3, 1.0, BLOCK=4)
        return y.transpose(0, 1)

    np.testing.assert_array_equal(jax.jit(rotate)(jnp.ones_like(X), X), 1 + X)
    t = tritonplug.tensor(jnp.zeros((1, 3, 1, 4)))
    assert t.squeeze().shape == (3, 4) and t.squeeze(2).shape == (1, 3, 4) and t.squeeze(1).shape == t.shape
    assert t.squeeze(0).unsqueeze(0).shape == t.shape and t.unsqueeze(-1).shape == (1, 3, 1, 4, 1)


def test_launch_mistakes_name_the_parameter_and_the_fix():
    launcher = tritonplug.launch(add_kernel)
    x = jnp.ones(16)
    with pytest.raises(TypeError, match=r"called without a grid.*launch\(add_kernel\)\[grid\]"):
        launcher(x, x, 16, x, BLOCK=16)
    with pytest.raises(TypeError, match=r"stores through parameter 'out_ptr', which got a jax.Array of shape \(16,\).*"
                                        r"tritonplug.empty"):
        launcher[(1,)](x, x, 16, jnp.zeros(16), BLOCK=16)
    with pytest.raises(TypeError, match="has no device address"):
        tritonplug.empty(4, dtype=jnp.float32).data_ptr()
