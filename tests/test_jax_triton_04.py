"""jax-triton 0.4 parity beyond descriptors and Gluon: scalar typing, calls kept by DCE, the exported
names, and the deprecation warnings of the 0.3 spellings that keep working."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import for_backend, requires_backend
from hopper_kernels import scale_kernel
from jax.interpreters import partial_eval as pe
from kernels import add_kernel

import tritonplug
from tritonplug.calls.binding import scalar_type
from tritonplug.inspection import kernel_calls
from tritonplug.lowering.primitive import triton_call_p

cuda = for_backend("cuda")
interpret = requires_backend("interpret")
S = jax.ShapeDtypeStruct

# --------------------------------------------------------------------------- scalars

TYPED = [
    (1e-5, "fp32"), (0.1, "fp32"), (-2.5, "fp32"), (0.0, "fp32"), (-0.0, "fp32"), (float("inf"), "fp32"),
    (float("-inf"), "fp32"), (float("nan"), "fp32"), (3.4e38, "fp32"), (float(np.finfo(np.float32).tiny), "fp32"),
    (3.5e38, "fp64"), (-1e300, "fp64"), (1e-40, "fp64"),  # beyond float32's normal range, as jax-triton 0.4
    (np.float64(0.5), "fp64"), (np.float32(0.5), "fp32"), (np.float16(0.5), "fp32"),  # NumPy keeps its dtype
    (np.int8(3), "i32"), (np.uint16(3), "i32"), (np.int32(3), "i32"), (np.uint32(3), "u32"), (np.int64(3), "i64"),
    (np.uint64(3), "u64"), (True, "i1"), (np.bool_(False), "i1"), (7, "i32"), (2**31, "u32"), (-(2**31) - 1, "i64"),
    (2**63, "u64"),
]


@pytest.mark.parametrize("value, expected", TYPED, ids=[f"{type(v).__name__}:{v!r}" for v, _ in TYPED])
def test_scalar_types(value, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert scalar_type(value, "arg") == expected


@interpret
def test_a_python_float_computes_in_float32(fresh_state):
    """eps=0.1 multiplies in float32, as under Triton's own launcher (in float64 some products round apart)."""
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    out = tritonplug.triton_call(jnp.asarray(x), 0.1, x.size, kernel=scale_kernel, out_type=S(x.shape, jnp.float32),
                                 grid=(4,), BLOCK=1024)
    in_float32 = x * np.float32(0.1)
    in_float64 = (x.astype(np.float64) * 0.1).astype(np.float32)
    assert not np.array_equal(in_float32, in_float64)  # the check below can tell them apart
    np.testing.assert_array_equal(np.asarray(out), in_float32)
    wide = tritonplug.triton_call(jnp.asarray(x), np.float64(0.1), x.size, kernel=scale_kernel,
                                  out_type=S(x.shape, jnp.float32), grid=(4,), BLOCK=1024)
    np.testing.assert_array_equal(np.asarray(wide), in_float64)  # a NumPy float64 stays float64


@cuda
def test_eps_reaches_the_gpu_payload_as_f32():
    def f(x):
        return tritonplug.triton_call(x, 1e-5, x.size, kernel=scale_kernel, out_type=jax.typeof(x), grid=(1,),
                                      compute_capability=90, BLOCK=1024, debug=True)  # debug: the PTX rides along

    text = jax.jit(f).trace(S((1024,), jnp.float32)).lower(lowering_platforms=("cuda",)).as_text()
    (call,) = kernel_calls(text)
    assert call["kernel_call"]["parameters"][1] == {"f32": float(np.float32(1e-5))}
    assert "f64" not in call["kernel_call"]["kernel"]["ptx"].split("(", 1)[0]
    assert ".param .f32" in call["kernel_call"]["kernel"]["ptx"]


def test_np_float32_scalars_warn_as_in_jax_triton_04():
    x = S((1024,), jnp.float32)
    with pytest.warns(DeprecationWarning, match="np.float32 scalars"):
        jax.make_jaxpr(lambda x: tritonplug.triton_call(x, np.float32(2.0), 1024, kernel=scale_kernel,
                                                        out_type=jax.typeof(x), grid=1, BLOCK=1024))(x)


# --------------------------------------------------------------------------- DCE

def test_a_call_is_never_removed_by_dce():
    def f(x, y):
        tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_type=jax.typeof(x), grid=1, BLOCK=8)
        return x

    jaxpr = jax.make_jaxpr(f)(S((8,), jnp.float32), S((8,), jnp.float32))
    kept, used_inputs = pe.dce_jaxpr(jaxpr.jaxpr, [False])
    assert [e.primitive for e in kept.eqns] == [triton_call_p]
    assert used_inputs == [True, True]


# --------------------------------------------------------------------------- public surface

JAX_TRITON_04_ALL = ["triton_call", "strides_from_shape", "CUSTOM_CALL_TARGET_NAME", "TensorDescriptor",
                     "__version__", "__version_info__"]


def test_every_name_jax_triton_04_exports():
    for name in JAX_TRITON_04_ALL:
        assert name in tritonplug.__all__ and getattr(tritonplug, name) is not None, name
    assert tritonplug.CUSTOM_CALL_TARGET_NAME == "triton_kernel_call_ffi"
    assert tritonplug.strides_from_shape((2, 3, 4)) == (12, 4, 1)
    assert isinstance(tritonplug.__version__, str)
    assert tritonplug.__version_info__ == tuple(int(p) for p in tritonplug.__version__.split("+")[0].split(".")[:3])


def add(x, y, **kwargs):
    return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, grid=1, BLOCK=8, **kwargs)


ADD_LINE = add.__code__.co_firstlineno + 1


def test_0_3_spellings_warn_as_in_jax_triton_04():
    x = S((8,), jnp.float32)
    with pytest.warns(DeprecationWarning, match="out_shape= is deprecated in favor of out_type=") as caught:
        jax.make_jaxpr(lambda x, y: add(x, y, out_shape=jax.typeof(x)))(x, x)
    assert {(w.filename, w.lineno) for w in caught} == {(__file__, ADD_LINE)}  # the line that called triton_call
    with pytest.warns(DeprecationWarning, match="input_output_aliases is deprecated"):
        jax.make_jaxpr(lambda x, y: add(x, y, out_type=jax.typeof(x), input_output_aliases={0: 0}))(x, x)
    with pytest.warns(DeprecationWarning, match="zeroed_outputs is deprecated"):
        jax.make_jaxpr(lambda x, y: add(x, y, out_type=jax.typeof(x), zeroed_outputs=(0,)))(x, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax.make_jaxpr(lambda x, y: add(x, y, out_type={"sum": jax.typeof(x)}, zeroed_outputs=()))(x, x)
    with pytest.raises(TypeError, match="out_shape or out_type, not both"):
        add(jnp.ones(8), jnp.ones(8), out_shape=x, out_type=x)
