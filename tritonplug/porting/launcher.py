"""Triton's launch syntax on JAX values: ``tritonplug.launch(kernel)[grid](*args, **kwargs)``.

A library's torch launcher allocates its outputs (``torch.empty_like``), reads strides and sizes off
tensors and launches ``kernel[grid](...)``, the kernel writing some of its pointer arguments. JAX
arrays are immutable, so the launch has to know which buffers the kernel writes; here that is said
by the kind of value passed, nothing else changes:

* a JAX (or NumPy) array is a read-only input;
* a placeholder from :func:`empty` / :func:`empty_like` / :func:`zeros` / :func:`zeros_like` is a
  buffer the kernel writes: fresh, it is one of the call's outputs (``out_type``, no copy, no fill;
  ``zeros`` through the runtime's zeroing); once written, passing it again updates it in place
  (through a ``jax.new_ref`` made from its value, which XLA aliases);
* a ``jax.new_ref`` (or :func:`tensor` over one) is updated in place.

After the launch a placeholder holds the written value: ``y[...]`` reads it (as a ``Ref`` is
read). The launch also returns the values of the placeholders it wrote first, its fresh outputs
(one: the array; several: a tuple in signature order; none: ``None``); buffers updated in place are
read through their handles. Handles from :func:`tensor` and the placeholders answer the
torch calls launchers make (``.stride(i)``, ``.numel()``, ``.size(i)``, ``.shape``, ``.dtype``,
``.ndim``, ``.view(-1, n)`` ...), for row-major contiguous buffers, which JAX arrays always are.

This is a thin layer: every launch is one ``tritonplug.triton_call`` with every argument by name,
fresh placeholders as ``out_type`` (they are the only parameters left without an argument, so the
binding gives them the outputs in signature order) and the rest as arrays, refs and scalars.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tritonplug.api import call_kernel
from tritonplug.calls import binding
from tritonplug.porting.stores import stored_params
from tritonplug.process.state import state

_EMPTY, _ZEROS, _VALUE, _INPUT, _REF = "empty", "zeros", "value", "input", "ref"


class _Storage:
    """The buffer behind a handle and its views: what it holds now (``kind``) and its value or ref."""

    __slots__ = ("kind", "shape", "dtype", "value")

    def __init__(self, kind: str, shape: tuple[int, ...], dtype: np.dtype, value: Any = None) -> None:
        self.kind, self.shape, self.dtype, self.value = kind, shape, dtype, value

    def read(self) -> Any:
        if self.kind in (_EMPTY, _ZEROS):  # never written: jnp.empty's value
            return jnp.zeros(self.shape, self.dtype)
        return self.value[...] if self.kind == _REF else self.value


def _reshaped(value: Any, shape: tuple[int, ...]) -> Any:
    return value if tuple(value.shape) == shape else jnp.reshape(value, shape)


@dataclass(frozen=True)
class _Device:
    """What a launcher reads of ``torch.device``: its type and index (a tuple's ``index`` method would shadow it)."""

    type: str
    index: int = 0


def _shape_of(sizes: Sequence[Any], where: str) -> tuple[int, ...]:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    shape = []
    for d in sizes:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < -1:
            raise TypeError(f"{where}: sizes must be non-negative ints (or one -1), got {tuple(sizes)!r}")
        shape.append(int(d))
    return tuple(shape)


class Tensor:
    """A torch-like handle over a JAX buffer, for launcher code: read it with ``t[...]``.

    Made by :func:`tensor` (over an array: read-only; over a ``jax.new_ref``: written in place) or by
    :func:`empty`/:func:`zeros` and their ``_like`` forms (written by the kernel). ``view``/``reshape``
    give another handle on the same buffer.
    """

    __slots__ = ("_storage", "shape", "dtype")

    def __init__(self, storage: _Storage, shape: tuple[int, ...]) -> None:
        self._storage, self.shape, self.dtype = storage, shape, storage.dtype

    ndim = property(lambda self: len(self.shape))

    @property
    def device(self) -> Any:
        """Where launchers read ``x.device.type`` (and pass ``device=x.device`` to the allocators,
        which ignore it): ``"cuda"`` on a GPU backend, else JAX's backend name."""
        backend = jax.default_backend()
        return _Device("cuda" if backend == "gpu" else backend)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    itemsize = property(element_size)
    is_cuda = property(lambda self: self.device.type == "cuda")

    def new_empty(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return _fresh(_EMPTY, size, self.dtype if dtype is None else dtype, "new_empty")

    def new_zeros(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return _fresh(_ZEROS, size, self.dtype if dtype is None else dtype, "new_zeros")

    def stride(self, dim: int | None = None) -> Any:
        strides = tuple(math.prod(self.shape[i + 1:]) for i in range(len(self.shape)))
        return strides if dim is None else strides[dim]

    def is_contiguous(self) -> bool:
        return True

    def contiguous(self) -> Tensor:
        return self

    def view(self, *sizes: Any) -> Tensor:
        """The same buffer seen with another shape (one size may be -1), as ``torch.Tensor.view``."""
        shape = list(_shape_of(sizes, "view"))
        if shape.count(-1) > 1:
            raise ValueError(f"view: only one size may be -1, got {tuple(shape)}")
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = self.numel() // known if known else 0
        if math.prod(shape) != self.numel():
            raise ValueError(f"view: shape {tuple(shape)} is invalid for a buffer of {self.numel()} elements")
        return Tensor(self._storage, tuple(shape))

    reshape = view

    def flatten(self) -> Tensor:
        return self.view(-1)

    def unsqueeze(self, dim: int) -> Tensor:
        shape = list(self.shape)
        shape.insert(dim if dim >= 0 else len(shape) + 1 + dim, 1)
        return Tensor(self._storage, tuple(shape))

    def squeeze(self, dim: int | None = None) -> Tensor:
        if dim is None:
            return Tensor(self._storage, tuple(d for d in self.shape if d != 1))
        dim = dim % max(len(self.shape), 1)
        return Tensor(self._storage, self.shape[:dim] + self.shape[dim + 1:]) if self.shape[dim] == 1 else self

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """A transposed *copy* (JAX arrays have no strided views): a kernel writing it does not write this
        buffer, so read the result back from it (``q = q.transpose(1, 2)`` ... ``return q.transpose(1, 2)``).
        It is writable if this buffer is."""
        value = jnp.swapaxes(self[...], dim0, dim1)
        kind = _INPUT if self._storage.kind == _INPUT else _VALUE
        return Tensor(_Storage(kind, tuple(value.shape), self.dtype, value), tuple(value.shape))

    def __getitem__(self, index: Any) -> Any:
        """The buffer's current value (``t[...]``), as a JAX array of this handle's shape, indexed."""
        value = _reshaped(self._storage.read(), self.shape)
        return value if index is Ellipsis else value[index]

    def data_ptr(self) -> int:
        raise TypeError("a tritonplug handle has no device address: JAX places and owns the buffer; pass the handle "
                        "itself to the kernel's pointer parameter (alignment is what Triton's specialisation sees)")

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"tritonplug.Tensor({self._storage.kind}, shape={self.shape}, dtype={self.dtype.name})"


def tensor(x: Any) -> Tensor:
    """A torch-like handle over a JAX array (a read-only input) or a ``jax.new_ref`` (updated in place)."""
    if isinstance(x, Tensor):
        return x
    if not binding.is_array(x):
        raise TypeError(f"tensor(x): x must be a JAX or NumPy array or a jax.new_ref, got {type(x).__name__}")
    kind = _REF if binding.is_ref(x) else _INPUT
    shape = tuple(int(d) for d in x.shape)
    return Tensor(_Storage(kind, shape, np.dtype(x.dtype), x if kind == _REF else jnp.asarray(x)), shape)


def _fresh(kind: str, sizes: Sequence[Any], dtype: Any, where: str) -> Tensor:
    shape = _shape_of(sizes, where)
    if -1 in shape:
        raise TypeError(f"{where}: sizes must be non-negative ints, got {shape}")
    return Tensor(_Storage(kind, shape, np.dtype(jnp.float32 if dtype is None else dtype)), shape)


def empty(*size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A buffer for the kernel to write (as ``torch.empty``; ``device`` is accepted and ignored)."""
    return _fresh(_EMPTY, size, dtype, "empty")


def zeros(*size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A zero-filled buffer for the kernel to write (as ``torch.zeros``)."""
    return _fresh(_ZEROS, size, dtype, "zeros")


def empty_like(x: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A buffer shaped like ``x`` (an array, a ref or a handle), for the kernel to write."""
    return _fresh(_EMPTY, (tuple(x.shape),), x.dtype if dtype is None else dtype, "empty_like")


def zeros_like(x: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A zero-filled buffer shaped like ``x``, for the kernel to write."""
    return _fresh(_ZEROS, (tuple(x.shape),), x.dtype if dtype is None else dtype, "zeros_like")


class _MetaGrid:
    """A grid callable that also sees the launch's scalar arguments in ``meta``, as Triton's launcher
    passes every argument; equal when its grid and scalars are, so repeated eager launches memoise."""

    __slots__ = ("grid", "scalars")

    def __init__(self, grid: Callable[[dict[str, Any]], Any], scalars: tuple[tuple[str, Any], ...]) -> None:
        self.grid, self.scalars = grid, scalars

    def __call__(self, meta: dict[str, Any]) -> Any:
        return self.grid({**dict(self.scalars), **meta})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _MetaGrid) and other.grid is self.grid and other.scalars == self.scalars

    def __hash__(self) -> int:
        return hash((id(self.grid), self.scalars))


class Launcher:
    """``launch(kernel)``: index it with the grid, then call it as Triton's ``kernel[grid](...)``."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.facts = state.kernels.get(kernel)  # a TypeError naming the object if it is no Triton kernel

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"launch({self.facts.name}) was called without a grid: index it with the grid first, as "
                        f"Triton's kernel[grid](...): launch({self.facts.name})[grid](...)")

    def __getattr__(self, name: str) -> Any:  # .fn, .configs ... of the kernel, as launchers may read them
        return getattr(self.__dict__["kernel"], name)

    def __repr__(self) -> str:
        return f"tritonplug.launch({self.facts.name})"

    def run(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        """Launch on ``args``/``kwargs`` bound as Triton binds them (by position, then by name);
        keywords that name no parameter are launch options (``num_warps``, ``num_stages`` ...)."""
        facts = self.facts
        bound = binding.bind_like_a_call(tuple(p.name for p in facts.params), args,
                                         {k: v for k, v in kwargs.items() if k in facts.param_names}, facts.name)
        options = {k: v for k, v in kwargs.items() if k not in facts.param_names}
        plan = _Plan(facts)
        for p in facts.params:
            if p.name in bound:
                plan.add(p.name, bound[p.name], p.is_constexpr)
            elif not p.is_constexpr:
                if not p.has_default:
                    raise TypeError(f"launch of kernel {facts.name!r}: missing argument for parameter {p.name!r}")
                plan.named[p.name] = p.default  # Triton's launcher fills defaults; out_type must not
        if callable(grid):
            scalars = tuple((k, v) for k, v in plan.named.items() if isinstance(v, (bool, int, float, np.generic)))
            grid = _MetaGrid(grid, scalars)
        return plan.run(self.kernel, grid, options)


class _Plan:
    """One launch: each parameter's value for ``triton_call``, and what to do with the results."""

    def __init__(self, facts: Any) -> None:
        self.facts = facts
        self.named: dict[str, Any] = {}
        self.buffers: dict[int, list[tuple[str, Tensor]]] = {}  # storage id -> its parameters, in order
        self.outputs: list[tuple[Tensor, str]] = []  # fresh placeholders: out_type, signature order
        self.refs: list[tuple[Tensor, Any]] = []  # (handle, ref passed)

    def add(self, name: str, value: Any, is_constexpr: bool) -> None:
        if type(value).__module__.startswith("torch"):
            raise TypeError(f"launch of kernel {self.facts.name!r}: argument {name!r} is a torch "
                            f"{type(value).__name__}; pass a JAX array, or tritonplug.empty/zeros for an output")
        if not isinstance(value, Tensor) and not is_constexpr and name in stored_params(self.facts) and (
                isinstance(value, (jax.Array, np.ndarray))):
            raise TypeError(f"launch of kernel {self.facts.name!r}: the kernel stores through parameter {name!r}, "
                            f"which got a {'jax.Array' if isinstance(value, jax.Array) else 'NumPy array'} of shape "
                            f"{tuple(value.shape)}: JAX arrays cannot be "
                            f"written; pass tritonplug.empty(shape, dtype) (or zeros) for an output, or "
                            f"tritonplug.tensor(x) / a jax.new_ref to update x in place")
        if not isinstance(value, Tensor):
            self.named[name] = value
        elif is_constexpr:
            raise TypeError(f"launch of kernel {self.facts.name!r}: argument {name!r} is a tl.constexpr, but a "
                            f"buffer was passed")
        else:
            self.buffers.setdefault(id(value._storage), []).append((name, value))

    def resolve(self) -> None:
        """Inputs by value, a fresh placeholder as an output, a buffer written in place as a ref.

        One buffer passed to several parameters (``dX = dY``: Liger's in-place backward) cannot be one
        buffer in XLA, which gives each operand its own: the parameter the kernel stores through gets
        the ref, the others the value before the launch, which is what a kernel that reads each
        element before writing it (the condition for in place to be race-free on the GPU) sees.
        """
        for group in self.buffers.values():
            storage = group[0][1]._storage
            if storage.kind == _INPUT:
                self.named.update((name, _reshaped(storage.value, t.shape)) for name, t in group)
                continue
            if len(group) == 1 and storage.kind in (_EMPTY, _ZEROS):
                self.outputs.append(group[0][::-1])
                continue
            stored = [name for name, _ in group if name in stored_params(self.facts)] if len(group) > 1 else []
            if len(stored) > 1:
                raise ValueError(f"launch of kernel {self.facts.name!r}: one buffer is passed to parameters "
                                 f"{stored}, which the kernel all store through; JAX gives each parameter a buffer "
                                 f"of its own, so pass one buffer per written parameter")
            written = stored[0] if stored else group[0][0]
            for name, t in group:
                if name != written:
                    self.named[name] = t[...]
            name, t = next((n, t) for n, t in group if n == written)
            same_shape = storage.kind == _REF and tuple(storage.value.shape) == t.shape
            self.refs.append((t, storage.value if same_shape else jax.new_ref(t[...])))
            self.named[name] = self.refs[-1][1]
        order = {p.name: i for i, p in enumerate(self.facts.params)}
        self.outputs.sort(key=lambda out: order[out[1]])

    def run(self, kernel: Any, grid: Any, options: dict[str, Any]) -> Any:
        self.resolve()
        out_type = tuple(jax.ShapeDtypeStruct(t.shape, t.dtype) for t, _ in self.outputs)
        zeroed = tuple(i for i, (t, _) in enumerate(self.outputs) if t._storage.kind == _ZEROS)
        # zeroed_outputs is the runtime's memset (deprecated for users, not here): call_kernel does not warn
        results = call_kernel(kernel=kernel, out_type=out_type, grid=grid, zeroed_outputs=zeroed, **self.named,
                              **options)
        for (t, _), result in zip(self.outputs, results, strict=True):
            t._storage.kind, t._storage.value = _VALUE, _reshaped(result, t._storage.shape)
        for t, ref in self.refs:
            s = t._storage
            if s.kind == _REF:
                if ref is not s.value:
                    s.value[...] = _reshaped(ref[...], s.shape)
            else:
                s.kind, s.value = _VALUE, _reshaped(ref[...], s.shape)
        values = tuple(t[...] for t, _ in self.outputs)
        return None if not values else values[0] if len(values) == 1 else values


def launch(kernel: Any) -> Launcher:
    """Triton's launch syntax on JAX values: ``launch(kernel)[grid](*args, **kwargs)``.

    ``kernel`` is a ``@triton.jit`` function, optionally wrapped by ``triton.autotune`` /
    ``triton.heuristics``. ``grid`` is a tuple or a callable of the metaparameters (which also sees
    the scalar arguments, as in Triton). Arguments are bound as Triton binds them; JAX arrays are
    read-only, placeholders (:func:`empty` ...) and ``jax.new_ref`` s are written. Returns the
    values of the fresh placeholders it wrote (see the module docstring).
    """
    return Launcher(kernel)
