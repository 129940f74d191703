"""``triton_call``'s keyword options: one frozen record, checked once, at the call.

The fields of :class:`CallOptions` are the one list of ``triton_call``'s options: the public
signature is generated from them, the memoised fast path keys on them, and the lowering reads them.
Everything else a caller passes by keyword is an operand or a metaparameter of the kernel.
"""

from __future__ import annotations

import dataclasses
import difflib
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonplug.adapters.jaxlib_compat import GPU_TARGETS
from tritonplug.calls import inline_mode
from tritonplug.calls.user_code import call_user
from tritonplug.records import BackendInfo

# triton_call's own arguments that backend_options must not smuggle in under another spelling.
_CALL_ARGUMENTS = {"compute_capability", "grid", "out_shape", "out_type", "kernel", "name",
                   "input_output_aliases", "zeroed_outputs"}
_REQUIRED = object()
#: Options that are Triton's own compile options: Triton's launcher also binds them to a kernel parameter
#: of the same name (the fused-softmax tutorial's ``num_stages: tl.constexpr``).
TRITON_COMPILE_OPTIONS = ("num_warps", "num_stages", "num_ctas", "enable_fp_fusion", "debug")
#: How a call transforms under ``jax.vmap``, in the words of ``jax.ffi.ffi_call(vmap_method=...)`` (docs/vmap.md).
VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all")
#: What an autotuned call without a tuning record compiles: every configuration, timed by jaxlib's runtime at the
#: program's first run (``"runtime"``, Triton's behaviour), or the first that survives pruning (``"first"``).
AUTOTUNE_MODES = ("runtime", "first")


