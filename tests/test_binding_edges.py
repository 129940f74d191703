"""The edges of argument binding (``calls.binding``) that the property tests do not draw: constexprs given as
0-d arrays or with an array default, tuples given to a parameter used as one value, the Python-call arity,
outputs left without a parameter, TensorDescriptor layouts for Triton and Gluon kernels, and which scalars warn.

Each rule here decides a number, a binding or which error the caller sees; the mutation run over ``binding.py``
(``tests/mutation.py``) found no test that would fail if it were wrong. Errors are checked at the call
(``jax.make_jaxpr``: nothing compiles); nodes are checked on ``bind``'s result. (A constexpr's array default was
refused with NumPy's "truth value of an array is ambiguous" before ``KernelParameter.has_default`` went by identity.)
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from hopper_kernels import gluon_host_desc_copy_kernel

import tritonplug
from tritonplug.adapters.triton_compat import kernel_facts
from tritonplug.calls.binding import bind, bind_like_a_call, constexpr_value
from tritonplug.calls.call import ConstArg, DescriptorArg, ScalarArg

S = jax.ShapeDtypeStruct
SPEC = S((16,), jnp.float32)


@triton.jit
def two_in_two_out_kernel(x_ptr, y_ptr, a_ptr, b_ptr):
    pass


@triton.jit
def bounded_copy_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0))


ARRAY = np.ones(2)


@triton.jit
def array_default_kernel(x_ptr, out_ptr, TABLE: tl.constexpr = ARRAY):
    pass


@triton.jit
def annotated_kernel(x_ptr, n: tl.int64, eps: tl.float64, pair, out_ptr):
    pass


@triton.jit
def descriptor_kernel(in_desc, out_ptr, M: tl.constexpr, N: tl.constexpr):
    pass


def _trace(f, *specs):
    return jax.make_jaxpr(f)(*specs)


# --------------------------------------------------------------------------- constexprs


@pytest.mark.parametrize("value", [np.array(128), np.array(128, np.uint8), jnp.array(128, jnp.int32), np.int64(128)],
                         ids=["numpy-0d", "numpy-0d-uint8", "jax-0d", "numpy-scalar"])
def test_a_concrete_0d_integer_array_constexpr_becomes_a_python_int(value):
    got = constexpr_value(value)
    assert got == 128 and type(got) is int


@pytest.mark.parametrize("value", [np.arange(3), np.array([7]), np.array(1.5), jnp.arange(2)],
                         ids=["numpy-1d", "numpy-length-1", "numpy-0d-float", "jax-1d"])
def test_other_arrays_are_kept_for_bind_to_refuse(value):
    assert constexpr_value(value) is value


def test_a_0d_integer_tracer_is_kept_for_bind_to_refuse():
    seen = []
    jax.make_jaxpr(lambda x: seen.append(constexpr_value(x)))(S((), jnp.int32))
    assert isinstance(seen[0], jax.core.Tracer)


@requires_backend("interpret")
@pytest.mark.parametrize("block", [np.array(16), jnp.array(16, jnp.int32)], ids=["numpy", "jax"])
def test_a_0d_array_constexpr_runs_as_its_int(block):
    x = jax.device_put(jnp.arange(16, dtype=jnp.float32), jax.devices("cpu")[0])
    out = tritonplug.triton_call(x, 12, kernel=bounded_copy_kernel, out_type=SPEC, grid=1, BLOCK=block)
    np.testing.assert_array_equal(np.asarray(out), np.where(np.arange(16) < 12, np.arange(16), 0))


def test_an_array_default_of_a_constexpr_is_refused_without_a_position():
    with pytest.raises(TypeError, match=r"argument 'TABLE' of kernel 'array_default_kernel' is a tl\.constexpr, but "
                                        r"an array was passed; constexprs must be Python values"):
        _trace(lambda x: tritonplug.triton_call(x, kernel=array_default_kernel, out_type=SPEC, grid=1), SPEC)


# --------------------------------------------------------------------------- arguments to parameters


def test_as_many_positional_arguments_as_parameters_bind_each_one():
    assert bind_like_a_call(("a", "b", "c"), (1, 2, 3), {}, "k") == {"a": 1, "b": 2, "c": 3}
    assert bind_like_a_call(("a", "b", "c"), (1,), {"c": 3}, "k") == {"a": 1, "c": 3}
    with pytest.raises(TypeError, match=r"kernel 'k': too many positional arguments: the kernel has 3 parameters, "
                                        r"got 4 positional arguments"):
        bind_like_a_call(("a", "b", "c"), (1, 2, 3, 4), {}, "k")


def test_every_parameter_by_position_with_the_output_aliased():
    """jax-triton 0.4: the output reuses its aliased input's parameter, so all five parameters come by position."""
    x = jax.device_put(jnp.arange(16, dtype=jnp.float32), jax.devices("cpu")[0])
    facts = kernel_facts(bounded_copy_kernel)
    bound, arrays = bind(facts, (x, 12, x, 16), {}, (SPEC,), {2: 0}, {}, None)
    assert bound.nodes[bound.names.index("BLOCK")] == ConstArg(16) and bound.aliased_params == ((0, 1),)
    assert len(arrays) == 2


