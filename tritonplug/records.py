"""Frozen records shared by the host, the backend plugins and the compile workers.

These are the only types a plugin needs from the host besides the hook markers in
:mod:`tritonplug.hookspecs`. Records that cross the process boundary (``CompileJob``,
``Binary``) hold plain data only, so they pickle and serialise to JSON without surprises.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

#: Scalar parameter types understood by jaxlib's kernel-call runtime.
SCALAR_DTYPES = ("i1", "i32", "u32", "i64", "u64", "fp32", "fp64")


#: IR stages a compile hook can accept: Triton's front-end output, and Gluon's (layouts already chosen).
IR_STAGES = ("ttir", "ttgir")
#: How a backend treats ``triton.autotune`` configurations.
AUTOTUNE_MODES = ("runtime", "first")
#: How a backend passes host-side tensor descriptors (:class:`TensorDescriptorParam`) to its kernels:
#: not at all, as descriptor parameters of jaxlib's GPU kernel-call runtime (``GpuKernel``), or
#: through its own kernel object.
TENSOR_DESCRIPTOR_MODES = ("none", "jaxlib", "kernel")
#: How a backend's kernel objects receive their buffers (``BackendInfo.buffer_order``).
BUFFER_ORDERS = ("signature", "operands_first")


@dataclass(frozen=True)
class BackendInfo:
    """What a plugin is (name, JAX platforms, version) and what it can do.

    The capability fields tell the host how to drive the backend; it never infers them:

    * ``ir_stages``: the IR the compile hook accepts, in :data:`IR_STAGES` (``"ttir"`` from Triton's
      front end for ``@triton.jit`` kernels, ``"ttgir"`` from Gluon's for ``@gluon.jit`` kernels).
      ``()`` means the hook needs no IR (``job.ir`` is ``""``): the backend runs ``@triton.jit``
      kernels from their source, and cannot run Gluon kernels. Otherwise the target's
      ``triton_backend``/``arch``/``warp_size`` drive the front end.
    * ``cache_binaries``: binaries go to the on-disk cache (and any remote tier).
    * ``compile_in_worker``: the compile hook runs in a subprocess worker. Workers load plugins from
      entry points, so a plugin registered at run time always compiles in the calling process.
    * ``autotune``: ``"runtime"`` makes every surviving configuration a kernel object (jaxlib's
      runtime times them on the device); ``"first"`` keeps only the first that survives pruning.
    * ``pointer_divisibility`` / ``integer_divisibility``: the ``tt.divisibility`` promised for pointer
      parameters and for integer scalars divisible by it (``0``: none); ``specialize_ones``: integer
      scalars equal to 1 become constants, as Triton's own launcher does.
    * ``option_names``: the option names ``parse_options`` accepts (``None``: not declared). When every
      installed backend declares them, ``backend_options`` naming an option none accepts is refused at
      the call, on every platform alike.
    * ``max_grid``: the most program instances the device launches along x, y and z (``None``: no
      limit beyond 2**31-1); a larger grid is refused when lowering for this backend.
    * ``tensor_descriptors``: how host-side TMA descriptors reach the kernel, in
      :data:`TENSOR_DESCRIPTOR_MODES`: ``"none"`` (refused at the call), ``"jaxlib"`` (the plugin's
      ``GpuKernel`` carries :class:`TmaDescriptorParam` entries that jaxlib's runtime encodes; the host
      refuses them where the installed jaxlib cannot), ``"kernel"`` (the backend's kernel object
      takes :class:`TensorDescriptorParam` entries itself).
    * ``buffer_order``: in :data:`BUFFER_ORDERS`. ``"signature"``: the kernel object finds each
      parameter's buffer by the ``buffer`` field of its entry (host and JAX kernels). ``"operands_first"``:
      the runtime hands the k-th pointer parameter the k-th buffer of (operands..., results...), as
      jaxlib's does; the host then compiles a kernel whose signature puts an output pointer before an
      input pointer with its outputs moved last (``tritonplug.compile.kernel_abi``), and the launch lists the
      parameters in the compiled kernel's order.
    * ``inlines``: the backend's kernels are JAX functions (:class:`JaxKernel`) that XLA compiles for any
      platform, so a call given ``inline=True`` on another platform is lowered by it: ``detect_target`` is asked
      with that platform and ``requested["inline"] = True``, and ``make_kernel`` returns a ``JaxKernel`` or
      raises ``NotImplementedError`` saying why the kernel cannot be inlined. One loaded backend at most.
    """

    name: str
    platforms: tuple[str, ...]
    version: str
    description: str = ""
    ir_stages: tuple[str, ...] = ("ttir",)
    cache_binaries: bool = True
    compile_in_worker: bool = True
    autotune: str = "runtime"
    pointer_divisibility: int = 16
    integer_divisibility: int = 16
    specialize_ones: bool = True
    option_names: tuple[str, ...] | None = None
    max_grid: tuple[int, int, int] | None = None
    tensor_descriptors: str = "none"
    buffer_order: str = "signature"
    inlines: bool = False


@dataclass(frozen=True)
class Target:
    """The machine a kernel is compiled for.

    ``triton_backend``/``arch``/``warp_size`` are the three fields of Triton's
    ``GPUTarget`` that Triton's front end compiles for; ``triton_backend`` may be ``None``
    only for backends whose ``ir_stages`` is empty.

    ``max_shared_mem``: the bytes of shared memory one block may use on this target (Triton's
    ``max_shared_mem``, the opt-in maximum), or ``None`` where no limit is known (a CPU, an unknown
    architecture). The host leaves out a configuration whose binary's ``metadata["shared"]`` exceeds
    it, as Triton's autotuner skips a configuration that raises ``OutOfResources``. It changes which
    configurations are kept, never a binary, so it is not part of a cache key.
    """

    backend: str
    platform: str
    arch: int | str
    warp_size: int = 32
    triton_backend: str | None = None
    max_shared_mem: int | None = None

    def describe(self) -> str:
        return f"{self.backend}:{self.arch}"


@dataclass(frozen=True)
class Options:
    """Validated, hashable compiler options for one configuration.

    ``values`` are the options handed to Triton's backend (``num_warps`` …); they are
    sorted by name so equal options compare and hash equal.
    """

    values: tuple[tuple[str, Hashable], ...] = ()

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Hashable]) -> Options:
        return cls(tuple(sorted(mapping.items())))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def get(self, name: str, default: Any = None) -> Any:
        return self.as_dict().get(name, default)


@dataclass(frozen=True)
class CompileJob:
    """One IR → binary compilation, run by the backend's compile hook (in a worker or in process).

    ``ir`` is the module's text at stage ``ir_stage`` (one of the backend's ``ir_stages``), or
    ``""`` with ``ir_stage == ""`` for a backend that needs no IR.
    """

    backend: str
    kernel_name: str
    target: Target
    options: Options
    ir: str
    ir_stage: str = "ttir"
    description: str = ""


@dataclass(frozen=True)
class Binary:
    """A compiled kernel: named images (``ptx``, ``cubin``, ``hsaco`` …) and JSON metadata.

    ``metadata`` must be JSON-serialisable: the disk cache stores it as JSON, never as
    a pickle. Treat both mappings as read-only.
    """

    kernel_name: str
    format: str
    images: Mapping[str, bytes] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ArrayParam:
    """A pointer parameter bound to the next buffer (operands first, then results)."""

    buffer: int
    bytes_to_zero: int = 0
    divisibility: int = 16


@dataclass(frozen=True)
class ScalarParam:
    """A scalar passed by value; ``dtype`` is one of :data:`SCALAR_DTYPES`."""

    value: bool | int | float
    dtype: str


@dataclass(frozen=True)
class ConstexprParam:
    """A parameter compiled into the kernel (``tl.constexpr`` or specialised to 1)."""

    value: Any


@dataclass(frozen=True)
class TensorDescriptorParam:
    """A host-side tensor descriptor (``tritonplug.TensorDescriptor``) over buffer ``buffer``.

    ``shape``/``strides`` are in elements (row-major strides end in 1); ``block_shape`` is the
    block each ``desc.load`` moves; ``padding`` is ``"zero"`` or ``"nan"`` (what out-of-bounds
    elements read as); ``layout`` is the ``repr`` of a Gluon shared-memory layout, or ``""``.
    A plugin turns it into what its runtime passes (for CUDA: a :class:`TmaDescriptorParam`
    followed by the shape as ``i32`` and the strides as ``i64`` scalars).
    """

    buffer: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    padding: str = "zero"
    round_f32_to_tf32: bool = False
    layout: str = ""


@dataclass(frozen=True)
class TmaDescriptorParam:
    """An NVIDIA TMA descriptor that jaxlib's runtime encodes (``cuTensorMapEncodeTiled``) over the
    next buffer, as ``Parameter.tensor_descriptor.nvidia`` of jaxlib's ``triton.proto``.

    ``elem_type`` and ``swizzle`` are the CUDA driver's ``CUtensorMapDataType`` and
    ``CUtensorMapSwizzle`` values; ``shape``/``strides`` are in elements, outermost first;
    ``block_shape`` is the box; ``oob_fill`` is 1 for NaN padding, else 0.
    """

    buffer: int
    elem_type: int
    swizzle: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    oob_fill: int = 0


Param = Union[ArrayParam, ScalarParam, ConstexprParam, TensorDescriptorParam, TmaDescriptorParam]


@dataclass(frozen=True)
class BufferSpec:
    """Shape and dtype (a NumPy dtype name) of one operand or result buffer."""

    shape: tuple[int, ...]
    dtype: str


def param_leaves(params: Sequence[Any]) -> list[Any]:
    """The entries of a launch's ``params`` with tuple parameters flattened, in order."""
    return [q for p in params for q in (param_leaves(p) if isinstance(p, tuple) else [p])]


