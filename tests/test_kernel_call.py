"""The pure-Python TritonAnyKernelCall encoder: decoded fields, and bytes equal to jaxlib's ``to_proto``."""

from __future__ import annotations

import math
import os
import struct
import zlib

import pytest

from tritonplug.adapters.jaxlib_compat import gpu_triton_module
from tritonplug.lowering.kernel_call import decode_kernel_call, encode_kernel_call
from tritonplug.records import ArrayParam, ConstexprParam, GpuKernel, Launch, ScalarParam, TmaDescriptorParam

gpu_triton = gpu_triton_module()
HAS_JAXLIB_TRITON = gpu_triton is not None and hasattr(gpu_triton, "TritonKernel")
if os.environ.get("TRITONPLUG_TEST_REQUIRE_JAXLIB_TRITON") == "1" and not HAS_JAXLIB_TRITON:
    raise RuntimeError("TRITONPLUG_TEST_REQUIRE_JAXLIB_TRITON=1 (tox -e cuda-proto) but jax._src.lib.gpu_triton has "
                       "no TritonKernel: install jax-cuda12-plugin matching jaxlib to compare bytes with to_proto")
requires_jaxlib_triton = pytest.mark.skipif(
    not HAS_JAXLIB_TRITON,
    reason="jaxlib's gpu_triton has no TritonKernel: the jax-cuda plugin (jax-cuda12-plugin) is not "
           "installed, so there is no jaxlib to_proto to compare bytes with (`tox -e cuda-proto` installs it)")

F32_TENTH = struct.unpack("<f", struct.pack("<f", 0.1))[0]

EVERY_SCALAR = (
    ArrayParam(0),
    ArrayParam(1, bytes_to_zero=4096, divisibility=1),
    ArrayParam(2, divisibility=0),
    ScalarParam(True, "i1"), ScalarParam(False, "i1"),
    ScalarParam(-7, "i32"), ScalarParam(0, "i32"),
    ScalarParam(-(2**31), "i32"), ScalarParam(2**31 - 1, "i32"),
    ScalarParam(2**32 - 1, "u32"), ScalarParam(0, "u32"),
    ScalarParam(-(2**40), "i64"), ScalarParam(-(2**63), "i64"), ScalarParam(-1, "i64"),
    ScalarParam(2**64 - 1, "u64"), ScalarParam(2**63 + 9, "u64"),
    ConstexprParam(128),
    ScalarParam(0.5, "fp32"), ScalarParam(0.1, "fp32"), ScalarParam(-0.0, "fp32"), ScalarParam(1e300, "fp32"),
    ScalarParam(0.1, "fp64"), ScalarParam(0.0, "fp64"), ScalarParam(-2.5e-300, "fp64"),
)
EVERY_SCALAR_DECODED = [
    {"array": {"ptr_divisibility": 16}},
    {"array": {"bytes_to_zero": 4096, "ptr_divisibility": 1}},
    {"array": {}},
    {"bool_": True}, {"bool_": False},
    {"i32": -7}, {"i32": 0}, {"i32": -(2**31)}, {"i32": 2**31 - 1},
    {"u32": 2**32 - 1}, {"u32": 0},
    {"i64": -(2**40)}, {"i64": -(2**63)}, {"i64": -1},
    {"u64": 2**64 - 1}, {"u64": 2**63 + 9},
    {"f32": 0.5}, {"f32": F32_TENTH}, {"f32": -0.0}, {"f32": math.inf},
    {"f64": 0.1}, {"f64": 0.0}, {"f64": -2.5e-300},
]


def make_kernel(params=(), *, grid=(4, 1, 1), name="add_kernel", num_warps=4, num_ctas=1, shared=0,
                image=".version 8.0\n.target sm_90\n", ttir="tt.func public @add_kernel", cc=90,
                description="", **extra) -> GpuKernel:
    launch = Launch(kernel_name=name, grid=grid, params=tuple(params), arg_names=(), operands=(), results=(),
                    description=description)
    return GpuKernel(kernel_name=name, num_warps=num_warps, num_ctas=num_ctas, shared_mem_bytes=shared,
                     image=image, ttir=ttir, compute_capability=cc, launch=launch, **extra)