@dataclass(frozen=True)
class CallOptions:
    """``triton_call``'s options, validated and normalised to hashable values.

    ``grid`` is a tuple of three ints or a callable of the metaparameters; ``zeroed_outputs`` a
    sorted tuple of output indices or a callable; mappings become sorted tuples of pairs.
    """

    grid: Any = _REQUIRED
    name: str = ""
    num_warps: int | None = None
    num_stages: int | None = None
    num_ctas: int = 1
    compute_capability: int | None = None
    enable_fp_fusion: bool | None = None  # None: the installed Triton's default (the backend resolves it)
    backend_options: tuple[tuple[str, Any], ...] = ()
    input_output_aliases: tuple[tuple[Any, Any], ...] = ()
    zeroed_outputs: Any = ()
    debug: bool = False
    serialized_metadata: bytes = b""
    cost_estimate: tuple[tuple[str, Any], ...] | None = None
    has_side_effect: bool = False
    custom_call_target_name: str | None = None
    #: One of :data:`VMAP_METHODS`: a loop of launches (``sequential``, the default, or ``sequential_unrolled``), or
    #: one launch over a leading batch dimension (``broadcast_all``, ``expand_dims``: see ``lowering/batching.py``).
    vmap_method: str = "sequential"
    #: One of :data:`AUTOTUNE_MODES`; a tuning record (``tritonplug.tune``) picks its configuration under either.
    autotune: str = "runtime"
    #: ``True``: lower the kernel as its translation to XLA ops on every platform (no custom call: XLA may fuse it
    #: with its neighbours), by the backend that declares ``inlines``; refused at lowering where the translation is
    #: not whole. ``False``: launch it. ``"auto"``: inline where the translation fuses and a tuning record measured
    #: it faster. ``None``: the kernel's default, else ``TRITONPLUG_INLINE`` (``calls/inline_mode.py``); the call
    #: resolves it, so a ``CallSpec``'s options hold one of :data:`inline_mode.MODES`.
    inline: bool | str | None = None

    @classmethod
    def take(cls, kwargs: dict[str, Any], n_outputs: int) -> CallOptions:
        """Remove the options from ``kwargs`` (what stays are operands and metaparameters) and check them."""
        given = {f.name: kwargs.pop(f.name) for f in OPTION_FIELDS if f.name in kwargs}
        if "grid" not in given:
            raise TypeError("triton_call() missing required keyword argument: 'grid'")
        return cls(**given).checked(n_outputs)

    def checked(self, n_outputs: int) -> CallOptions:
        """The same options, each checked and normalised; errors name the option and what was expected."""
        _check_misc(self)
        vmap_method = "sequential" if self.vmap_method is None else self.vmap_method  # None: as jax.ffi.ffi_call
        if not isinstance(vmap_method, str) or vmap_method not in VMAP_METHODS:
            raise ValueError(f"vmap_method must be one of {list(VMAP_METHODS)} (the names of jax.ffi.ffi_call's "
                             f"vmap_method), got {self.vmap_method!r}")
        if not isinstance(self.autotune, str) or self.autotune not in AUTOTUNE_MODES:
            raise ValueError(f"autotune must be one of {list(AUTOTUNE_MODES)} (what an autotuned call without a "
                             f"tuning record compiles), got {self.autotune!r}")
        if self.custom_call_target_name not in (None, *GPU_TARGETS):
            raise ValueError(f"custom_call_target_name must be one of {GPU_TARGETS}, "
                             f"got {self.custom_call_target_name!r}")
        aliases = self.input_output_aliases
        if aliases is not None and not isinstance(aliases, (Mapping, tuple)):
            raise TypeError(f"input_output_aliases must be a dict {{input index: output index}}, got "
                            f"{type(aliases).__name__}: {aliases!r}")
        for index in (i for pair in dict(aliases or {}).items() for i in pair):
            if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
                raise TypeError(f"input_output_aliases: indices must be ints, got {index!r} ({type(index).__name__}) "
                                f"in {dict(aliases or {})!r}")
        grid = self.grid if callable(self.grid) else grid_for(self.grid, {}, allow_empty=True)
        if not callable(grid) and 0 in grid:  # kept as written, for the error that names it (see api)
            grid = tuple(self.grid) if isinstance(self.grid, (tuple, list)) else self.grid
        return dataclasses.replace(
            self,
            grid=grid,
            num_warps=_int_option("num_warps", self.num_warps, minimum=1, power_of_two=True),
            num_stages=_int_option("num_stages", self.num_stages, minimum=0),
            num_ctas=_int_option("num_ctas", self.num_ctas, minimum=1, power_of_two=True) or 1,  # None: Triton's 1
            compute_capability=_capability(self.compute_capability),
            backend_options=_backend_options(self),
            input_output_aliases=tuple(sorted(dict(aliases or {}).items())),
            zeroed_outputs=(self.zeroed_outputs if callable(self.zeroed_outputs)
                            else tuple(sorted(zeroed_for(self.zeroed_outputs, {}, n_outputs)))),
            serialized_metadata=bytes(self.serialized_metadata),
            cost_estimate=tuple(sorted(dict(self.cost_estimate).items())) if self.cost_estimate else None,
            has_side_effect=bool(self.has_side_effect),
            enable_fp_fusion=None if self.enable_fp_fusion is None else bool(self.enable_fp_fusion),
            vmap_method=vmap_method,
            inline=inline_mode.checked(self.inline, "inline"))

    def compiler_options(self) -> dict[str, Any]:
        """What every backend's ``parse_options`` receives: the shared options (``None`` where unset) and
        the entries of ``backend_options``."""
        explicit = {"num_warps": self.num_warps, "num_stages": self.num_stages,
                    "num_ctas": self.num_ctas if self.num_ctas != 1 else None,
                    "enable_fp_fusion": self.enable_fp_fusion,
                    "debug": True if self.debug else None}
        extra = dict(self.backend_options)
        defaults = {"num_ctas": 1, "enable_fp_fusion": None, "debug": False, "num_warps": None, "num_stages": None}
        return {**defaults, **{k: v for k, v in explicit.items() if v is not None}, **extra}

    def target_hints(self, inline: bool = False) -> dict[str, Any]:
        """What target detection receives: the call's hints about the machine to compile for (``inline``: the
        call is lowered as its translation, by the backend that declares ``inlines``)."""
        return {"compute_capability": self.compute_capability, **({"inline": True} if inline else {})}


OPTION_FIELDS = dataclasses.fields(CallOptions)


