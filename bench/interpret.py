"""CPU: tritonplug's two CPU paths vs Triton's own interpreter vs jnp, same kernels and data.

    python bench/interpret.py [--reps 7] [--warmup 2] [--out bench/results/interpret-cpu.json]
                              [--only add-2^18,softmax-256x1024] [--profile add-2^20]

``xla``: a jitted function around ``tritonplug.triton_call`` on the CPU platform with the
kernel's TTIR translated to JAX operations and compiled by XLA (``TRITONPLUG_CPU_PATH=xla``,
the default). ``interpret``: the same call lowered with ``TRITONPLUG_CPU_PATH=interpret`` (the
plugin runs Triton's interpreter in an XLA FFI call). ``direct``: Triton's interpreter called as
Triton runs it under ``TRITON_INTERPRET=1`` — ``InterpretedFunction(kernel.fn)[grid](...)`` — on
torch-free stand-ins for CPU tensors that, like torch CPU tensors, are never copied. ``jnp``: the
same computation written in jax.numpy, jitted. All run on the same NumPy data, alternating call by
call. ``speedup`` is direct / impl (goal for xla: >= 20), ``vs_jnp`` is impl / jnp (goal for xla:
<= 3). ``compile_s``: the xla path's first call (Triton's front end, the translation, XLA's compile; run with
an empty ``TRITONPLUG_CACHE_DIR`` to compare). ``--profile NAME`` prints a cProfile of the xla path of one case instead.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import ROOT, Results, format_table, interleaved_seconds, load_example, summarize, write_json  # noqa: E402

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before jax is imported: no GPU plugin probing here

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

import tritonplug  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "interpret-cpu.json"
_TL_TYPES = {"float32": tl.float32, "float16": tl.float16, "int32": tl.int32}


# ------------------------------------------------------------------ torch-free CPU tensors


class _Storage:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def data_ptr(self) -> int:
        return self.array.__array_interface__["data"][0]

    def cpu(self) -> _Storage:
        return self

    def copy_(self, other: _Storage) -> None:
        if other.data_ptr() != self.data_ptr():
            np.copyto(self.array, other.array)


class HostTensor:
    """The part of a torch CPU tensor that Triton's ``GridExecutor`` uses (no copies)."""

    def __init__(self, array: np.ndarray | None, dtype: Any) -> None:
        self.array, self.dtype = array, dtype

    @classmethod
    def of(cls, array: np.ndarray) -> HostTensor:
        return cls(array, _TL_TYPES[array.dtype.name])

    def data_ptr(self) -> int:
        return self.array.__array_interface__["data"][0]

    def untyped_storage(self) -> _Storage:
        return _Storage(self.array)

    def new_empty(self, *_: Any, **__: Any) -> HostTensor:
        return HostTensor(None, self.dtype)

    def set_(self, storage: _Storage, *_: Any) -> HostTensor:
        self.array = storage.array
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return self.array.shape

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.array.itemsize for s in self.array.strides)


# ------------------------------------------------------------------ Triton's interpreter, as under TRITON_INTERPRET=1

_INTERPRETED: dict[int, tuple[JITFunction, InterpretedFunction]] = {}  # by id: hashing a JITFunction parses it


def _call_as_interpreted(self: JITFunction, *args: Any, **kwargs: Any) -> Any:
    """A nested ``@triton.jit`` call (``tl.max``, ``tl.cdiv`` …) as TRITON_INTERPRET=1 makes it:
    Triton's ``InterpretedFunction.__call__`` of that function."""
    hit = _INTERPRETED.get(id(self))
    if hit is None or hit[0] is not self:
        hit = _INTERPRETED[id(self)] = (self, InterpretedFunction(self.fn))
    return hit[1](*args, **kwargs)


@contextlib.contextmanager
def _nested_calls_interpreted() -> Iterator[None]:
    """With TRITON_INTERPRET=1 set before import, ``triton.jit`` makes every function (the
    kernel's helpers and ``triton.language.standard``'s) an ``InterpretedFunction``; here triton
    is imported normally, so during a direct run ``JITFunction.__call__`` is pointed at one."""
    saved = JITFunction.__dict__.get("__call__")
    JITFunction.__call__ = _call_as_interpreted
    try:
        yield
    finally:
        if saved is None:
            del JITFunction.__call__
        else:
            JITFunction.__call__ = saved


def direct_launch(kernel: Any, grid: tuple[int, ...]) -> Callable[..., None]:
    """``InterpretedFunction(kernel.fn)[grid]`` with nested jit calls interpreted."""
    launcher = InterpretedFunction(kernel.fn)[grid]

    def launch(*args: Any, **kwargs: Any) -> None:
        with _language_restored(), _nested_calls_interpreted():
            launcher(*args, **kwargs)

    return launch


