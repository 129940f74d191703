"""The host's one adapter over Triton's Python API (triton 3.6 through 3.9, and 3.10 as far as announced).

Everything the host needs from Triton beyond ``triton.jit`` goes through here: unwrapping
``autotune``/``heuristics`` wrappers, reading kernel parameters and autotune configurations,
the front end (AST → TTIR), its errors, and the kernel's source hash. The classes and fields
used are the same in every supported version.
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any

import triton
from triton.compiler.errors import CompilationError, CompileTimeAssertionFailure, UnsupportedLanguageConstruct
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.jit import JITFunction, KernelInterface

TRITON_VERSION = triton.__version__
#: The IR each kernel language's front end emits: Triton's TTIR, Gluon's TTGIR (layouts chosen by the
#: author; Triton 3.9 names the stage ``glir``, 3.6 ``ttgir``: the same dialect, before Gluon's passes).
FRONTEND_STAGES = {"triton": "ttir", "gluon": "ttgir"}

#: Gluon's runtime module. Importing Gluon costs about 0.3 s (its layouts and NVIDIA/AMD language
#: packages), so the host never imports it: a ``@gluon.jit`` kernel exists only once its author has.
_GLUON_RUNTIME = "triton.experimental.gluon._runtime"


def is_gluon_kernel(fn: Any) -> bool:
    """Whether ``fn`` (an unwrapped jit function) is a ``@gluon.jit`` kernel."""
    runtime = sys.modules.get(_GLUON_RUNTIME)
    return runtime is not None and isinstance(fn, runtime.GluonJITFunction)


@dataclass(frozen=True)
class KernelParameter:
    name: str
    is_constexpr: bool
    do_not_specialize: bool
    default: Any
    has_default: bool
    #: Triton's type for an annotated parameter (``n: tl.int32`` → ``"i32"``, ``p: "*fp16"``); "" if none.
    annotation: str = ""


@dataclass(frozen=True, eq=False)
class KernelFacts:
    """What the host knows of one kernel object: the ``@triton.jit`` function with its wrappers
    (outermost first) peeled off, its name and its parameters. Computed once per kernel object;
    equal only to itself, so it can stand for the kernel in hashed call descriptions."""

    kernel: object
    fn: JITFunction
    autotuner: Autotuner | None
    heuristics: tuple[Heuristics, ...]
    name: str
    params: tuple[KernelParameter, ...]
    param_names: frozenset[str]
    constexpr_names: frozenset[str]
    language: str = "triton"  # "gluon" for @gluon.jit kernels
    missing: Any = None  # a global it uses that could not be loaded (``unavailable_dependency``), if any

    @property
    def ir_stage(self) -> str:
        """The IR stage this kernel's front end emits (a key of ``FRONTEND_STAGES``' values)."""
        return FRONTEND_STAGES[self.language]


class KernelFactsCache:
    """Facts per kernel object, keyed by id (so that a mistaken, unhashable ``kernel`` still gets the
    TypeError of :func:`kernel_facts`); eager calls look the same kernel up on every call."""

    def __init__(self) -> None:
        self._facts: dict[int, KernelFacts] = {}

    def get(self, kernel: object) -> KernelFacts:
        cached = self._facts.get(id(kernel))
        if cached is not None and cached.kernel is kernel:
            return cached
        facts = kernel_facts(kernel)
        self._facts[id(kernel)] = facts
        return facts

    def clear(self) -> None:
        self._facts.clear()


def kernel_facts(kernel: object) -> KernelFacts:
    """Peel wrappers off a kernel and read its parameters.

    ``triton.autotune`` and ``triton.heuristics`` wrappers are kept for their configurations and rules;
    any other ``KernelInterface`` with a ``.fn`` (FlagGems' ``LibEntry``, a library's own launcher cache),
    at any depth, is passed through, as its ``run`` ends in the wrapped kernel's.
    """
    autotuner, heuristics, fn = None, [], kernel
    while not isinstance(fn, JITFunction):
        if isinstance(fn, Autotuner):
            if autotuner is not None:
                raise ValueError("kernel: two triton.autotune wrappers on one kernel are not supported")
            autotuner = fn
        elif isinstance(fn, Heuristics):
            heuristics.append(fn)
        elif not (isinstance(fn, KernelInterface) and hasattr(fn, "fn")):
            what = "" if fn is kernel else f" (wrapping {type(fn).__name__}: {fn!r})"
            raise TypeError(f"kernel must be a @triton.jit function, optionally wrapped by triton.autotune, "
                            f"triton.heuristics or another triton KernelInterface with a .fn, got "
                            f"{type(kernel).__name__}: {kernel!r}{what}")
        fn = fn.fn
    # has_default by identity: Triton's own ``default != empty`` is an array, not a bool, for an array default
    params = tuple(KernelParameter(p.name, bool(p.is_constexpr), bool(p.do_not_specialize), p.default,
                                   p.default is not inspect.Parameter.empty, _annotation_type(p)) for p in fn.params)
    return KernelFacts(kernel, fn, autotuner, tuple(heuristics), fn.fn.__name__, params,
                       frozenset(p.name for p in params), frozenset(p.name for p in params if p.is_constexpr),
                       "gluon" if is_gluon_kernel(fn) else "triton", unavailable_dependency(fn))


def _annotation_type(param: Any) -> str:
    try:
        return str(getattr(param, "annotation_type", "") or "")
    except Exception:  # an annotation Triton cannot normalise: Triton's own launch reports it
        return ""


def unavailable_dependency(fn: JITFunction) -> Any | None:
    """The first global that ``fn`` (or a ``@triton.jit`` function it calls) names and that stands for what could
    not be loaded: an object whose class has ``kernel_import_error`` (``tritonplug.kernels_of``'s placeholders
    for a name whose import failed), else None."""
    seen: set[int] = set()
    stack = [fn]
    while stack:
        jit = stack.pop()
        if id(jit) in seen:
            continue
        seen.add(id(jit))
        function = jit.fn
        code_objects, names = [function.__code__], set()
        while code_objects:
            code = code_objects.pop()
            names.update(code.co_names)
            code_objects.extend(c for c in code.co_consts if hasattr(c, "co_names"))
        for name in sorted(names):
            value = function.__globals__.get(name)
            if hasattr(type(value), "kernel_import_error"):
                return value
            if isinstance(value, JITFunction):
                stack.append(value)
    return None


def python_function(fn: JITFunction) -> Any:
    """The plain Python function a ``@triton.jit`` function was made from."""
    return fn.fn


def source_key(value: Any) -> str:
    """A stable identity for a constexpr or kernel: Triton's own hash for jit functions.

    ``JITFunction.cache_key`` hashes the kernel's source and, recursively, every
    ``@triton.jit`` function and global it refers to.
    """
    if isinstance(value, JITFunction):
        return f"jit:{value.cache_key}"
    return repr(value)


def launcher_debug(fn: JITFunction) -> bool:
    """Whether Triton's own launcher compiles ``fn`` in debug mode (device assertions kept) when the launch does
    not ask for it: ``@triton.jit(debug=True)`` or ``TRITON_DEBUG=1`` (``knobs.runtime.debug``, read when Triton
    is imported), the same rule in every supported version (``JITFunction.run``)."""
    return bool(getattr(fn, "debug", None) or triton.knobs.runtime.debug)


def autotune_configs(autotuner: Autotuner) -> list[triton.Config]:
    """The configurations a ``triton.autotune`` wrapper was given, in order."""
    return list(autotuner.configs)


def autotune_key_names(autotuner: Autotuner | None) -> list[str]:
    """The argument names of ``triton.autotune(key=...)``; none without an autotuner."""
    return list(autotuner.keys) if autotuner is not None else []


def autotune_resets(autotuner: Autotuner) -> tuple[list[str], list[str]]:
    """``reset_to_zero`` and ``restore_value`` of a ``triton.autotune`` wrapper (argument names)."""
    return list(autotuner.reset_to_zero or []), list(autotuner.restore_value or [])


@dataclass(frozen=True)
class ConfigFields:
    """What a ``triton.Config`` sets, read once: its metaparameters (``kwargs``), its launch options and its
    ``pre_hook`` (run once against stand-ins: ``calls.autotune_hooks``)."""

    config: Any
    kwargs: dict[str, Any]
    options: dict[str, Any]
    pre_hook: Any


def config_fields(config: triton.Config) -> ConfigFields:
    """The fields of an autotune configuration."""
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages, "num_ctas": config.num_ctas}
    if config.maxnreg is not None:
        options["maxnreg"] = config.maxnreg
    return ConfigFields(config, dict(config.kwargs), options, config.pre_hook)


def heuristic_rules(heuristics: Heuristics) -> dict[str, Any]:
    """A ``triton.heuristics`` wrapper's rules: metaparameter name → function of the named arguments."""
    return dict(heuristics.values)