def grid_for(grid: Any, metaparams: Mapping[str, Any], kernel: Any = "",
             allow_empty: bool = False) -> tuple[int, int, int]:
    """Normalise an int, a tuple of up to three ints, or a callable of the arguments by name, as Triton passes
    them (``metaparams``: the constexprs and, from a call, every other argument; called guarded:
    an error inside it names the callable and ``kernel``, its name or its ``KernelFacts``). An empty grid is an
    error unless ``allow_empty`` (the call's first check: ``api`` runs a call whose outputs need no kernel)."""
    name, runtime = _kernel_names(kernel)
    value = (call_user("grid callable", grid, name, (dict(metaparams),), available=metaparams,
                       expects="with one argument, the dict of metaparameters", unavailable=runtime)
             if callable(grid) else grid)
    kernel = name
    if isinstance(value, list):
        value = tuple(value)
    if not isinstance(value, (tuple, bool)) and getattr(value, "ndim", 0) == 0 and hasattr(type(value), "__index__"):
        value = (value,)
    source = " (returned by the grid callable)" if callable(grid) else ""
    if not isinstance(value, tuple) or not 1 <= len(value) <= 3:
        raise ValueError(f"grid must be an int or a tuple of 1 to 3 ints{source}, got {value!r}")
    dims = []
    for d in value:
        d = _grid_dimension(d, f"{value!r}{source}")
        if d < 0 or d >= 2**31:
            raise ValueError(f"grid dimensions must be between 0 and 2**31-1, got {d} in grid {value!r}{source}")
        dims.append(int(d))
    if 0 in dims and not allow_empty:
        of = f" of kernel {kernel!r}" if kernel else ""
        raise ValueError(f"grid {tuple(dims)}{of}{source} launches no program. Triton launches nothing for an "
                         f"empty grid, but a triton_call's outputs are new buffers, which would be returned "
                         f"uninitialised; skip the call when there is no work (e.g. `if n == 0`), or make every "
                         f"output defined without the kernel (zeroed_outputs, or updated in place)")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def _grid_dimension(d: Any, grid: Any) -> int:
    """An int, or what ``__index__`` makes of a NumPy int or a concrete integer 0-d array (as jaxlib and
    Triton's launcher accept); never a bool, a float or a traced value."""
    if not isinstance(d, (bool, float, np.floating)) and hasattr(type(d), "__index__"):
        try:
            return operator.index(d)
        except Exception:  # a tracer's __index__ raises a concretization error; named below
            pass
    raise TypeError(f"grid dimensions must be ints (or concrete integer scalars), got {d!r} ({type(d).__name__}) "
                    f"in grid {grid}")


def check_grid_limits(grid: tuple[int, int, int], backend: BackendInfo) -> None:
    """Refuse a grid larger than the backend's device launches (``BackendInfo.max_grid``)."""
    limits = backend.max_grid
    if limits is None:
        return
    for axis, size, limit in zip("xyz", grid, limits, strict=True):
        if size > limit:
            raise ValueError(f"grid {grid} is too large for backend {backend.name!r}: it launches at most "
                             f"{limit} program instances along {axis} (limits x, y, z: {limits}), got {size}")


def check_option_names(options: CallOptions, backends: Iterable[BackendInfo]) -> None:
    """Refuse ``backend_options`` that no installed backend accepts, at the call and on every platform alike.

    Only when every backend declares its ``option_names``: one that does not may accept anything.
    """
    backends = list(backends)
    if not options.backend_options or not backends or any(b.option_names is None for b in backends):
        return
    known = set().union(*(b.option_names or () for b in backends))
    unknown = sorted(k for k, _ in options.backend_options if k not in known)
    if unknown:
        installed = ", ".join(sorted(b.name for b in backends))
        close = sorted({m for name in unknown for m in difflib.get_close_matches(name, known, n=2)})
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(f"backend_options: unknown option(s) {unknown}{hint}: no installed backend ({installed}) "
                         f"accepts them; the options they accept are {sorted(known)}")


def zeroed_for(zeroed_outputs: Any, metaparams: Mapping[str, Any], n_outputs: int,
               kernel: Any = "") -> frozenset[int]:
    """The output indices to zero: a sequence of ints, or what a callable of the metaparameters returns."""
    source = " (returned by the zeroed_outputs callable)" if callable(zeroed_outputs) else ""
    name, runtime = _kernel_names(kernel)
    value = (call_user("zeroed_outputs callable", zeroed_outputs, name, (dict(metaparams),), available=metaparams,
                       expects="with one argument, the dict of metaparameters", unavailable=runtime)
             if callable(zeroed_outputs) else zeroed_outputs)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"zeroed_outputs must be a sequence of output indices or a callable of the metaparameters "
                        f"returning one, got {type(value).__name__}: {value!r}{source}")
    indices = []
    for i in value:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"zeroed_outputs: output indices must be ints, got {i!r}{source}")
        if not 0 <= i < n_outputs:
            raise ValueError(f"zeroed_outputs: output index {i} is out of range; out_shape has {n_outputs} "
                             f"outputs{source}")
        indices.append(int(i))
    return frozenset(indices)