@contextlib.contextmanager
def _language_restored() -> Iterator[None]:
    """Triton's interpreter patches ``triton.language`` for a nested ``@triton.jit`` call and never undoes
    it (under TRITON_INTERPRET=1 nothing else needs the real one); here the next kernel's front end does."""
    owners = [tl, tl.core, tl.math, tl.tensor, tl.dtype, tl.condition, tl.core.tensor_descriptor_base]
    saved = [dict(vars(o)) for o in owners]
    try:
        yield
    finally:
        for owner, before in zip(owners, saved, strict=True):
            for name in [n for n in vars(owner) if n not in before]:
                delattr(owner, name)
            for name, value in before.items():
                if vars(owner).get(name, _MISSING) is not value:
                    setattr(owner, name, value)


_MISSING = object()


# ------------------------------------------------------------------ cases


@dataclass
class Case:
    name: str
    description: str
    ours: Callable[[], Any]      # returns a jax array (synchronised by the timer)
    interpret: Callable[[], Any]  # the same call lowered for the interpreter path
    jnp: Callable[[], Any]       # the computation in jax.numpy
    direct: Callable[[], Any]    # fills `direct_out` in place
    direct_out: np.ndarray
    reference: np.ndarray
    tolerance: float


def _sync(out: Any) -> None:
    if out is not None and hasattr(out, "block_until_ready"):
        out.block_until_ready()


