"""Run a Python function on XLA:CPU buffers in place, through a real XLA FFI custom call.

Why not ``jax.pure_callback``: a callback hands the function fresh numpy copies and copies
its results back, so ``operand_output_aliases`` cannot be honoured (a donated buffer is never
written in place), and the emitted op is XLA's own callback, which cannot carry attributes of
ours (e.g. ``cost_estimate_json``). Instead this module registers one typed-FFI handler
(``api_version=1``) whose body is a ``ctypes`` callback into Python. XLA passes it an
``XLA_FFI_CallFrame``; the handler wraps each argument and result buffer in a zero-copy numpy
view, looks up the ``function_id`` attribute and calls the registered function. An aliased
result is the operand's own buffer, already holding its data.

The structs below mirror ``xla/ffi/api/c_api.h`` (FFI API 0.3, as shipped in
``jaxlib/include`` of jaxlib 0.10.2). Only fields that have been stable since API 0.1 are
read. At registration XLA calls the handler once with a metadata extension in
``extension_start`` to learn the API version it was built against; we answer it as the C++
``Ffi::Call`` helper does. Every other stage but ``EXECUTE`` is a no-op. A Python exception
becomes an ``XLA_FFI_Error`` (never a crash), so it surfaces as a ``JaxRuntimeError``.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import secrets
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import ml_dtypes
import numpy as np

TARGET_NAME = "tritonplug_host_kernel"
HostFunction = Callable[[list[np.ndarray], list[np.ndarray]], None]

_p, _i64, _sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t


class _ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", _p), ("len", _sz)]


class _Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("value", _p)]


class _ExtensionBase(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("type", ctypes.c_int), ("next", _p)]


class _ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("extension_start", _p), ("major", ctypes.c_int), ("minor", ctypes.c_int)]


class _Metadata(ctypes.Structure):  # state_type_id (after traits) is left as XLA zero-initialised it
    _fields_ = [("struct_size", _sz), ("api_version", _ApiVersion), ("traits", ctypes.c_uint32)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("base", _ExtensionBase), ("metadata", ctypes.POINTER(_Metadata))]


class _Buffer(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("extension_start", _p), ("dtype", ctypes.c_int), ("data", _p),
                ("rank", _i64), ("dims", ctypes.POINTER(_i64))]


class _Args(ctypes.Structure):  # also XLA_FFI_Rets: same layout
    _fields_ = [("struct_size", _sz), ("extension_start", _p), ("size", _i64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("items", ctypes.POINTER(_p))]


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("extension_start", _p), ("size", _i64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("names", ctypes.POINTER(ctypes.POINTER(_ByteSpan))),
                ("attrs", ctypes.POINTER(_p))]


class _CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("extension_start", ctypes.POINTER(_ExtensionBase)), ("api", _p),
                ("ctx", _p), ("stage", ctypes.c_int), ("args", _Args), ("rets", _Args), ("attrs", _Attrs),
                ("future", _p)]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("extension_start", _p), ("message", ctypes.c_char_p), ("errc", ctypes.c_int)]


_ErrorCreate = ctypes.CFUNCTYPE(_p, ctypes.POINTER(_ErrorCreateArgs))


class _ApiPrefix(ctypes.Structure):  # XLA_FFI_Api up to its first function pointer; later ones are appended
    _fields_ = [("struct_size", _sz), ("extension_start", _p), ("api_version", _ApiVersion),
                ("internal_api", _p), ("error_create", _ErrorCreate)]


_FFI_API_VERSION = (0, 3)  # the c_api.h these mirrors follow
_EXTENSION_METADATA, _STAGE_EXECUTE, _ARG_BUFFER, _ATTR_SCALAR, _ERROR_INTERNAL = 1, 3, 1, 3, 13
_METADATA_SIZE = _Metadata.traits.offset + ctypes.sizeof(ctypes.c_uint32)
_CALL_FRAME_SIZE = _CallFrame.future.offset  # XLA_FFI_STRUCT_SIZE(XLA_FFI_CallFrame, attrs)
_ERROR_ARGS_SIZE = _ErrorCreateArgs.errc.offset + ctypes.sizeof(ctypes.c_int)

# XLA_FFI_DataType -> numpy dtype. Sub-byte types (S1/S2/S4/U1/U2/U4/F4E2M1FN) and TOKEN are not mapped.
_DTYPES: dict[int, np.dtype] = {code: np.dtype(t) for code, t in {
    1: np.bool_, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.uint8, 7: np.uint16, 8: np.uint32,
    9: np.uint64, 10: np.float16, 11: np.float32, 12: np.float64, 15: np.complex64, 18: np.complex128,
    16: ml_dtypes.bfloat16,
    **{code: getattr(ml_dtypes, name) for code, name in {
        19: "float8_e5m2", 20: "float8_e4m3fn", 23: "float8_e4m3b11fnuz", 24: "float8_e5m2fnuz",
        25: "float8_e4m3fnuz", 28: "float8_e4m3", 29: "float8_e3m4", 33: "float8_e8m0fnu"}.items()
       if hasattr(ml_dtypes, name)},
}.items()}

_functions: dict[int, HostFunction] = {}
# A random start: an exported CPU program run by another process must find no function under its id
# (a clear error), never a kernel that process happened to register under the same small id.
_ids = itertools.count(secrets.randbits(48) + 1)
_lock = threading.Lock()
_registered = False


def register_function(fn: HostFunction, content_key: str | None = None) -> int:
    """Keep ``fn`` for the life of the process and return the id to pass to :func:`lower_host_call`.

    ``fn(operands, results)`` receives zero-copy numpy views of the XLA buffers: ``operands`` are
    read-only (and may share memory with a result), ``results`` are writable; a result aliased to
    an operand already holds that operand's data. ``fn`` runs on an XLA thread, holding the GIL.

    With a ``content_key`` (a string that determines everything ``fn`` does) the id is derived from
    it, so every process lowering the same program emits the same module, and JAX's persistent
    compilation cache can serve it: a cached executable finds the function the new process registered
    under the same id while lowering. Registering a key again replaces the function (an equal one).
    Without a key the id is fresh and random.
    """
    if not callable(fn):
        raise TypeError(f"expected a callable, got {type(fn).__name__}")
    with _lock:
        if content_key is None:
            function_id = next(_ids)
        else:
            digest = hashlib.sha256(f"{TARGET_NAME}\n{content_key}".encode()).digest()
            function_id = int.from_bytes(digest[:7], "big") | 1 << 56  # positive i64, never a small counter id
        _functions[function_id] = fn
    return function_id


def _view(address: int, writable: bool) -> np.ndarray:
    buf = _Buffer.from_address(address)
    dtype = _DTYPES.get(buf.dtype)
    if dtype is None:
        raise TypeError(f"unsupported XLA_FFI_DataType {buf.dtype}")
    shape = tuple(buf.dims[d] for d in range(buf.rank))
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        array = np.zeros(shape, dtype)  # nothing to read or write; data may be NULL
    elif not buf.data:
        raise ValueError(f"XLA passed a NULL data pointer for a buffer of shape {shape}")
    else:
        raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(buf.data)
        array = np.frombuffer(memoryview(raw), dtype=dtype).reshape(shape)
    array.flags.writeable = writable
    return array


def _buffers(items: _Args, writable: bool) -> list[np.ndarray]:
    out = []
    for k in range(items.size):
        if items.types[k] != _ARG_BUFFER:
            raise TypeError(f"unsupported FFI argument/result type {items.types[k]} at position {k}")
        out.append(_view(items.items[k], writable))
    return out


def _function_id(attrs: _Attrs) -> int:
    for k in range(attrs.size):
        name = attrs.names[k].contents
        if ctypes.string_at(name.ptr, name.len) == b"function_id" and attrs.types[k] == _ATTR_SCALAR:
            scalar = _Scalar.from_address(attrs.attrs[k])
            dtype = _DTYPES.get(scalar.dtype)
            if dtype is not None and dtype.kind in "iu":
                return int(np.frombuffer(ctypes.string_at(scalar.value, dtype.itemsize), dtype)[0])
    raise KeyError("the custom call has no integer attribute 'function_id'")


def _describe(exc: BaseException, function_id: int | None) -> str:
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip().splitlines()
    tail = "\n".join(lines[-12:])
    return f"{TARGET_NAME} (function_id={function_id}) raised {type(exc).__name__}: {exc}\n{tail}"[:8000]


def _make_error(api: int, message: str) -> int | None:
    args = _ErrorCreateArgs(_ERROR_ARGS_SIZE, None, message.encode("utf-8", "replace"), _ERROR_INTERNAL)
    return _ApiPrefix.from_address(api).error_create(ctypes.byref(args))  # XLA copies the message


def _handle(frame_ptr: Any) -> int | None:
    frame = frame_ptr.contents
    ext = frame.extension_start
    if ext and ext.contents.type == _EXTENSION_METADATA:  # registration-time query, stage reads EXECUTE
        metadata = ctypes.cast(ext, ctypes.POINTER(_MetadataExtension)).contents.metadata.contents
        if metadata.struct_size < _METADATA_SIZE:
            return _make_error(frame.api, f"XLA_FFI_Metadata is {metadata.struct_size} bytes, too small")
        xla = _ApiPrefix.from_address(frame.api).api_version
        metadata.api_version = _ApiVersion(ctypes.sizeof(_ApiVersion), None,
                                           *min(_FFI_API_VERSION, (xla.major, xla.minor)))
        metadata.traits = 0
        return None
    if frame.stage != _STAGE_EXECUTE:
        return None
    function_id = None
    try:
        if frame.struct_size < _CALL_FRAME_SIZE:
            raise RuntimeError(f"XLA_FFI_CallFrame is {frame.struct_size} bytes, expected >= {_CALL_FRAME_SIZE}")
        function_id = _function_id(frame.attrs)
        with _lock:
            fn = _functions.get(function_id)
        if fn is None:
            raise KeyError(f"no host function is registered under id {function_id}")
        fn(_buffers(frame.args, writable=False), _buffers(frame.rets, writable=True))
        return None
    except BaseException as exc:  # noqa: B036 - nothing may propagate into XLA's C++ frames
        try:
            return _make_error(frame.api, _describe(exc, function_id))
        except BaseException:  # noqa: B036
            return _make_error(frame.api, f"{TARGET_NAME}: {type(exc).__name__} (error formatting failed)")


_HANDLER = ctypes.CFUNCTYPE(_p, ctypes.POINTER(_CallFrame))(_handle)


def _ensure_registered() -> None:
    global _registered
    with _lock:
        if _registered:
            return
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, (_p, ctypes.c_char_p, _p)
        capsule = new(ctypes.cast(_HANDLER, _p), None, None)
        jax.ffi.register_ffi_target(TARGET_NAME, capsule, platform="cpu", api_version=1)
        _registered = True


def _attribute(name: str, value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return np.int64(value)  # always i64, whatever jax_enable_x64 says
    raise TypeError(f"attribute {name!r} must be a str or an int, got {type(value).__name__}")


def lower_host_call(ctx: Any, args: Sequence[Any], *, function_id: int,
                    operand_output_aliases: dict[int, int] | None = None, has_side_effect: bool = False,
                    extra_attributes: Mapping[str, str | int] | None = None) -> Sequence[Any]:
    """Emit the FFI custom call for ``function_id`` from inside a JAX lowering rule (CPU only).

    Result types come from ``ctx.avals_out`` (row-major layouts). ``extra_attributes`` become
    attributes of the custom call (visible in the HLO text) and are ignored by the handler.
    """
    _ensure_registered()
    attrs = {k: _attribute(k, v) for k, v in (extra_attributes or {}).items()}
    if "function_id" in attrs:
        raise ValueError("'function_id' is reserved; pass it as the function_id argument")
    attrs["function_id"] = np.int64(function_id)
    rule = jax.ffi.ffi_lowering(TARGET_NAME, operand_output_aliases=dict(operand_output_aliases or {}) or None,
                                has_side_effect=has_side_effect)
    return rule(ctx, *args, **attrs)
