"""Run one :class:`~tritonplug.records.Launch` in Triton's interpreter on NumPy buffers.

How it drives the interpreter (no torch): the kernel's Python function gets the
interpreter's AST rewrite once (:func:`compat.interpreted`); each run patches
``triton.language`` onto the interpreter's global builder (:func:`compat.patch_language`),
redirects calls of other ``@triton.jit`` functions (helpers, ``tl.standard``'s ``sum``/``max``
…, functions passed as constexprs) to their rewritten versions, installs the bf16 and fp8 layers
(and in checked mode the bounds checks), then calls the rewritten kernel once per program
id. Pointer arguments are ``tl.tensor`` scalars holding buffer addresses; the interpreter
loads and stores through them directly, so results are written in place, and only operands
are copied (once, into writable scratch) so a kernel writing to one cannot touch the
caller's array. Everything that depends only on the launch (argument template, types,
rewritten function) is prepared once per launch and cached.

The interpreter keeps global state (the builder's program id, patched modules), so runs
are serialised by a process-wide lock; within a run programs execute one after another.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import triton.language as tl

from tritonplug.records import ArrayParam, ConstexprParam, Launch, ScalarParam, TensorDescriptorParam
from tritonplug_interpret import bf16, checked, compat, fp8
from tritonplug_interpret.checked import OutOfBoundsAccess
from tritonplug_interpret.recent import Recent

__all__ = ["OutOfBoundsAccess", "Prepared", "prepare", "run_launch"]

_LOCK = threading.RLock()

_ELEMENT_TYPES = {
    "bool": tl.int1, "int8": tl.int8, "int16": tl.int16, "int32": tl.int32, "int64": tl.int64,
    "uint8": tl.uint8, "uint16": tl.uint16, "uint32": tl.uint32, "uint64": tl.uint64,
    "float16": tl.float16, "bfloat16": tl.bfloat16, "float32": tl.float32, "float64": tl.float64,
    **fp8.ELEMENT_TYPES,  # float8_e4m3fn, float8_e5m2 ...: handed over as their bytes
}
_POINTER_TYPES = {name: tl.pointer_type(ty) for name, ty in _ELEMENT_TYPES.items()}
_SCALAR_TYPES = {
    "i1": (tl.int1, np.bool_), "i32": (tl.int32, np.int32), "u32": (tl.uint32, np.uint32),
    "i64": (tl.int64, np.int64), "u64": (tl.uint64, np.uint64), "fp32": (tl.float32, np.float32),
    "fp64": (tl.float64, np.float64),
}


class _Pointer:
    """Placeholder in the argument template: the pointer to the ``slot``-th ArrayParam."""

    __slots__ = ("slot", )

    def __init__(self, slot: int) -> None:
        self.slot = slot


class _Descriptor:
    """Placeholder in the argument template: a tensor descriptor over the ``slot``-th pointer."""

    __slots__ = ("slot", "param")

    def __init__(self, slot: int, param: TensorDescriptorParam) -> None:
        self.slot, self.param = slot, param


class _Scope:
    """Attribute patches undone in reverse order."""

    def __init__(self) -> None:
        self.changes: list[tuple[Any, str, bool, Any]] = []

    def set_attr(self, obj: Any, name: str, value: Any) -> None:
        had = name in vars(obj)
        self.changes.append((obj, name, had, getattr(obj, name, None)))
        setattr(obj, name, value)

    def restore(self) -> None:
        while self.changes:
            obj, name, had, old = self.changes.pop()
            if had:
                setattr(obj, name, old)
            else:
                delattr(obj, name)


def _call_interpreted(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``__call__`` of @triton.jit functions during a run: run their rewritten body."""
    return compat.interpreted(compat.python_function(self))(*args, **kwargs)


def _scalar(value: Any, ty: Any, np_type: Any) -> Any:
    return tl.tensor(compat.TensorHandle(np.array([value], dtype=np_type), ty), ty)


