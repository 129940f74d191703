"""Host-side TMA descriptors (``tritonplug.TensorDescriptor``): validation at the call, numerics in the
interpreter and on a GPU, and what the CUDA backend hands jaxlib's runtime (proto field 9)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import for_backend, requires_backend
from hopper_kernels import desc_copy_kernel, desc_pair_kernel, desc_tiles_kernel, tma_matmul_kernel

import tritonplug
from tritonplug.adapters import jaxlib_compat
from tritonplug.lowering import pipeline as lowering
from tritonplug.lowering.kernel_call import decode_kernel_call, encode_kernel_call
from tritonplug.process.state import state
from tritonplug.records import BufferSpec

cuda = for_backend("cuda")
interpret = requires_backend("interpret")
S = jax.ShapeDtypeStruct


def copy(desc, **options):
    m, n = desc.block_shape[-2:]
    return tritonplug.triton_call(desc, kernel=desc_copy_kernel, out_type=S((m, n), desc.base.dtype), grid=1, M=m, N=n,
                                  **options)


def random_array(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(np.dtype(dtype))
        return jnp.asarray(rng.integers(max(info.min, -100), min(info.max, 100), shape), dtype)
    return jnp.asarray(rng.standard_normal(shape), dtype)


# --------------------------------------------------------------------------- validation at the call

X32 = jnp.zeros((32, 64), jnp.float32)
INVALID = {
    "block larger than the shape": (dict(base=X32, shape=(32, 64), strides=(64, 1), block_shape=(64, 64)),
                                    r"block_shape\[0\] = 64 is larger than shape\[0\] = 32"),
    "stride not a multiple of 16 bytes": (dict(base=jnp.zeros((32, 66), jnp.float32), shape=(32, 64),
                                               strides=(66, 1), block_shape=(32, 64)),
                                          r"strides\[0\] = 66 elements = 264 bytes .* multiple of 16 bytes"),
    "innermost stride not 1": (dict(base=X32, shape=(32, 32), strides=(64, 2), block_shape=(32, 32)),
                               r"strides\[-1\] = 2 must be 1"),
    "block not a power of two": (dict(base=X32, shape=(32, 64), strides=(64, 1), block_shape=(24, 64)),
                                 r"block_shape\[0\] = 24 must be a power of two"),
    "block over 256": (dict(base=jnp.zeros((8, 512), jnp.float32), shape=(8, 512), strides=(512, 1),
                            block_shape=(8, 512)), r"block_shape\[1\] = 512 must be a power of two between 1 and 256"),
    "innermost block under 16 bytes": (dict(base=X32, shape=(32, 64), strides=(64, 1), block_shape=(32, 2)),
                                       r"block_shape\[-1\] = 2 spans 8 bytes"),
    "shape beyond the base": (dict(base=X32, shape=(64, 64), strides=(64, 1), block_shape=(32, 64)),
                              r"reaches element 4095, but the base array has only 2048 elements"),
    "rank 6": (dict(base=jnp.zeros((2,) * 5 + (8,), jnp.float32), shape=(2,) * 5 + (8,),
                    strides=(128, 64, 32, 16, 8, 1), block_shape=(1,) * 5 + (8,)),
           r"rank 6; TMA descriptors have 1 to 5"),
    "nan padding of ints": (dict(base=jnp.zeros((32, 64), jnp.int32), shape=(32, 64), strides=(64, 1),
                                 block_shape=(32, 64), padding="nan"), r"padding='nan' needs a floating-point base"),
    "nan padding of fp8": (dict(base=jnp.zeros((32, 64), jnp.float8_e5m2), shape=(32, 64), strides=(64, 1),
                                block_shape=(32, 64), padding="nan"), r"padding='nan' .* got float8_e5m2"),
    "tf32 rounding of fp16": (dict(base=jnp.zeros((32, 64), jnp.float16), shape=(32, 64), strides=(64, 1),
                                   block_shape=(32, 64), round_f32_to_tf32=True),
                              r"round_f32_to_tf32=True needs a float32"),
    "bool base": (dict(base=jnp.zeros((32, 64), jnp.bool_), shape=(32, 64), strides=(64, 1), block_shape=(32, 64)),
                  r"dtype bool, which TMA cannot move"),
    "zero dimension": (dict(base=X32, shape=(0, 64), strides=(64, 1), block_shape=(1, 64)),
                       r"shape\[0\] = 0 must be between 1 and 2\*\*32"),
}


@interpret
@pytest.mark.parametrize("case", sorted(INVALID))
def test_an_invalid_descriptor_is_a_value_error_naming_the_field(case, fresh_state):
    fields, message = INVALID[case]
    desc = tritonplug.TensorDescriptor(**fields)
    before = dict(tritonplug.compile_stats())
    with pytest.raises(ValueError, match=message) as raised:
        copy(desc)
    assert "argument 'in_desc' of kernel 'desc_copy_kernel'" in str(raised.value)
    assert dict(tritonplug.compile_stats()) == before  # refused before anything compiled


@interpret
def test_a_layout_is_for_gluon_kernels_only():
    import triton.experimental.gluon.language as gl

    layout = gl.NVMMASharedLayout.get_default_for([32, 64], gl.float32)
    with pytest.raises(ValueError, match=r"layout is for Gluon kernels .* 'desc_copy_kernel' is a @triton.jit"):
        copy(tritonplug.TensorDescriptor.from_array(X32, [32, 64], layout=layout))


@interpret
def test_a_descriptor_cannot_be_aliased():
    with pytest.raises(ValueError, match="input 0 is a TensorDescriptor; only arrays alias"):
        tritonplug.triton_call(tritonplug.TensorDescriptor.from_array(X32, [32, 64]), kernel=desc_copy_kernel,
                               out_type=S((32, 64), jnp.float32), grid=1, input_output_aliases={0: 0}, M=32, N=64)


# --------------------------------------------------------------------------- numerics (interpreter, GPU)

DTYPES = [jnp.float32, jnp.float16, jnp.bfloat16, jnp.int32, jnp.int8, jnp.uint16]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(32, 32), (8, 64), (16, 128)])
def test_descriptor_copy(device, shape, dtype):
    x = jax.device_put(random_array(shape, dtype), device)
    out = copy(tritonplug.TensorDescriptor.from_array(x, block_shape=list(shape)))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x))
    jitted = jax.jit(lambda a: copy(tritonplug.TensorDescriptor.from_array(a, block_shape=list(shape))))(x)
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(x))


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_edge_tiles_are_padded_and_stores_clipped(device, padding):
    """A 100x72 array in 32x16 tiles: reads past the edge give the padding, stores past it are dropped,
    and the output is written through a descriptor over a Ref."""
    x = jax.device_put(random_array((100, 72), jnp.float32), device)

    def scaled(x):
        out = jax.new_ref(jnp.full_like(x, -1.0))
        tritonplug.triton_call(tritonplug.TensorDescriptor.from_array(x, [32, 16], padding=padding),
                               tritonplug.TensorDescriptor.from_array(out, [32, 16]), 2.0,
                               kernel=desc_tiles_kernel, out_type=(), grid=(4, 5), BM=32, BN=16)
        return out[...]

    np.testing.assert_array_equal(np.asarray(jax.jit(scaled)(x)), 2.0 * np.asarray(x))


@pytest.mark.parametrize("padding, fill", [("zero", 0.0), ("nan", np.nan)])
def test_padding_reads_past_the_edge(device, padding, fill):
    """The top-left 24x40 view of a 32x64 array read in 16x32 tiles covering 32x64: the rest is the padding."""
    x = jax.device_put(random_array((32, 64), jnp.float32), device)

    def scaled(x):
        out = jax.new_ref(jnp.zeros_like(x))
        tritonplug.triton_call(tritonplug.TensorDescriptor(x, (24, 40), (64, 1), (16, 32), padding=padding),
                               tritonplug.TensorDescriptor.from_array(out, [16, 32]), 2.0,
                               kernel=desc_tiles_kernel, out_type=(), grid=(2, 2), BM=16, BN=32)
        return out[...]

    expected = np.full((32, 64), fill, np.float32)
    expected[:24, :40] = 2.0 * np.asarray(x)[:24, :40]
    np.testing.assert_array_equal(np.asarray(scaled(x)), expected)


def test_a_tuple_of_descriptors(device):
    a = jax.device_put(random_array((16, 32), jnp.float32, 1), device)
    b = jax.device_put(random_array((16, 32), jnp.float32, 2), device)
    descs = (tritonplug.TensorDescriptor.from_array(a, [16, 32]), tritonplug.TensorDescriptor.from_array(b, [16, 32]))
    out = tritonplug.triton_call(descs, kernel=desc_pair_kernel, out_type=S((16, 32), jnp.float32), grid=1, M=16, N=32)
    np.testing.assert_allclose(np.asarray(out), np.asarray(a) + np.asarray(b), rtol=1e-6)


def test_tma_matmul(device):
    m, n, k = 96, 64, 128
    a = jax.device_put(random_array((m, k), jnp.float16, 3), device)
    b = jax.device_put(random_array((k, n), jnp.float16, 4), device)
    out = tritonplug.triton_call(tritonplug.TensorDescriptor.from_array(a, [32, 32]),
                                 tritonplug.TensorDescriptor.from_array(b, [32, 32]), m, n, k,
                                 kernel=tma_matmul_kernel, out_type=S((m, n), jnp.float16),
                                 grid=(m // 32, n // 32), BM=32, BN=32, BK=32)
    expected = np.asarray(a, np.float32) @ np.asarray(b, np.float32)
    np.testing.assert_allclose(np.asarray(out, np.float32), expected, rtol=2e-2, atol=5e-2)


# --------------------------------------------------------------------------- CUDA: the runtime's parameters

def cuda_kernels(fn, *specs, arch=90):
    """The CUDA backend's kernel objects for the one call ``fn`` makes: the whole lowering pipeline (front end,
    worker compile, plugin) but the custom call, which needs a jaxlib that carries descriptors."""
    (eqn,) = jax.make_jaxpr(fn)(*specs).eqns
    call = eqn.params["call"]
    backend = state.host().backend_for("cuda")
    target = backend.detect_target("cuda", None, {"compute_capability": arch})
    operands = tuple(BufferSpec(tuple(s.shape), np.dtype(s.dtype).name) for s in specs)
    return lowering.kernel_objects(backend, target, call, operands)


def nvidia(param):
    return param["tensor_descriptor"]["nvidia"]


@cuda
@pytest.mark.parametrize("dtype, elem_type", [(jnp.float16, 6), (jnp.float32, 7), (jnp.bfloat16, 9),
                                              (jnp.int32, 3), (jnp.uint8, 0), (jnp.int16, 1)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_sm90_descriptor_becomes_a_tma_parameter(dtype, elem_type):
    x = S((64, 128), dtype)
    (kernel,) = cuda_kernels(lambda x: copy(tritonplug.TensorDescriptor.from_array(x, [32, 64], padding="zero")), x)
    assert "cp.async.bulk.tensor" in kernel.image  # the PTX loads through TMA
    params = decode_kernel_call(encode_kernel_call([kernel], name="copy"))["kernel_call"]["parameters"]
    descriptor = nvidia(params[0])
    assert descriptor["elem_type"] == elem_type if elem_type else "elem_type" not in descriptor
    assert (descriptor["shape"], descriptor["strides"]) == ([64, 128], [128, 1])
    itemsize = np.dtype(dtype).itemsize
    assert descriptor["block_shape"][0] == 32 and descriptor["block_shape"][1] * itemsize <= 128
    assert "oob_fill" not in descriptor
    # then the shape as i32 and the strides as i64, as Triton's launcher passes them; then the output pointer
    assert params[1:] == [{"i32": 64}, {"i32": 128}, {"i64": 128}, {"i64": 1}, {"array": {"ptr_divisibility": 16}}]


@cuda
def test_nan_padding_and_tf32_reach_the_descriptor():
    x = S((32, 64), jnp.float32)
    (kernel,) = cuda_kernels(
        lambda x: copy(tritonplug.TensorDescriptor.from_array(x, [32, 64], padding="nan", round_f32_to_tf32=True)), x)
    descriptor = nvidia(decode_kernel_call(encode_kernel_call([kernel], name="c"))["kernel_call"]["parameters"][0])
    assert descriptor["oob_fill"] == 1 and descriptor["elem_type"] == 11  # CU_TENSOR_MAP_DATA_TYPE_TFLOAT32


@cuda
def test_a_tuple_of_descriptors_expands_in_order():
    a = S((16, 32), jnp.float32)
    b = S((16, 64), jnp.float32)

    def f(a, b):
        descs = (tritonplug.TensorDescriptor.from_array(a, [16, 32]),
                 tritonplug.TensorDescriptor(b, (16, 32), (64, 1), (16, 32)))
        return tritonplug.triton_call(descs, kernel=desc_pair_kernel, out_type=S((16, 32), jnp.float32), grid=1,
                                      M=16, N=32)

    (kernel,) = cuda_kernels(f, a, b)
    params = decode_kernel_call(encode_kernel_call([kernel], name="p"))["kernel_call"]["parameters"]
    assert [nvidia(params[0])["strides"], nvidia(params[5])["strides"]] == [[32, 1], [64, 1]]
    assert [kernel.launch.params[0][0][0].buffer, kernel.launch.params[0][1][0].buffer] == [0, 1]


@cuda
def test_before_sm90_a_descriptor_is_its_base_pointer_and_scalars():
    from tritonplug_cuda import compat

    x = S((32, 64), jnp.float16)
    (kernel,) = cuda_kernels(lambda x: copy(tritonplug.TensorDescriptor.from_array(x, [32, 64], padding="nan")), x,
                             arch=80)
    params = decode_kernel_call(encode_kernel_call([kernel], name="c"))["kernel_call"]["parameters"]
    flags = [{"bool_": True}] + [{"bool_": False}] * (len(compat.DECOMPOSED_FLAGS) - 1)  # nan padding, no tf32
    assert params[0] == {"array": {}}
    assert params[1:5] == [{"i64": 32}, {"i64": 64}, {"i64": 64}, {"i64": 1}]
    assert params[5:5 + len(flags)] == flags
    assert params[5 + len(flags):] == [{"i32": 32}, {"i32": 64}, {"i64": 64}, {"i64": 1},
                                       {"array": {"ptr_divisibility": 16}}]
    assert "cp.async.bulk.tensor" not in kernel.image


@cuda
def test_descriptor_calls_lower_for_cuda_where_jaxlib_carries_them_else_name_the_version():
    x = S((32, 64), jnp.float32)

    def f(x):
        return copy(tritonplug.TensorDescriptor.from_array(x, [32, 64]), compute_capability=90)

    problem = jaxlib_compat.tensor_descriptor_problem()
    lowered = jax.jit(f).trace(x)
    if problem is None:
        from tritonplug.inspection import kernel_calls

        (call,) = kernel_calls(lowered.lower(lowering_platforms=("cuda",)).as_text())
        assert nvidia(call["kernel_call"]["parameters"][0])["shape"] == [32, 64]
    else:
        with pytest.raises(NotImplementedError, match=r"need jaxlib 0\.11\.1 or newer.* installed jaxlib is "):
            lowered.lower(lowering_platforms=("cuda",))