def jaxlib_proto(kernels, *, name, metadata=b"", descriptions=None, aliases=()) -> bytes:
    """The same call built with jaxlib's own classes."""

    def flat(params):
        for p in params:
            if isinstance(p, tuple):
                yield from flat(p)
            elif isinstance(p, ArrayParam):
                yield gpu_triton.create_array_parameter(p.bytes_to_zero, p.divisibility)
            elif isinstance(p, ScalarParam):
                yield gpu_triton.create_scalar_parameter(p.value, p.dtype)
            elif isinstance(p, TmaDescriptorParam):
                yield gpu_triton.create_tma_descriptor_parameter(
                    elem_type=p.elem_type, swizzle=p.swizzle, shape=list(p.shape), strides=list(p.strides),
                    block_shape=list(p.block_shape), oob_fill=p.oob_fill)

    def call(k):
        scratch = (k.global_scratch_size, k.global_scratch_align) if k.global_scratch_size else ()
        kernel = gpu_triton.TritonKernel(k.kernel_name, k.num_warps, k.num_ctas, k.shared_mem_bytes, k.image,
                                         k.ttir, k.compute_capability, *scratch)
        return gpu_triton.TritonKernelCall(kernel, *k.launch.grid, list(flat(k.launch.params)))

    if len(kernels) == 1:
        return call(kernels[0]).to_proto(name, metadata)
    descriptions = descriptions or [k.launch.description for k in kernels]
    configs = [(call(k), d) for k, d in zip(kernels, descriptions, strict=True)]
    return gpu_triton.TritonAutotunedKernelCall(name, configs, list(aliases)).to_proto(name, metadata)


def autotuned_kernels():
    params = (ArrayParam(0), ArrayParam(1, bytes_to_zero=2048), ScalarParam(512, "i32"))
    return [
        make_kernel(params + (ConstexprParam(64),), grid=(8, 1, 1), num_warps=2, description="BLOCK=64"),
        make_kernel(params + (ConstexprParam(128),), grid=(4, 1, 1), num_warps=4, shared=4096,
                    description="BLOCK=128"),
        make_kernel(params + (ConstexprParam(256),), grid=(2, 3, 0), num_warps=8, num_ctas=2),
    ]


AUTOTUNE_ALIASES = [(0, 0, 2048), (1, 2, 64), (3, 1, 0)]


def test_single_kernel_every_parameter_type_decodes():
    kernel = make_kernel(EVERY_SCALAR, grid=(3, 0, 7))
    decoded = decode_kernel_call(encode_kernel_call([kernel], name="my_call", metadata=b"\x00meta"))
    assert decoded == {
        "kernel_call": {
            "kernel": {"kernel_name": "add_kernel", "num_warps": 4, "num_ctas": 1, "ptx": kernel.image,
                       "ttir": kernel.ttir, "compute_capability": 90},
            "grid_0": 3, "grid_2": 7,  # a zero grid_1 is a proto3 default, so it is left out
            "parameters": EVERY_SCALAR_DECODED,
        },
        "metadata": b"\x00meta",
        "name": "my_call",
    }


def test_tuple_parameters_are_flattened_and_constexprs_skipped():
    params = (ArrayParam(0), (ScalarParam(3, "i32"), (ConstexprParam(2), ArrayParam(1)), ConstexprParam("x")),
              ConstexprParam(None), (), ScalarParam(2.0, "fp64"))
    decoded = decode_kernel_call(encode_kernel_call([make_kernel(params)], name="t"))
    assert decoded["kernel_call"]["parameters"] == [
        {"array": {"ptr_divisibility": 16}}, {"i32": 3}, {"array": {"ptr_divisibility": 16}}, {"f64": 2.0}]
    assert "metadata" not in decoded  # empty metadata is a proto3 default