def _kernel_names(kernel: Any) -> tuple[str, frozenset[str]]:
    """A kernel's name and its runtime (non-constexpr) parameter names, from its ``KernelFacts`` or its name."""
    if isinstance(kernel, str):
        return kernel, frozenset()
    return kernel.name, frozenset(kernel.param_names - kernel.constexpr_names)


def _check_misc(options: CallOptions) -> None:
    if not isinstance(options.name, str):
        raise TypeError(f"name must be a str (the custom call's name), got {type(options.name).__name__}: "
                        f"{options.name!r}")
    if not isinstance(options.serialized_metadata, (bytes, bytearray, memoryview)):
        raise TypeError(f"serialized_metadata must be bytes, got {type(options.serialized_metadata).__name__}")
    cost_estimate = options.cost_estimate
    if cost_estimate is not None:
        if not isinstance(cost_estimate, Mapping):
            raise TypeError(f"cost_estimate must be a mapping such as {{'flops': 1e9}}, got "
                            f"{type(cost_estimate).__name__}")
        for key, value in cost_estimate.items():
            if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"cost_estimate entries must map str to a number, got {key!r}: {value!r}")
    for flag in ("has_side_effect", "enable_fp_fusion", "debug"):
        if not isinstance(getattr(options, flag), (bool, np.bool_)) and not (
                flag == "enable_fp_fusion" and options.enable_fp_fusion is None):
            raise TypeError(f"{flag} must be a bool, got {type(getattr(options, flag)).__name__}: "
                            f"{getattr(options, flag)!r}")


def _backend_options(options: CallOptions) -> tuple[tuple[str, Any], ...]:
    backend_options: Any = options.backend_options  # as the user passed it: a mapping, before this normalises it
    if isinstance(backend_options, tuple):
        backend_options = dict(backend_options)
    if backend_options is not None and not isinstance(backend_options, Mapping):
        raise TypeError(f"backend_options must be a mapping, got {type(backend_options).__name__}")
    extra = dict(backend_options or {})
    for key, value in extra.items():
        if not isinstance(key, str):
            raise TypeError(f"backend_options keys must be option names (str), got {key!r}")
        if key in _CALL_ARGUMENTS:
            raise ValueError(f"backend_options[{key!r}] is an argument of triton_call: pass {key}=... instead")
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"backend_options[{key!r}] must be hashable, got {type(value).__name__}") from None
    explicit = {"num_warps": options.num_warps, "num_stages": options.num_stages,
                "num_ctas": options.num_ctas if options.num_ctas != 1 else None,
                "enable_fp_fusion": options.enable_fp_fusion,
                "debug": True if options.debug else None}
    conflicts = sorted(k for k, v in explicit.items() if v is not None and k in extra)
    if conflicts:
        raise ValueError(f"backend_options sets {conflicts}, also passed as triton_call arguments: set each once")
    return tuple(sorted(extra.items()))


def _capability(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"compute_capability must be an int such as 90, got {value!r}")
    return int(value)


def _int_option(name: str, value: Any, minimum: int, power_of_two: bool = False) -> int | None:
    """``None`` stays unset; anything else must be an int (NumPy ints become Python ints) in range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")
    value = int(value)
    if value < minimum or (power_of_two and value & (value - 1)):
        kind = "a power of two" if power_of_two else "an int"
        raise ValueError(f"{name} must be {kind} >= {minimum}, got {value}")
    return value


def signature_parameters() -> list[Any]:
    """``triton_call``'s keyword parameters, for its generated ``__signature__``."""
    import inspect

    return [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                              default=inspect.Parameter.empty if f.default is _REQUIRED else f.default)
            for f in OPTION_FIELDS]