def is_config(value: Any) -> bool:
    return isinstance(value, triton.Config)


def autotuner_hooks(autotuner: Autotuner) -> dict[str, Any]:
    """The hooks a user gave ``triton.autotune`` itself (``pre_hook=``, ``post_hook=``), by name. A user's
    ``pre_hook`` replaces Triton's default one, which zeroes ``reset_to_zero`` (the same in 3.6 through 3.10)."""
    return {name: getattr(autotuner, name) for name in ("pre_hook", "post_hook")
            if getattr(autotuner, f"user_defined_{name}", False)}


def early_prune_function(autotuner: Autotuner) -> Any:
    """``prune_configs_by={"early_config_prune": f}`` of a ``triton.autotune`` wrapper, or None."""
    return autotuner.early_config_prune


def is_triton_dtype(value: Any) -> bool:
    """Whether ``value`` is a ``triton.language`` dtype (``tl.float16``), a constexpr Triton takes as it is."""
    import triton.language as tl

    return isinstance(value, tl.dtype)


def numpy_dtype_name(value: Any) -> str | None:
    """The NumPy name of a NumPy/JAX dtype or scalar type (``jnp.float16``, ``np.dtype("int32")``); else None."""
    import numpy as np

    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    dtype = getattr(value, "dtype", None)
    if isinstance(value, type) and isinstance(dtype, np.dtype):  # jnp.float16 and friends
        return dtype.name
    return None


