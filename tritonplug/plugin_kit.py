"""Building blocks for backend plugins: what the bundled CUDA and ROCm backends share.

* compiling TTIR with Triton's own back end (:func:`compile_ttir`, :class:`TTIRSource`), with
  Triton's on-disk cache kept out of the way (:func:`private_triton_cache`);
* Triton's own default for the options a call leaves unset (:func:`fp_fusion_enabled`);
* checks of the options every Triton backend has (:func:`power_of_two`, :func:`int_in_range`,
  :func:`check_bools`, :func:`check_hashable`) and of option names against the backend's options
  class in Triton (:func:`check_known_options`, :func:`check_option_names`), each raising the error
  the user sees; the grid CUDA devices launch (:data:`CUDA_MAX_GRID`);
* building the kernel object jaxlib's GPU runtime launches (:func:`gpu_kernel`);
* declaring a backend's own ``TRITONPLUG_*`` settings (:class:`Setting` and its constructors :func:`boolean`,
  :func:`choice`, :func:`integer`, :func:`seconds`, from :mod:`tritonplug.settings`): the backend returns them from
  ``tritonplug_declare_settings`` and reads each with ``setting.get()`` (read, validated and typed now);
* parsing Triton's options for a GPU backend (:func:`triton_options`): all a backend gives is what differs.

A plugin may import this module besides :mod:`tritonplug.hookspecs` and :mod:`tritonplug.records`.
It is JAX-free — a compile hook runs in a compile worker that never imports JAX — and imports
nothing of the host but ``records`` and ``settings``. It is versioned with the host: what it offers follows
tritonplug's version, and plugins depend on ``tritonplug`` for it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import triton
from triton._C.libtriton import ir
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from tritonplug.records import Binary, GpuKernel, Launch, Options

if TYPE_CHECKING:
    from _typeshed import DataclassInstance  # what Triton's CUDAOptions and HIPOptions are
from tritonplug.settings import (  # noqa: F401 - re-exported: what a backend declares its settings with
    Setting,
    SettingError,
    boolean,
    choice,
    integer,
    seconds,
)

# ---------------------------------------------------------------------------------------------
# Triton, 3.6 through 3.9 (and 3.10's knobs): every Triton API the kit touches is in this section. All of
# it (``ASTSource``'s constructor, ``hash`` and ``make_ir``, ``ir.parse_mlir_module``, ``GPUTarget``,
# ``triton.compile(src, target=, options=)``, a compiled kernel's ``asm`` and namedtuple
# ``metadata``, options classes as dataclasses) is the same in every supported version; the one
# difference, how FP fusion's default is decided, is :func:`fp_fusion_enabled`'s.

TRITON_VERSION: str = triton.__version__


def option_names(options_class: type[DataclassInstance]) -> frozenset[str]:
    """The option names a Triton backend accepts: the fields of its options dataclass
    (``CUDAOptions``, ``HIPOptions``)."""
    return frozenset(options_class.__dataclass_fields__)


def fp_fusion_enabled(requested: bool | None) -> bool:
    """Whether Triton fuses ``a * b + c`` into an FMA for a kernel whose ``enable_fp_fusion`` is ``requested``
    (``None``: the call did not say), decided as the installed Triton's own ``parse_options`` decides it.

    Resolved where the call is lowered, so the value enters the cache key and reaches the compile worker as
    an explicit option (whatever the worker's environment). ``triton.knobs.language`` reads the environment
    on every access and may be set from Python, both honoured here as by Triton:

    * 3.6 to 3.8: ``requested`` if given, else ``knobs.language.default_fp_fusion``
      (``TRITON_DEFAULT_FP_FUSION``, on by default);
    * 3.9: ``knobs.language.fp_fusion_enabled(requested)``: the same, except that
      ``TRITON_FORCE_DISABLE_FP_FUSION=1`` overrides both, and an unset ``TRITON_DEFAULT_FP_FUSION``
      draws Triton's one-time warning that the default changes in 3.10;
    * 3.10: the same function, with fusion off by default (``TRITON_DEFAULT_FP_FUSION=1`` restores it).
    """
    language = triton.knobs.language
    decide = getattr(language, "fp_fusion_enabled", None)
    if decide is not None:
        return bool(decide(requested))
    if getattr(language, "force_disable_fp_fusion", False):
        return False
    return bool(language.default_fp_fusion if requested is None else requested)


def triton_default(options_class: type[DataclassInstance], name: str) -> Any:
    """The default Triton's options class gives option ``name`` (``num_warps``, ``num_stages`` …): what
    ``triton.compile`` uses when the call leaves it unset."""
    return options_class.__dataclass_fields__[name].default


def _parse_ttir(path: str, context: Any) -> Any:
    return ir.parse_mlir_module(path, context)


def _compile(source: ASTSource, target: GPUTarget, options: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict]:
    kernel = triton.compile(source, target=target, options=dict(options))
    return kernel.asm, kernel.metadata._asdict()


# ---------------------------------------------------------------------------------------------
# Compiling TTIR


class TTIRSource(ASTSource):
    """A source that is already TTIR text, so ``triton.compile`` runs every back-end stage.

    Subclassing ``ASTSource`` (rather than compiling a ``.ttir`` file) keeps the TTIR
    optimisation stage, which ``triton.compile`` skips for IR files.
    """

    def __init__(self, ttir: str, name: str) -> None:
        super().__init__(types.SimpleNamespace(__name__=name, arg_names=[]), {})
        self.ttir = ttir

    def hash(self) -> str:
        return hashlib.sha256(self.ttir.encode()).hexdigest()

    def make_ir(self, *args: Any) -> Any:
        context = args[-1]
        with tempfile.NamedTemporaryFile("w", suffix=".ttir", delete=False) as f:
            f.write(self.ttir)
        try:
            module = _parse_ttir(f.name, context)
        finally:
            os.unlink(f.name)
        module.context = context
        return module


@functools.cache
def _ttgir_source_class() -> type:
    """The source class for a Gluon kernel's TTGIR. Made on first use: Gluon's package takes about
    0.3 s to import, which no process that never compiles a Gluon kernel should pay."""
    from triton.experimental.gluon._runtime import GluonASTSource

    class TTGIRSource(GluonASTSource):
        """A Gluon kernel's front-end output (TTGIR text), so ``triton.compile`` runs Gluon's passes and
        every later stage, exactly as for the ``@gluon.jit`` function itself."""

        def __init__(self, ttgir: str, name: str) -> None:
            super().__init__(types.SimpleNamespace(__name__=name, arg_names=[]), {})
            self.ttir = ttgir

        hash = TTIRSource.hash
        make_ir = TTIRSource.make_ir

    return TTGIRSource


#: For each front-end stage, a function returning the source class that continues Triton's pipeline from it.
SOURCES: dict[str, Callable[[], type]] = {"ttir": lambda: TTIRSource, "ttgir": _ttgir_source_class}


@contextlib.contextmanager
def private_triton_cache() -> Iterator[None]:
    """Keep Triton's own cache out of the way: tritonplug caches binaries itself."""
    saved = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tritonplug-triton-") as scratch:
        os.environ["TRITON_CACHE_DIR"] = scratch
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved


@dataclass(frozen=True)
class CompiledTTIR:
    """What Triton's back end made of one TTIR module: its stages by name and its metadata.

    ``asm`` maps a stage to its text or bytes (``"ptx"``, ``"cubin"``, ``"amdgcn"``,
    ``"hsaco"`` …); ``metadata`` is Triton's (``name``, ``num_warps``, ``shared`` …).
    """

    asm: Mapping[str, Any]
    metadata: Mapping[str, Any]

    def binary_metadata(self, keep: Iterable[str]) -> dict[str, Any]:
        """The entries of ``keep`` this kernel has, plus the Triton version: a ``Binary``'s metadata."""
        info = {k: self.metadata[k] for k in keep if k in self.metadata}
        info["triton_version"] = TRITON_VERSION
        return info


def compile_ttir(ttir: str, name: str, triton_backend: str, arch: int | str, warp_size: int,
                 options: Mapping[str, Any], stage: str = "ttir") -> CompiledTTIR:
    """TTIR (or, with ``stage="ttgir"``, a Gluon kernel's TTGIR) → every later stage, with Triton's own
    pipeline for ``GPUTarget(triton_backend, arch, warp_size)``.

    Triton's cache is a private scratch directory, removed afterwards.
    """
    if stage not in SOURCES:
        raise ValueError(f"cannot compile IR of stage {stage!r}; known stages: {sorted(SOURCES)}")
    with private_triton_cache():
        asm, metadata = _compile(SOURCES[stage]()(ttir, name), GPUTarget(triton_backend, arch, warp_size), options)
    return CompiledTTIR(asm, metadata)


# ---------------------------------------------------------------------------------------------
# Option checks: each returns the checked value or raises the error the user sees, naming the option.

#: The most program instances a CUDA device launches along x, y and z (``BackendInfo.max_grid``).
CUDA_MAX_GRID = (2**31 - 1, 65535, 65535)

#: Options every Triton backend has that must be bools.
BOOL_OPTIONS = ("enable_fp_fusion", "debug")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def power_of_two(name: str, value: Any, limit: int | None = None) -> int:
    """``value`` if it is an int power of two, at most ``limit`` when one is given."""
    if not _is_int(value) or value <= 0 or value & (value - 1) or (limit is not None and value > limit):
        expected = "a positive power of two" if limit is None else f"a power of two between 1 and {limit}"
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


def int_in_range(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` if it is an int in ``[low, high]`` (no upper bound when ``high`` is None)."""
    if not _is_int(value) or value < low or (high is not None and value > high):
        if high is not None:
            expected = f"an int between {low} and {high}"
        else:
            expected = "a non-negative int" if low == 0 else f"an int >= {low}"
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


def check_bools(options: Mapping[str, Any], names: Iterable[str] = BOOL_OPTIONS) -> None:
    """Each of ``names`` that ``options`` holds is a bool."""
    for name in names:
        if name in options and not isinstance(options[name], bool):
            raise TypeError(f"{name} must be a bool, got {options[name]!r}")


def check_hashable(options: Mapping[str, Any]) -> None:
    """Every value is hashable, as ``Options`` (a cache-key part) needs."""
    for name, value in options.items():
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"option {name} must be hashable, got {type(value).__name__} {value!r}") from None


def check_known_options(options: Mapping[str, Any], options_class: type[DataclassInstance], backend: str) -> None:
    """Every name in ``options`` is a field of Triton's ``options_class``; ``backend`` names the
    backend in the error (``"CUDA"``)."""
    check_option_names(options, option_names(options_class), backend, f"Triton's {options_class.__name__}")


def check_option_names(options: Mapping[str, Any], known: Iterable[str], backend: str, source: str) -> None:
    """Every name in ``options`` is one of ``known`` (what ``source`` accepts, for the error)."""
    known = frozenset(known)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown {backend} backend option(s) {unknown} in backend_options; "
                         f"{source} has {sorted(known)}")


def triton_options(call_options: Mapping[str, Any], options_class: type[DataclassInstance], backend: str,
                   max_warps: int, num_ctas: Callable[[Any], Any]) -> Options:
    """A GPU backend's ``tritonplug_parse_options``, what differs between backends given: the options a call set
    (``None`` dropped), ``num_warps`` a power of two up to ``max_warps`` and ``num_stages`` a non-negative int (each
    Triton's ``options_class`` default when unset), ``num_ctas`` as ``num_ctas`` (called with the call's value, 1
    when unset) accepts or raises, the bools bools, every name a field of ``options_class`` (``backend`` names the
    backend in the error), and FP fusion resolved as the installed Triton does (so it is part of the cache key)."""
    options = {k: v for k, v in call_options.items() if v is not None}
    for name, check in (("num_warps", lambda n, v: power_of_two(n, v, max_warps)),
                        ("num_stages", lambda n, v: int_in_range(n, v, 0))):
        options[name] = check(name, options.get(name, triton_default(options_class, name)))
    ctas = num_ctas(options.get("num_ctas", 1))
    if "num_ctas" in options:
        options["num_ctas"] = ctas
    check_bools(options)
    check_known_options(options, options_class, backend)
    options["enable_fp_fusion"] = fp_fusion_enabled(options.get("enable_fp_fusion"))
    return Options.from_mapping(options)


# ---------------------------------------------------------------------------------------------
# Kernel objects


def gpu_kernel(binary: Binary, launch: Launch, image: str, compute_capability: int,
               module_image: bytes | None = None) -> GpuKernel:
    """The ``GpuKernel`` for a binary whose metadata is Triton's (see :meth:`CompiledTTIR.binary_metadata`).

    ``image`` is what jaxlib's runtime reads as PTX: PTX text on CUDA, an HSACO file's path on
    ROCm; the binary's ``ttir`` image (a Gluon kernel's ``ttgir``), when it has one, rides along for debugging.
    """
    meta = binary.metadata
    return GpuKernel(
        kernel_name=meta["name"], num_warps=meta["num_warps"], num_ctas=meta.get("num_ctas", 1),
        shared_mem_bytes=meta.get("shared", 0), image=image,
        ttir=(binary.images.get("ttir") or binary.images.get("ttgir") or b"").decode(),
        compute_capability=compute_capability, launch=launch, module_image=module_image,
        global_scratch_size=meta.get("global_scratch_size", 0),
        global_scratch_align=meta.get("global_scratch_align", 1))
