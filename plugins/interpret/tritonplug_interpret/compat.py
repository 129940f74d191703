"""This plugin's one adapter over Triton's interpreter internals (triton 3.6 through 3.9).

The runner does not go through ``InterpretedFunction.run``: its ``GridExecutor`` copies
arguments with torch's storage API. It drives the interpreter's pieces itself, all taken
from here: the AST rewrite of a ``@triton.jit`` function, the patching of
``triton.language`` onto the global ``InterpreterBuilder``, the builder itself and its
``TensorHandle``.

What differs between the versions, and how it is absorbed:

* memory ops' trailing arguments: 3.6 has ``create_masked_load(ptrs, mask, other,
  cache_modifier, eviction_policy, is_volatile)`` and ``create_masked_store(ptrs, value,
  mask, cache_modifier, eviction_policy)``, 3.9 ``(..., cache_policy, is_volatile)`` and
  ``(..., cache_policy)``. Wrappers take the leading arguments and pass ``*rest`` through.
* what reaches those two ops: 3.9 routes ``atomic_load``/``atomic_store``/``atomic_poll``,
  tensor descriptors and plain loads through them, 3.6 also its block pointers; wrapping
  :data:`MEMORY_OPS` covers every access of both.
* ``get_bf16``: 3.9's builder has it, 3.6's lacks it although 3.6's semantic calls it for a
  non-zero bf16 constant; :func:`bf16.install` always supplies one.
* bf16 <-> fp16 in ``create_fp_to_fp`` exists only in 3.9; the bf16 layer handles every
  bf16 conversion itself on both.
* the fast reductions: 3.9 also recognises the ``tie_break_fast`` arg-min/max combiners
  (3.6 sends them to the generic path). :data:`FAST_REDUCE_COMBINERS` is the union; the
  bf16 layer widens bf16 inputs for all of them, which is exact for min/max either way.
* ``tensor.__index__`` (``range(K)`` on a runtime scalar): 3.6 does ``int(handle.data)``,
  which NumPy 2 rejects for the shape-(1,) arrays scalars live in; 3.9 squeezes first.
  :func:`patch_language` installs 3.9's version on both.
* ``InterpretedFunction.__call__`` re-patches the language and wraps errors in
  ``InterpreterError`` (both versions); nested calls are redirected to
  :func:`interpreted` instead, see :data:`JIT_CALLABLE_TYPES`.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import triton
import triton.language as tl
from triton._C.libtriton import interpreter as _native
from triton._C.libtriton import ir as _ir
from triton.backends.amd.compiler import HIPOptions
from triton.backends.nvidia.compiler import CUDAOptions
from triton.language import standard as _standard
from triton.runtime.jit import JITFunction

TRITON_VERSION = triton.__version__
#: The options Triton's GPU backends accept: the interpreter accepts them too, so one call runs on both.
GPU_OPTION_NAMES: tuple[str, ...] = tuple(sorted(set(CUDAOptions.__dataclass_fields__)
                                                 | set(HIPOptions.__dataclass_fields__)))


@functools.cache
def _interpreter() -> types.ModuleType:
    """Triton's interpreter module, imported on first use: tens of milliseconds that a process which never
    runs a kernel in the interpreter (a GPU process loads this plugin too) should not pay."""
    from triton.runtime import interpreter

    return interpreter


#: Names taken from the interpreter module on first access (PEP 562): ``TensorHandle``; ``builder``, the
#: one builder every patched ``triton.language`` builtin calls into; ``JIT_CALLABLE_TYPES``, the classes
#: whose instances kernels call as helpers (``@triton.jit`` functions, interpreted or not).
_FROM_INTERPRETER: dict[str, Callable[[Any], Any]] = {
    "TensorHandle": lambda interpreter: interpreter.TensorHandle,
    "builder": lambda interpreter: interpreter.interpreter_builder,
    "JIT_CALLABLE_TYPES": lambda interpreter: (JITFunction, interpreter.InterpretedFunction),
}


def __getattr__(name: str) -> Any:
    take = _FROM_INTERPRETER.get(name)
    if take is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = take(_interpreter())
    return value


#: Builder methods that touch memory (see the module docstring).
MEMORY_OPS = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")


ATOMIC_FADD = _ir.ATOMIC_OP.FADD
ATOMIC_XCHG = _ir.ATOMIC_OP.XCHG
ROUND_TOWARD_ZERO = _ir.ROUNDING_MODE.RTZ


def _existing(module: Any, *names: str) -> frozenset:
    return frozenset(getattr(module, n) for n in names if hasattr(module, n))


#: Combiners the interpreter's ``tl.reduce`` computes with one NumPy call on the raw data.
FAST_REDUCE_COMBINERS = _existing(
    _standard, "_sum_combine", "_elementwise_max", "_elementwise_min",
    "_argmin_combine_tie_break_left", "_argmax_combine_tie_break_left",
    "_argmin_combine_tie_break_fast", "_argmax_combine_tie_break_fast")
#: Combiners the interpreter's ``tl.associative_scan`` computes with one NumPy call.
FAST_SCAN_COMBINERS = _existing(_standard, "_sum_combine", "_prod_combine")

# ``_patch_lang(fn)`` patches the language modules visible from ``fn.__globals__``; this
# carrier makes it patch all of them (tl, tl.core, tl.math, tensor methods), once per run.
_LANGUAGE_CARRIER = types.SimpleNamespace(__globals__={"tl": tl, "core": tl.core})


def _index(self: Any) -> int:
    return int(np.asarray(self.handle.data).squeeze())


def patch_language() -> Any:
    """Point ``triton.language`` at the interpreter; returns an object with ``restore()``."""
    scope = _interpreter()._patch_lang(_LANGUAGE_CARRIER)
    scope.set_attr(tl.tensor, "__index__", _index)
    return scope


def python_function(kernel: Any) -> Callable:
    """The plain Python function behind a ``@triton.jit`` function (or autotuner/heuristics)."""
    fn = kernel
    for _ in range(16):
        if inspect.isfunction(fn):
            return fn
        fn = getattr(fn, "fn", None)
    raise TypeError(f"{kernel!r} is not a @triton.jit function")


def interpreted(fn: Callable) -> Callable:
    """``fn`` with the interpreter's AST rewrite applied (cached, shared with Triton's own cache)."""
    interpreter = _interpreter()
    cache = interpreter.InterpretedFunction.rewritten_fn
    rewritten = cache.get(fn)
    if rewritten is None:
        rewritten = cache[fn] = interpreter.FunctionRewriter(fn).rewrite_ast()
    return rewritten


def np_dtype(tl_dtype: Any) -> np.dtype:
    """The NumPy dtype the interpreter stores a Triton type in (bf16 as uint16)."""
    return _interpreter()._get_np_dtype(tl_dtype)


def raw_load(addresses: np.ndarray, mask: np.ndarray, other: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return _native.load(addresses, mask, other, dtype)


def raw_store(addresses: np.ndarray, values: np.ndarray, mask: np.ndarray) -> None:
    _native.store(addresses, values, mask)


def canonical_ttir(text: str) -> str:
    """Run Triton's own TTIR clean-up passes over front-end output and print it without locations.

    The inliner removes ``tt.call``s (helpers, ``tl.sum`` …); canonicalisation, CSE and symbol DCE
    drop the front end's dead code and unreachable blocks, so the XLA translator sees one
    structured function. The same passes, in the same order, start every GPU backend's
    ``make_ttir``. ``parse_mlir_module`` takes a file path on every supported Triton.
    """
    import os
    import tempfile

    from triton._C.libtriton import passes

    context = _ir.context()
    _ir.load_dialects(context)
    fd, path = tempfile.mkstemp(suffix=".ttir")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        module = _ir.parse_mlir_module(path, context)
    finally:
        os.unlink(path)
    manager = _ir.pass_manager(context)
    passes.common.add_inliner(manager)
    rewrite_descriptors = getattr(passes.ttir, "add_rewrite_tensor_descriptor_to_pointer", None)
    if rewrite_descriptors is not None:  # tensor descriptors as pointers with masks, as pre-Hopper GPUs get them
        rewrite_descriptors(manager)
    passes.common.add_canonicalizer(manager)
    passes.common.add_cse(manager)
    passes.common.add_symbol_dce(manager)
    manager.run(module, "tritonplug_xla") if _PASS_RUN_TAKES_NAME else manager.run(module)
    return module.str_nodebug()


_PASS_RUN_TAKES_NAME = "str" in (getattr(_ir.pass_manager.run, "__doc__", "") or "")



def make_descriptor(base: Any, shape: tuple[int, ...], strides: tuple[int, ...], block_shape: tuple[int, ...],
                    padding: str, round_f32_to_tf32: bool) -> Any:
    """A host-side tensor descriptor over the pointer tensor ``base``, built as the interpreter builds one
    for a ``triton.tools.tensor_descriptor.TensorDescriptor`` argument (3.6 and 3.9 alike; the TF32
    rounding flag exists from 3.7 on)."""
    interpreter = _interpreter()
    strides_arg: list[Any] = [interpreter._implicit_cvt(int(s)) for s in strides]
    strides_arg[-1] = tl.constexpr(1)
    desc = interpreter.interpreter_semantic.make_tensor_descriptor(
        base=base, shape=[interpreter._implicit_cvt(int(d)) for d in shape], strides=strides_arg,
        block_shape=[tl.constexpr(int(b)) for b in block_shape], padding_option=padding)
    if round_f32_to_tf32:
        if not hasattr(desc.handle, "round_f32_to_tf32"):
            raise NotImplementedError(f"round_f32_to_tf32 needs Triton 3.7+ in the interpreter (installed: "
                                      f"{TRITON_VERSION})")
        desc.handle.round_f32_to_tf32 = True
    return desc


#: Stands for a host-side descriptor's base pointer in :func:`descriptor_arguments`.
DESCRIPTOR_BASE = object()


def descriptor_arguments(shape: tuple[int, ...], strides: tuple[int, ...], padding: str,
                         round_f32_to_tf32: bool) -> list[Any] | None:
    """The kernel arguments a host-side tensor descriptor becomes once Triton's descriptor-to-pointer pass has
    run (:data:`DESCRIPTOR_BASE` for the base pointer), as Triton's own drivers decompose it (3.9: base, shape
    and strides as i64, padding-is-nan and tf32 flags, then shape as i32 and strides as i64 again); None
    where this Triton has no such decomposition."""
    try:
        from triton.backends.driver import decompose_descriptor
    except ImportError:
        return None
    view = types.SimpleNamespace(base=DESCRIPTOR_BASE, shape=list(shape), strides=list(strides), padding=padding,
                                 round_f32_to_tf32=round_f32_to_tf32)
    return list(decompose_descriptor(view))
