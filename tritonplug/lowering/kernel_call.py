"""Serialise kernel calls for jaxlib's GPU Triton runtime, without protobuf or jaxlib.

:func:`encode_kernel_call` writes the ``jax_triton.TritonAnyKernelCall`` message of
``jaxlib/gpu/triton.proto`` byte for byte as jaxlib's ``to_proto`` does: fields in number
order, proto3 zero/empty scalars left out, ``num_ctas`` (a proto3 ``optional``) and oneof
parameters always present, ``int32``/``int64`` as plain (not zigzag) varints, so a negative
value takes ten bytes. :func:`decode_kernel_call` reads such bytes back into plain dicts.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from tritonplug.records import ArrayParam, ConstexprParam, GpuKernel, ScalarParam, TmaDescriptorParam, param_leaves

_U64 = (1 << 64) - 1
# dtype -> (Parameter field, wire kind, smallest value, largest value; None for the floats)
_SCALARS: dict[str, tuple[int, str, int | None, int | None]] = {
    "i1": (2, "bool", 0, 1),
    "i32": (3, "int32", -(1 << 31), (1 << 31) - 1),
    "u32": (4, "uint", 0, (1 << 32) - 1),
    "i64": (5, "int64", -(1 << 63), (1 << 63) - 1),
    "u64": (6, "uint", 0, _U64),
    "fp32": (7, "float", None, None), "fp64": (8, "double", None, None),
}

# message -> {field number: (name, kind)}; a kind naming a message here is a sub-message.
_SCHEMA: dict[str, dict[int, tuple[str, str]]] = {
    "any": {1: ("kernel_call", "call"), 2: ("autotuned_kernel_call", "autotuned"),
            3: ("metadata", "bytes"), 4: ("name", "string")},
    "kernel": {1: ("kernel_name", "string"), 2: ("num_warps", "uint"), 3: ("shared_mem_bytes", "uint"),
               4: ("ptx", "string"), 5: ("ttir", "string"), 6: ("compute_capability", "uint"),
               10: ("num_ctas", "uint"), 11: ("module_image", "image"), 12: ("global_scratch_size", "uint"),
               13: ("global_scratch_align", "uint")},
    "image": {1: ("object_file", "bytes"), 2: ("kernel_name", "string"), 3: ("shared_mem_bytes", "uint")},
    "call": {1: ("kernel", "kernel"), 2: ("grid_0", "uint"), 3: ("grid_1", "uint"), 4: ("grid_2", "uint"),
             5: ("parameters", "param")},
    "param": {1: ("array", "array"), 2: ("bool_", "bool"), 3: ("i32", "int32"), 4: ("u32", "uint"),
              5: ("i64", "int64"), 6: ("u64", "uint"), 7: ("f32", "float"), 8: ("f64", "double"),
              9: ("tensor_descriptor", "descriptor")},
    "descriptor": {1: ("nvidia", "nvidia")},
    "nvidia": {1: ("elem_type", "uint"), 2: ("swizzle", "uint"), 3: ("shape", "packed"), 4: ("strides", "packed"),
               5: ("block_shape", "packed"), 6: ("oob_fill", "uint")},
    "array": {1: ("bytes_to_zero", "uint"), 2: ("ptr_divisibility", "uint")},
    "autotuned": {1: ("name", "string"), 2: ("configs", "config"), 3: ("input_output_aliases", "alias")},
    "config": {1: ("kernel_call", "call"), 2: ("description", "string")},
    "alias": {1: ("input_buffer_idx", "uint"), 2: ("output_buffer_idx", "uint"),
              3: ("buffer_size_bytes", "uint")},
}
_REPEATED = {"parameters", "configs", "input_output_aliases", "shape", "strides", "block_shape"}
_WIRE = {"uint": 0, "int32": 0, "int64": 0, "bool": 0, "double": 1, "float": 5}  # everything else: 2
_CONVERT: dict[str, Callable[[Any], Any]] = {
    "uint": int, "bool": bool, "bytes": bytes, "string": lambda raw: bytes(raw).decode(),
    "int32": lambda raw: (raw & 0xFFFFFFFF) - ((raw >> 31 & 1) << 32),
    "int64": lambda raw: raw - ((raw >> 63 & 1) << 64),
    "float": lambda raw: struct.unpack("<f", raw)[0], "double": lambda raw: struct.unpack("<d", raw)[0],
}


def _varint(n: int) -> bytes:
    n &= _U64  # negative int32/int64 become 64-bit two's complement: ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _int(field: int, value: int, always: bool = False) -> bytes:
    return _varint(field << 3) + _varint(value) if value or always else b""


def _len(field: int, payload: bytes | str, always: bool = False) -> bytes:
    if isinstance(payload, str):
        payload = payload.encode()
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload if payload or always else b""


def _packed(field: int, values: Sequence[int]) -> bytes:
    """A proto3 repeated integer field: packed (one length-delimited run of varints), absent when empty."""
    return _len(field, b"".join(_varint(v) for v in values))


def _descriptor(p: TmaDescriptorParam) -> bytes:
    nvidia = (_int(1, p.elem_type) + _int(2, p.swizzle) + _packed(3, p.shape) + _packed(4, p.strides)
              + _packed(5, p.block_shape) + _int(6, p.oob_fill))
    return _len(9, _len(1, nvidia, always=True), always=True)


def _param(p: ArrayParam | ScalarParam | TmaDescriptorParam) -> bytes:
    if isinstance(p, ArrayParam):
        return _len(1, _int(1, p.bytes_to_zero) + _int(2, p.divisibility), always=True)
    if isinstance(p, TmaDescriptorParam):
        return _descriptor(p)
    if not isinstance(p, ScalarParam):
        raise TypeError(f"not a kernel parameter: {p!r}")
    if p.dtype not in _SCALARS:
        raise ValueError(f"unknown scalar dtype {p.dtype!r} (expected one of {sorted(_SCALARS)})")
    field, kind, lo, hi = _SCALARS[p.dtype]
    if kind == "float":
        try:
            return _varint(field << 3 | 5) + struct.pack("<f", float(p.value))
        except OverflowError:  # finite but beyond float32: C's cast (and so jaxlib) gives ±inf
            return _varint(field << 3 | 5) + struct.pack("<f", math.copysign(math.inf, p.value))
    if kind == "double":
        return _varint(field << 3 | 1) + struct.pack("<d", float(p.value))
    assert lo is not None and hi is not None  # only the floats have no bounds
    value = int(bool(p.value)) if kind == "bool" else int(p.value)
    if value != p.value or not lo <= value <= hi:
        raise ValueError(f"scalar {p.value!r} does not fit dtype {p.dtype!r}")
    return _int(field, value, always=True)  # a oneof member is present even when zero


def _kernel(k: GpuKernel) -> bytes:
    out = (_len(1, k.kernel_name) + _int(2, k.num_warps) + _int(3, k.shared_mem_bytes) + _len(4, k.image)
           + _len(5, k.ttir) + _int(6, k.compute_capability) + _int(10, k.num_ctas, always=True))
    if k.module_image is not None:
        image = _len(1, bytes(k.module_image)) + _len(2, k.kernel_name) + _int(3, k.shared_mem_bytes)
        out += _len(11, image, always=True)
    if k.global_scratch_size:  # only kernels that use global scratch carry the two fields
        out += _int(12, k.global_scratch_size) + _int(13, k.global_scratch_align)
    return out


def _call(k: GpuKernel) -> bytes:
    grid = (*k.launch.grid, 1, 1)[:3]
    params = [p for p in param_leaves(k.launch.params) if not isinstance(p, ConstexprParam)]
    return (_len(1, _kernel(k), always=True) + b"".join(_int(2 + i, g) for i, g in enumerate(grid))
            + b"".join(_len(5, _param(p), always=True) for p in params))


def encode_kernel_call(kernels: Sequence[GpuKernel], *, name: str, metadata: bytes = b"",
                       descriptions: Sequence[str] | None = None,
                       aliases: Sequence[tuple[int, int, int]] = ()) -> bytes:
    """Serialise ``TritonAnyKernelCall`` (uncompressed): one kernel is a plain call, several an
    autotuned call over them. ``descriptions`` name the configs (default: each launch's
    description); ``aliases`` are (input buffer, output buffer, bytes), used by autotuned calls only.
    """
    kernels = list(kernels)
    if not kernels:
        raise ValueError("encode_kernel_call needs at least one kernel")
    if len(kernels) == 1:
        body = _len(1, _call(kernels[0]), always=True)
    else:
        descriptions = [k.launch.description for k in kernels] if descriptions is None else list(descriptions)
        if len(descriptions) != len(kernels):
            raise ValueError(f"{len(descriptions)} descriptions for {len(kernels)} kernels")
        configs = b"".join(_len(2, _len(1, _call(k), always=True) + _len(2, d), always=True)
                           for k, d in zip(kernels, descriptions, strict=True))
        io = b"".join(_len(3, _int(1, i) + _int(2, o) + _int(3, n), always=True) for i, o, n in aliases)
        body = _len(2, _len(1, name) + configs + io, always=True)
    return body + _len(3, bytes(metadata or b"")) + _len(4, name)


def _decode(data: bytes, message: str) -> dict:
    schema, pos = _SCHEMA[message], 0
    out: dict[str, Any] = {}
    out.update({name: [] for name, _ in schema.values() if name in _REPEATED})

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            if pos >= len(data):
                raise ValueError("truncated kernel-call proto")
            value |= (data[pos] & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if not data[pos - 1] & 0x80:
                return value & _U64

    while pos < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            raw: Any = varint()
        else:
            size = varint() if wire == 2 else {1: 8, 5: 4}.get(wire)
            if size is None:
                raise ValueError(f"unsupported wire type {wire} in {message} field {field}")
            raw, pos = data[pos:pos + size], pos + size
            if pos > len(data):
                raise ValueError("truncated kernel-call proto")
        if field not in schema:
            continue  # unknown field: skipped, as protobuf parsers do
        name, kind = schema[field]
        if kind == "packed":  # repeated varints: packed (wire type 2) as proto3 writes them, or one by one
            if wire == 2:
                out[name].extend(_varints(raw))
            elif wire == 0:
                out[name].append(raw)
            else:
                raise ValueError(f"{message}.{name}: wire type {wire} does not match a repeated integer")
            continue
        if _WIRE.get(kind, 2) != wire:
            raise ValueError(f"{message}.{name}: wire type {wire} does not match {kind}")
        value = _decode(raw, kind) if kind in _SCHEMA else _CONVERT[kind](raw)
        if name in _REPEATED:
            out[name].append(value)
        else:
            out[name] = value
    return out


def _varints(data: bytes) -> list[int]:
    values, value, shift = [], 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            values.append(value)
            value = shift = 0
    if shift:
        raise ValueError("truncated packed field in kernel-call proto")
    return values


def decode_kernel_call(data: bytes) -> dict:
    """Parse ``TritonAnyKernelCall`` bytes (zlib-compressed or not) into nested dicts and lists.

    Keys are the proto's field names; absent scalar fields are left out (proto3 defaults: 0,
    ``""``, ``b""``), repeated fields are always lists.
    """
    data = bytes(data)
    if data[:1] == b"\x78":  # a zlib header; no TritonAnyKernelCall field starts with this byte
        data = zlib.decompress(data)
    return _decode(data, "any")