@dataclass(frozen=True)
class Launch:
    """One configuration of one call: what the kernel object must launch.

    ``params`` lists what the compiled kernel takes, in its order, and ``arg_names`` names each entry:
    normally one entry per kernel parameter, in the signature's order, a tuple parameter being a
    (possibly nested) tuple of entries. For a backend whose ``buffer_order`` is ``"operands_first"`` and a
    signature with an output pointer before an input pointer, the host compiles the kernel with its
    outputs last and ``params`` holds its runtime entries flat in that order, named like ``pair[1]``
    (``tritonplug.compile.kernel_abi``). A host-side tensor descriptor is a :class:`TensorDescriptorParam` (a
    ``GpuKernel``'s launch holds what the plugin made of it). A GPU backend passes the flattened
    non-constexpr entries to the runtime; a host backend rebuilds the whole argument list. ``kernel`` is the
    ``@triton.jit`` function itself, for backends that run Python. ``aliases`` pairs
    (operand index, result index) whose buffers are shared.
    """

    kernel_name: str
    grid: tuple[int, int, int]
    params: tuple[Any, ...]
    arg_names: tuple[str, ...]
    operands: tuple[BufferSpec, ...]
    results: tuple[BufferSpec, ...]
    aliases: tuple[tuple[int, int], ...] = ()
    kernel: Any = None
    description: str = ""