def on_path(path: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``jax.jit(fn)`` lowered (on its first call) with ``TRITONPLUG_CPU_PATH=path``."""
    jitted = jax.jit(lambda *args: fn(*args))  # a function of its own: jit caches per function
    lowered: list[Any] = []

    def call(*args: Any) -> Any:
        if not lowered:
            saved = os.environ.get("TRITONPLUG_CPU_PATH")
            os.environ["TRITONPLUG_CPU_PATH"] = path
            try:
                lowered.append(jitted.lower(*args).compile())
            finally:
                if saved is None:
                    del os.environ["TRITONPLUG_CPU_PATH"]
                else:
                    os.environ["TRITONPLUG_CPU_PATH"] = saved
        return lowered[0](*args)

    return call


def add_case(n: int, block: int = 1024) -> Case:
    ex = load_example("add")
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    xla, interp = (on_path(p, lambda a, b: ex.add(a, b, block)) for p in ("xla", "interpret"))
    plain = jax.jit(lambda a, b: a + b)
    out = np.empty_like(x)
    grid = (tritonplug.cdiv(n, block), )
    kernel = direct_launch(ex.add_kernel, grid)
    hx, hy, hout = HostTensor.of(x), HostTensor.of(y), HostTensor.of(out)
    log2 = n.bit_length() - 1
    label = f"2^{log2}" if n == 1 << log2 else str(n)
    return Case(f"add-{label}", f"add fp32 n={label} BLOCK={block} ({grid[0]} programs)",
                lambda: xla(jx, jy), lambda: interp(jx, jy), lambda: plain(jx, jy),
                lambda: kernel(hx, hy, n, hout, BLOCK=block), out, x + y, 0.0)


def softmax_case(rows: int = 256, cols: int = 1024) -> Case:
    ex = load_example("softmax")
    x = np.random.default_rng(1).standard_normal((rows, cols), dtype=np.float32)
    jx = jnp.asarray(x)
    xla, interp = (on_path(p, ex.softmax) for p in ("xla", "interpret"))
    plain = jax.jit(lambda v: jax.nn.softmax(v, axis=-1))
    block = 1 << (cols - 1).bit_length()
    out = np.empty_like(x)
    kernel = direct_launch(ex.softmax_kernel, (rows, ))
    hx, hout = HostTensor.of(x), HostTensor.of(out)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return Case(f"softmax-{rows}x{cols}", f"softmax fp32 {rows} rows x {cols} cols BLOCK={block} ({rows} programs)",
                lambda: xla(jx), lambda: interp(jx), lambda: plain(jx),
                lambda: kernel(hx, cols, cols, hout, BLOCK=block), out,
                e / e.sum(axis=1, keepdims=True), 1e-5)


def matmul_case(m: int = 128, n: int = 128, k: int = 128, block: int = 32) -> Case:
    ex = load_example("matmul")
    jit_fn = ex.matmul_kernel.fn  # the @triton.jit function under the example's autotuner
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    meta = {"BLOCK_M": block, "BLOCK_N": block, "BLOCK_K": block, "GROUP_M": 8}
    programs = tritonplug.cdiv(m, block) * tritonplug.cdiv(n, block)

    def call(a: jax.Array, b: jax.Array) -> jax.Array:
        return tritonplug.triton_call(a, b, m, n, k, k, 1, n, 1, n, 1, kernel=jit_fn,
                                      out_shape=jax.ShapeDtypeStruct((m, n), a.dtype), grid=(programs, ), **meta)

    xla, interp = (on_path(p, call) for p in ("xla", "interpret"))
    plain = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
    out = np.empty((m, n), np.float32)
    kernel = direct_launch(jit_fn, (programs, ))
    ha, hb, hc = HostTensor.of(a), HostTensor.of(b), HostTensor.of(out)
    return Case(f"matmul-{m}x{n}x{k}", f"matmul fp32 {m}x{n}x{k} blocks {block}^3 ({programs} programs)",
                lambda: xla(ja, jb), lambda: interp(ja, jb), lambda: plain(ja, jb),
                lambda: kernel(ha, hb, m, n, k, k, 1, n, 1, n, 1, hc, **meta),
                out, a @ b, 1e-3)


CASES: dict[str, Callable[[], Case]] = {
    "add-2^18": lambda: add_case(1 << 18),
    "add-2^20": lambda: add_case(1 << 20),
    "softmax-256x1024": softmax_case,
    "matmul-128x128x128": matmul_case,
    "matmul-256x256x256": lambda: matmul_case(256, 256, 256),
}


# ------------------------------------------------------------------ run


def _check(case: Case) -> float:
    """Compare every implementation with NumPy; returns the xla path's time to its first result (its compile)."""
    start = time.perf_counter()
    ours = np.asarray(case.ours())
    compile_s = time.perf_counter() - start
    interp = np.asarray(case.interpret())
    case.direct()
    for label, got in (("xla", ours), ("interpret", interp), ("direct", case.direct_out)):
        np.testing.assert_allclose(got, case.reference, rtol=case.tolerance, atol=case.tolerance,
                                   err_msg=f"{case.name}: {label} result differs from NumPy")
    return compile_s


def _add_ratios(results: Results) -> None:
    for record in results.records:
        direct = results.find(record["bench"], "direct")
        plain = results.find(record["bench"], "jnp")
        if not record.get("median_us"):
            continue
        if direct and direct.get("median_us"):
            record["speedup"] = direct["median_us"] / record["median_us"]
        if plain and plain.get("median_us"):
            record["vs_jnp"] = record["median_us"] / plain["median_us"]


def profile(case: Case, calls: int, top: int) -> str:
    case.ours().block_until_ready()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        case.ours().block_until_ready()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats("tottime")
    stats.print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return text.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7, help="timed calls per implementation (median taken)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--pair-reps", type=int, default=50,
                        help="calls of xla and jnp alone, alternating, for the paired ratio (vs_jnp_paired)")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(CASES)}")
    parser.add_argument("--profile", default="", help="cProfile the tritonplug path of this case and exit")
    parser.add_argument("--profile-calls", type=int, default=5)
    args = parser.parse_args(argv)

    platform = jax.devices()[0].platform
    if platform != "cpu":
        print(f"note: default JAX platform is {platform!r}; tritonplug runs on the CPU platform here", file=sys.stderr)
        jax.config.update("jax_platforms", "cpu")
    if args.profile:
        print(profile(CASES[args.profile](), args.profile_calls, 30))
        return 0

    names = [n for n in args.only.split(",") if n] or list(CASES)
    results = Results()
    for name in names:
        with results.guard(name, "setup"):
            case = CASES[name]()
            compile_s = _check(case)
            samples = interleaved_seconds({"xla": case.ours, "interpret": case.interpret, "direct": case.direct,
                                           "jnp": case.jnp}, args.reps, args.warmup, _sync)
            for impl, s in samples.items():
                results.add(name, impl, **summarize(s), median_ms=statistics.median(s) * 1e3,
                            description=case.description)
            # The two fast paths again, alternating call by call, many times: sub-millisecond calls timed between
            # the interpreters' second-long ones see cold caches, and five samples of them scatter.
            pair = interleaved_seconds({"xla": case.ours, "jnp": case.jnp}, args.pair_reps, args.warmup, _sync)
            ratios = [x / j for x, j in zip(pair["xla"], pair["jnp"], strict=True)]
            for impl in ("xla", "jnp"):
                results.find(name, impl).update(paired_median_ms=statistics.median(pair[impl]) * 1e3,
                                                paired_samples=args.pair_reps)
            results.find(name, "xla").update(vs_jnp_paired=statistics.median(ratios), compile_s=compile_s)
            print(f"{name}: done", file=sys.stderr)
    _add_ratios(results)
    print(format_table(results.records, ["bench", "impl", "median_ms", "speedup", "vs_jnp", "paired_median_ms",
                                         "vs_jnp_paired", "compile_s", "min_us", "max_us", "samples"]))
    path = write_json(args.out, results.records, reps=args.reps, warmup=args.warmup, pair_reps=args.pair_reps,
                      goal="xla: speedup (direct/xla) >= 20 and vs_jnp (xla/jnp) <= 3",
                      vs_jnp_paired="median over pair_reps alternating calls of (xla time / jnp time)")
    print(f"wrote {path}")
    return 0 if all("error" not in r for r in results.records) else 1


if __name__ == "__main__":
    sys.exit(main())