def _element_type(dtype_name: str, what: str) -> Any:
    try:
        return _POINTER_TYPES[dtype_name]
    except KeyError:
        raise TypeError(f"{what} has dtype {dtype_name}, which the interpreter backend does not support; "
                        f"supported: {', '.join(_ELEMENT_TYPES)}") from None


class Prepared:
    """Everything about a launch that does not change from run to run."""

    def __init__(self, launch: Launch, check: bool) -> None:
        self.launch = launch
        self.check = bool(check)
        self.name = launch.kernel_name
        self.fn = compat.python_function(launch.kernel)
        self.grid = tuple(int(g) for g in launch.grid)
        if len(self.grid) != 3:
            raise ValueError(f"{self.name}: launch.grid must have 3 entries, got {launch.grid!r}")
        self.n_operands, self.n_results = len(launch.operands), len(launch.results)
        self.alias_of = {}
        for i, o in launch.aliases:
            if not (0 <= i < self.n_operands and 0 <= o < self.n_results):
                raise ValueError(f"{self.name}: alias {(i, o)} is out of range")
            self.alias_of[int(i)] = int(o)
        specs = list(launch.operands) + list(launch.results)
        self.buffer_dtypes = [str(s.dtype) for s in specs]
        self.slots: list[tuple[int, Any, checked.Region]] = []  # (buffer, pointer type, region)
        names = list(launch.arg_names) + [f"arg{i}" for i in range(len(launch.arg_names), len(launch.params))]
        self.template = tuple(self._convert(p, name) for p, name in zip(launch.params, names, strict=False))
        self._rewritten: Callable | None = None

    def _convert(self, param: Any, name: str) -> Any:
        if isinstance(param, TensorDescriptorParam):
            pointer = self._convert(ArrayParam(param.buffer, 0, 0), name)
            return _Descriptor(pointer.slot, param)
        if isinstance(param, ArrayParam):
            buffer = int(param.buffer)
            if not 0 <= buffer < len(self.buffer_dtypes):
                raise ValueError(f"{self.name}: argument {name!r} points to buffer {buffer}, but the launch "
                                 f"has {len(self.buffer_dtypes)} buffers")
            spec = (list(self.launch.operands) + list(self.launch.results))[buffer]
            pointer_type = _element_type(self.buffer_dtypes[buffer], f"argument {name!r}")
            nbytes = int(np.prod(spec.shape, dtype=np.int64)) * _itemsize(spec.dtype)
            region = checked.Region(name, nbytes, str(spec.dtype), tuple(spec.shape))
            self.slots.append((buffer, pointer_type, region))
            return _Pointer(len(self.slots) - 1)
        if isinstance(param, ScalarParam):
            try:
                ty, np_type = _SCALAR_TYPES[param.dtype]
            except KeyError:
                raise TypeError(f"{self.name}: argument {name!r} has scalar dtype {param.dtype!r}; "
                                f"expected one of {sorted(_SCALAR_TYPES)}") from None
            return _scalar(param.value, ty, np_type)
        if isinstance(param, ConstexprParam):
            return param.value
        if isinstance(param, tuple):
            return tuple(self._convert(p, f"{name}[{i}]") for i, p in enumerate(param))
        raise TypeError(f"{self.name}: argument {name!r} is {param!r}, not an ArrayParam, ScalarParam, "
                        f"TensorDescriptorParam, ConstexprParam or tuple of them")

    @property
    def rewritten(self) -> Callable:
        if self._rewritten is None:
            self._rewritten = compat.interpreted(self.fn)
        return self._rewritten

    # ------------------------------------------------------------------ run

    def _buffers(self, operands: Sequence[Any], results: Sequence[Any]) -> tuple[list, list]:
        if len(operands) != self.n_operands or len(results) != self.n_results:
            raise ValueError(f"{self.name}: expected {self.n_operands} operand(s) and {self.n_results} "
                             f"result(s), got {len(operands)} and {len(results)}")
        buffers: list[Any] = [None] * (self.n_operands + self.n_results)
        write_back = []
        for o, array in enumerate(results):
            if not (isinstance(array, np.ndarray) and array.flags.c_contiguous and array.flags.writeable):
                scratch = np.array(array, order="C", copy=True)
                write_back.append((array, scratch))
                array = scratch
            buffers[self.n_operands + o] = array
        for i, array in enumerate(operands):
            if i in self.alias_of:
                buffers[i] = buffers[self.n_operands + self.alias_of[i]]
            else:
                buffers[i] = np.array(array, order="C", copy=True)
        for b, array in enumerate(buffers):
            if array.dtype.name != self.buffer_dtypes[b]:
                raise TypeError(f"{self.name}: buffer {b} has dtype {array.dtype.name}, the launch says "
                                f"{self.buffer_dtypes[b]}")
        return buffers, write_back

    def _arguments(self, addresses: list[int]) -> list[Any]:
        pointers = [tl.tensor(compat.TensorHandle(np.array([a], dtype=np.uint64), ty), ty)
                    for a, (_, ty, _) in zip(addresses, self.slots, strict=True)]

        def fill(entry: Any) -> Any:
            if isinstance(entry, _Pointer):
                return pointers[entry.slot]
            if isinstance(entry, _Descriptor):
                p = entry.param
                return compat.make_descriptor(pointers[entry.slot], p.shape, p.strides, p.block_shape, p.padding,
                                              p.round_f32_to_tf32)
            if type(entry) is tuple:
                return tuple(fill(e) for e in entry)
            return entry

        return [fill(e) for e in self.template]

    def run(self, operands: Sequence[Any], results: Sequence[Any]) -> None:
        """Run the kernel on ``operands`` (read only) and ``results`` (filled in place)."""
        buffers, write_back = self._buffers(operands, results)
        real = [buffers[b].__array_interface__["data"][0] for b, _, _ in self.slots]
        amap = None
        if self.check:
            amap = checked.AddressMap(self.name, [r for _, _, r in self.slots], real)
            addresses = [int(v) for v in amap.virtual]
        else:
            addresses = real
        kernel = self.rewritten
        gx, gy, gz = self.grid
        builder = compat.builder
        with _LOCK:
            language = compat.patch_language()
            scope = _Scope()
            try:
                for cls in compat.JIT_CALLABLE_TYPES:
                    scope.set_attr(cls, "__call__", _call_interpreted)
                bf16.install(scope)
                fp8.install(scope)
                if amap is not None:
                    checked.install(scope, amap)
                args = self._arguments(addresses)
                builder.set_grid_dim(gx, gy, gz)
                for x in range(gx):
                    for y in range(gy):
                        for z in range(gz):
                            builder.set_grid_idx(x, y, z)
                            kernel(*args)
            finally:
                scope.restore()
                language.restore()
        for array, scratch in write_back:
            array[...] = scratch


def _itemsize(dtype: Any) -> int:
    name = str(dtype)
    return 2 if name == "bfloat16" else 1 if name in fp8.ELEMENT_TYPES else np.dtype(name).itemsize


_CACHE: Recent[tuple[Launch, Prepared]] = Recent(256)


def prepare(launch: Launch, check: bool = False) -> Prepared:
    """The prepared form of ``launch`` (cached per launch object)."""
    key = (id(launch), bool(check))
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] is launch:
            return hit[1]
        prepared = Prepared(launch, check)
        _CACHE.put(key, (launch, prepared))
        return prepared


def run_launch(launch: Launch, operands: list[np.ndarray], results: list[np.ndarray], check: bool) -> None:
    """Execute ``launch.kernel`` over ``launch.grid`` in Triton's interpreter.

    Buffers are ``operands`` then ``results``; ``results`` hold their initial contents and
    receive what the kernel writes. ``check`` turns on bounds checking of every access
    (:class:`OutOfBoundsAccess`).
    """
    prepare(launch, check).run(operands, results)