#: Triton's dtype name for each NumPy dtype name whose Triton name differs.
_TRITON_DTYPE_NAMES = {"float8_e4m3fn": "float8e4nv", "float8_e5m2": "float8e5", "float8_e4m3fnuz": "float8e4b8",
                       "float8_e5m2fnuz": "float8e5b16", "bool": "int1"}


def triton_dtype(name: str) -> Any:
    """``tl.float16`` for ``"float16"`` (a NumPy or Triton name); None when Triton has no such dtype."""
    import triton.language as tl

    value = getattr(tl, _TRITON_DTYPE_NAMES.get(name, name), None)
    if isinstance(value, tl.dtype):
        return value
    try:
        return tl.dtype(name)  # Triton's short names: "fp16", "bf16", "i32"
    except Exception:
        return None


def descriptor_type(dtype: str, block_shape: tuple[int, ...], layout: str) -> str:
    """The signature type of a host-side tensor descriptor parameter, as Triton's launcher mangles it
    (``tensordesc<fp16[64,64]>``; a Gluon descriptor appends its layout's ``repr``)."""
    inner = f"{dtype}[{','.join(map(str, block_shape))}]"
    return f"tensordesc<{inner},{layout}>" if layout else f"tensordesc<{inner}>"


def frontend_ir(fn: JITFunction, target: tuple[str, int | str, int], options: dict[str, Any],
                signature: dict[str, str], constexprs: dict[str, Any], attrs: dict[tuple, list]) -> str:
    """Run the kernel's front end and return the module as text: Triton's (Python AST → TTIR) for a
    ``@triton.jit`` kernel, Gluon's (→ TTGIR, with the warps, CTAs and target set on the module) for a
    ``@gluon.jit`` one."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend

    gpu_target = GPUTarget(*target)
    backend = make_backend(gpu_target)
    # The front end never reads enable_fp_fusion; a value where the backend left it out (the CPU backend) keeps
    # Triton 3.9's parse_options from warning about a default that the compile, not this, decides.
    parsed = backend.parse_options({"enable_fp_fusion": True, **options})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    source_class = sys.modules[_GLUON_RUNTIME].GluonASTSource if is_gluon_kernel(fn) else ASTSource
    source = source_class(fn, signature, constexprs, attrs)
    module = source.make_ir(gpu_target, parsed, backend.get_codegen_implementation(parsed),
                            backend.get_module_map(), context)
    return str(module)


def prepare_compiler() -> None:
    """Compute what ``triton.compile`` computes once per process before its first compile: the hash of
    Triton's own sources and library (``triton_key``, about 0.5 s: it reads all of ``libtriton``).
    Compile workers call it while they start, so a worker's first compile is not the slowest."""
    from triton.runtime.cache import triton_key

    triton_key()


#: What Triton's front end raises for a fault in the kernel's source (a type error, an unsupported
#: construct, a failed ``tl.static_assert``); the last two subclass the first in every supported version.
KERNEL_SOURCE_ERRORS = (CompilationError, CompileTimeAssertionFailure, UnsupportedLanguageConstruct)


def is_kernel_source_error(exc: BaseException) -> bool:
    """Whether ``exc``, raised by :func:`frontend_ir`, blames the kernel's source rather than tritonplug."""
    return isinstance(exc, KERNEL_SOURCE_ERRORS)


def is_verifier_failure(exc: BaseException) -> bool:
    """Whether the front end built a module that fails MLIR's verifier (Triton prints the diagnostics and the
    module, then raises a bare ``RuntimeError``)."""
    return isinstance(exc, RuntimeError) and str(exc) == "error encountered during parsing"


def kernel_source_error_line(exc: BaseException) -> int | None:
    """The line a kernel source error points at, counted from the kernel's ``def`` line (1-based); None if unknown."""
    line = getattr(getattr(exc, "node", None), "lineno", None)
    return line if isinstance(line, int) else None


def kernel_source_error_node(exc: BaseException) -> Any:
    """The AST node (of the kernel's source) a kernel source error points at; None if unknown."""
    return getattr(exc, "node", None)


def kernel_source_error_message(exc: BaseException) -> str:
    """Triton's own words for a kernel source error, without the source excerpt: the innermost
    message along the chain of causes (an error in a called ``@triton.jit`` function is wrapped)."""
    message, seen = "", set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = getattr(current, "error_message", None) if isinstance(current, CompilationError) else str(current)
        if text:
            message = str(text)
        current = current.__cause__ or current.__context__
    return message.strip().splitlines()[-1] if message.strip() else str(exc).strip().splitlines()[-1]


def environment_key() -> tuple[tuple[str, str], ...]:
    """``TRITON_*`` variables can change generated code, so they enter the cache key."""
    ignored = {"TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR"}
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITON_") and k not in ignored))