def test_autotuned_call_with_three_configs_and_aliases_decodes():
    kernels = autotuned_kernels()
    decoded = decode_kernel_call(encode_kernel_call(kernels, name="tuned", metadata=b"m",
                                                    aliases=AUTOTUNE_ALIASES))
    assert set(decoded) == {"autotuned_kernel_call", "metadata", "name"}
    tuned = decoded["autotuned_kernel_call"]
    assert tuned["name"] == decoded["name"] == "tuned"
    assert [c.get("description", "") for c in tuned["configs"]] == ["BLOCK=64", "BLOCK=128", ""]
    calls = [c["kernel_call"] for c in tuned["configs"]]
    assert [c["kernel"]["num_warps"] for c in calls] == [2, 4, 8]
    assert [c["kernel"]["num_ctas"] for c in calls] == [1, 1, 2]
    assert [c["kernel"].get("shared_mem_bytes", 0) for c in calls] == [0, 4096, 0]
    assert [(c["grid_0"], c.get("grid_1", 0), c.get("grid_2", 0)) for c in calls] == [(8, 1, 1), (4, 1, 1),
                                                                                      (2, 3, 0)]
    for c in calls:
        assert c["parameters"] == [{"array": {"ptr_divisibility": 16}},
                                   {"array": {"bytes_to_zero": 2048, "ptr_divisibility": 16}}, {"i32": 512}]
    assert tuned["input_output_aliases"] == [
        {"buffer_size_bytes": 2048},  # buffer 0 -> buffer 0: both indices are proto3 defaults
        {"input_buffer_idx": 1, "output_buffer_idx": 2, "buffer_size_bytes": 64},
        {"input_buffer_idx": 3, "output_buffer_idx": 1},
    ]
    explicit = encode_kernel_call(kernels, name="tuned", metadata=b"m", aliases=AUTOTUNE_ALIASES,
                                  descriptions=["a", "b", "c"])
    configs = decode_kernel_call(explicit)["autotuned_kernel_call"]["configs"]
    assert [c["description"] for c in configs] == ["a", "b", "c"]


def test_module_image_and_global_scratch_round_trip():
    kernel = make_kernel((ArrayParam(0),), module_image=b"\x7fELF\x00cubin", global_scratch_size=1024,
                         global_scratch_align=128, shared=256)
    decoded = decode_kernel_call(encode_kernel_call([kernel], name="k"))["kernel_call"]["kernel"]
    assert decoded["module_image"] == {"object_file": b"\x7fELF\x00cubin", "kernel_name": "add_kernel",
                                       "shared_mem_bytes": 256}
    assert (decoded["global_scratch_size"], decoded["global_scratch_align"]) == (1024, 128)
    plain = decode_kernel_call(encode_kernel_call([make_kernel()], name="k"))["kernel_call"]["kernel"]
    assert not {"module_image", "global_scratch_size", "global_scratch_align"} & set(plain)
    empty = decode_kernel_call(encode_kernel_call([make_kernel(module_image=b"")], name="k"))
    assert empty["kernel_call"]["kernel"]["module_image"] == {"kernel_name": "add_kernel"}


def test_decode_accepts_zlib_compressed_payloads():
    proto = encode_kernel_call(autotuned_kernels(), name="tuned", aliases=AUTOTUNE_ALIASES)
    assert proto[:1] != b"\x78"
    assert decode_kernel_call(zlib.compress(proto)) == decode_kernel_call(proto)


def test_unknown_scalar_dtype_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="'f16'"):
        encode_kernel_call([make_kernel((ScalarParam(1.0, "f16"),))], name="k")
    with pytest.raises(ValueError, match="'bf16'"):
        encode_kernel_call([make_kernel(((ArrayParam(0), ScalarParam(1.0, "bf16")),))], name="k")


@pytest.mark.parametrize("param", [ScalarParam(2**31, "i32"), ScalarParam(-1, "u32"),
                                   ScalarParam(2**64, "u64"), ScalarParam(-(2**63) - 1, "i64"),
                                   ScalarParam(1.5, "i32")])
def test_out_of_range_scalars_are_value_errors(param):
    with pytest.raises(ValueError, match="does not fit"):
        encode_kernel_call([make_kernel((param,))], name="k")


def test_truncated_payload_is_a_value_error():
    proto = encode_kernel_call([make_kernel(EVERY_SCALAR)], name="k")
    with pytest.raises(ValueError, match="truncated"):
        decode_kernel_call(proto[:-1])


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one kernel"):
        encode_kernel_call([], name="k")
    with pytest.raises(ValueError, match="2 descriptions for 3 kernels"):
        encode_kernel_call(autotuned_kernels(), name="k", descriptions=["a", "b"])