@dataclass(frozen=True)
class GpuKernel:
    """A kernel for jaxlib's GPU kernel-call runtime (CUDA and ROCm share it).

    ``image`` is what the runtime's ``ptx`` field carries: PTX text on CUDA, the path of
    an HSACO file on ROCm. ``module_image`` optionally carries a ready cubin.
    """

    kernel_name: str
    num_warps: int
    num_ctas: int
    shared_mem_bytes: int
    image: str
    ttir: str
    compute_capability: int
    launch: Launch
    module_image: bytes | None = None
    global_scratch_size: int = 0
    global_scratch_align: int = 1


@dataclass(frozen=True)
class HostKernel:
    """A kernel run on the host: ``run(operands, results)`` fills ``results`` in place.

    ``operands`` are read-only NumPy arrays, ``results`` writable NumPy arrays already
    holding their initial contents (aliased inputs copied in, zeroed outputs zeroed).
    """

    kernel_name: str
    run: Callable[[list, list], None]
    launch: Launch


@dataclass(frozen=True)
class JaxKernel:
    """A kernel as a pure function of JAX arrays, inlined into the program and compiled by XLA.

    ``fn(operands, results)`` returns the final results; ``results`` hold the initial contents
    (aliased operands, zeroed outputs zeroed, others zeros). A plugin builds ``fn`` from JAX's
    public array API only (``jax.numpy``, ``jax.lax``, ``jax.vmap``); the host traces and lowers it.
    """

    kernel_name: str
    fn: Callable[[Sequence[Any], Sequence[Any]], Sequence[Any]]
    launch: Launch


KernelObject = Union[GpuKernel, HostKernel, JaxKernel]