@pytest.mark.filterwarnings("ignore:input_output_aliases is deprecated")
@pytest.mark.parametrize(("n_params", "message"), [
    (2, r"too few operands: parameters \['a_ptr', 'b_ptr'\] have no argument, but out_shape has only 3 outputs "
        r"\(2 aliased to inputs\)"),
    (0, r"too many operands: 4 operands leave 0 parameters \[\] for the 3 outputs of out_shape \(2 aliased"),
])
def test_outputs_that_neither_fill_the_parameters_left_nor_reuse_their_inputs_are_refused(n_params, message):
    """Three outputs, two aliased to the inputs: one free output for the two parameters left (too few operands), or
    none left for it (too many)."""
    args = () if n_params == 2 else (SPEC, SPEC)

    def f(x, y, *more):
        return tritonplug.triton_call(x, y, *more, kernel=two_in_two_out_kernel, out_type=(SPEC, SPEC, SPEC),
                                      input_output_aliases={0: 0, 1: 1}, grid=1)

    with pytest.raises(TypeError, match=message):
        _trace(f, SPEC, SPEC, *args)


def test_a_tuple_for_a_parameter_used_as_one_value_is_refused():
    with pytest.raises(TypeError, match=r"argument 'n' of kernel 'bounded_copy_kernel' is one value \(the kernel "
                                        r"computes `offs < n`\), but a tuple was passed: \(12, 4\)"):
        _trace(lambda x: tritonplug.triton_call(x, (12, 4), kernel=bounded_copy_kernel, out_type=SPEC, grid=1,
                                                BLOCK=16), SPEC)


# --------------------------------------------------------------------------- TensorDescriptor layouts


def _bind_descriptor(kernel, layout):
    x = np.zeros((16, 32), np.float32)
    desc = tritonplug.TensorDescriptor.from_array(x, [16, 32], layout=layout)
    bound, arrays = bind(kernel_facts(kernel), (desc,), {}, (S((16, 32), jnp.float32),), {}, {"M": 16, "N": 32}, None)
    assert arrays == [x]
    return bound.nodes[0]


def _nvmma_layout():
    import triton.experimental.gluon.language as gl

    return gl.NVMMASharedLayout(128, 32, 2)  # swizzle bytes, element bits, rank


def test_a_triton_kernel_takes_a_descriptor_without_a_layout_and_refuses_one_with():
    node = _bind_descriptor(descriptor_kernel, None)
    assert isinstance(node, DescriptorArg) and node.layout == "" and node.block_shape == (16, 32)
    with pytest.raises(ValueError, match=r"argument 'in_desc' of kernel 'descriptor_kernel': TensorDescriptor\.layout "
                                         r"is for Gluon kernels \(@gluon\.jit\); kernel 'descriptor_kernel' is a "
                                         r"@triton\.jit kernel"):
        _bind_descriptor(descriptor_kernel, _nvmma_layout())


def test_a_gluon_kernel_takes_a_descriptor_with_a_layout_and_refuses_one_without():
    layout = _nvmma_layout()
    node = _bind_descriptor(gluon_host_desc_copy_kernel, layout)
    assert isinstance(node, DescriptorArg) and node.layout == repr(layout)
    with pytest.raises(ValueError, match=r"argument 'in_desc' of kernel 'gluon_host_desc_copy_kernel': kernel "
                                         r"'gluon_host_desc_copy_kernel' is a Gluon kernel, whose descriptors need a "
                                         r"shared-memory layout"):
        _bind_descriptor(gluon_host_desc_copy_kernel, None)


# --------------------------------------------------------------------------- scalars


def _scalar_node(value):
    x = jnp.zeros(16, jnp.float32)
    bound, _ = bind(kernel_facts(bounded_copy_kernel), (x, value), {}, (SPEC,), {}, {"BLOCK": 16}, None)
    return bound.nodes[1]


@pytest.mark.parametrize(("value", "dtype"), [(0.5, "fp32"), (1e300, "fp64"), (3, "i32"), (True, "i1"),
                                              (np.float64(0.5), "fp64"), (np.int64(3), "i64")])
def test_only_np_float32_scalars_warn(value, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        node = _scalar_node(value)
    assert isinstance(node, ScalarArg) and node.dtype == dtype and node.value == value
    with pytest.warns(DeprecationWarning, match=r"Passing np\.float32 scalars to triton_call is deprecated"):
        assert _scalar_node(np.float32(0.5)) == ScalarArg.of(0.5, "fp32")


def test_an_annotated_scalar_takes_its_annotation_and_a_tuple_element_its_value():
    """``n: tl.int64`` given 40 is i64 and ``eps: tl.float64`` given 0.5 is fp64, as Triton compiles them; the
    elements of an unannotated tuple are typed by value."""
    x = jnp.zeros(16, jnp.float32)
    bound, _ = bind(kernel_facts(annotated_kernel), (x, 40, 0.5, (3, 0.25)), {}, (SPEC,), {}, {}, None)
    n, eps, pair = (bound.nodes[bound.names.index(name)] for name in ("n", "eps", "pair"))
    assert (n, eps, pair) == (ScalarArg.of(40, "i64"), ScalarArg.of(0.5, "fp64"),
                              (ScalarArg.of(3, "i32"), ScalarArg.of(0.25, "fp32")))