SINGLE_CASES = {
    "every_scalar": dict(kernels=[make_kernel(EVERY_SCALAR, grid=(3, 0, 7))], name="my_call",
                         metadata=b"\x00meta"),
    "tuple_params": dict(kernels=[make_kernel((ArrayParam(0), (ScalarParam(-3, "i64"), ConstexprParam(1)),
                                               ScalarParam(7, "u64")))], name="t"),
    "all_defaults": dict(kernels=[make_kernel(name="", num_warps=0, num_ctas=0, image="", ttir="", cc=0,
                                              grid=(0, 0, 0))], name=""),
    "num_ctas_2_big_ptx": dict(kernels=[make_kernel((ArrayParam(0),), num_ctas=2, shared=98304,
                                                    image="x" * 70000, ttir="é∂")], name="big",
                               metadata=b"z" * 300),
    "autotuned": dict(kernels=autotuned_kernels(), name="tuned", metadata=b"m", aliases=AUTOTUNE_ALIASES),
    "autotuned_explicit_descriptions": dict(kernels=autotuned_kernels()[:2], name="", descriptions=["", "d"]),
}


TMA = TmaDescriptorParam(0, elem_type=6, swizzle=3, shape=(32, 64), strides=(64, 1), block_shape=(32, 64), oob_fill=1)
#: Parameter { tensor_descriptor (9) { nvidia (1) { elem_type 6, swizzle 3, packed shape, strides, block_shape,
#: oob_fill 1 } } }, as proto3 writes it
TMA_BYTES = bytes.fromhex("4a14" "0a12" "0806" "1003" "1a022040" "22024001" "2a022040" "3001")


def test_tma_descriptor_parameter_bytes_and_round_trip():
    kernel = make_kernel((TMA, ScalarParam(32, "i32"), ScalarParam(64, "i64"), ArrayParam(1)))
    encoded = encode_kernel_call([kernel], name="tma")
    assert b"\x2a\x16" + TMA_BYTES in encoded  # the first of the call's repeated parameters (field 5)
    params = decode_kernel_call(encoded)["kernel_call"]["parameters"]
    assert params[0] == {"tensor_descriptor": {"nvidia": {"elem_type": 6, "swizzle": 3, "shape": [32, 64],
                                                          "strides": [64, 1], "block_shape": [32, 64],
                                                          "oob_fill": 1}}}
    assert params[1:] == [{"i32": 32}, {"i64": 64}, {"array": {"ptr_divisibility": 16}}]
    zero = TmaDescriptorParam(0, 0, 0, (2**33,), (1,), (256,))  # zero fields left out; big dims take long varints
    nvidia = decode_kernel_call(encode_kernel_call([make_kernel((zero,))], name="z"))["kernel_call"]["parameters"][0]
    assert nvidia == {"tensor_descriptor": {"nvidia": {"shape": [2**33], "strides": [1], "block_shape": [256]}}}


requires_jaxlib_descriptors = pytest.mark.skipif(
    not hasattr(gpu_triton, "create_tma_descriptor_parameter"),
    reason="this jaxlib's gpu_triton has no create_tma_descriptor_parameter (jaxlib 0.11.1+ with its CUDA plugin)")
DESCRIPTOR_CASES = {
    "tma_descriptor": dict(kernels=[make_kernel((TMA, ScalarParam(32, "i32"), ScalarParam(64, "i32"),
                                                 ScalarParam(64, "i64"), ScalarParam(1, "i64"), ArrayParam(1)))],
                           name="tma"),
    "tma_zero_fields_and_global_scratch": dict(
        kernels=[make_kernel((TmaDescriptorParam(0, 0, 0, (8, 2**33), (2**33, 1), (8, 16)),),
                             global_scratch_size=256, global_scratch_align=128)], name="s"),
}


@pytest.mark.cuda
@requires_jaxlib_triton
@requires_jaxlib_descriptors
@pytest.mark.parametrize("case", sorted(DESCRIPTOR_CASES))
def test_descriptor_bytes_match_jaxlib_to_proto(case):
    kwargs = dict(DESCRIPTOR_CASES[case])
    kernels = kwargs.pop("kernels")
    ours = encode_kernel_call(kernels, **kwargs)
    theirs = jaxlib_proto(kernels, **kwargs)
    assert decode_kernel_call(ours) == decode_kernel_call(theirs)
    assert ours == theirs


@pytest.mark.cuda
@requires_jaxlib_triton
@pytest.mark.parametrize("case", sorted(SINGLE_CASES))
def test_bytes_match_jaxlib_to_proto(case):
    kwargs = dict(SINGLE_CASES[case])
    kernels = kwargs.pop("kernels")
    ours = encode_kernel_call(kernels, **kwargs)
    theirs = jaxlib_proto(kernels, **kwargs)
    assert decode_kernel_call(ours) == decode_kernel_call(theirs)
    assert ours == theirs
