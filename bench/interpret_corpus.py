"""CPU: the XLA path vs Triton's interpreter on the kernel corpus of ``plugins/interpret/tests/xla_corpus_kernels.py``.

    python bench/interpret_corpus.py [--reps 5] [--warmup 1] [--only softmax_rows,flash_attention]
                                     [--out bench/results/interpret-corpus-cpu.json] [--no-interpret]
                                     [--xla-only]

Kernels written as users write them (softmax, layer/RMS norm, dropout, GELU/SiLU, integer ops,
casts, scans, argmax, transpose, split/join/permute, flash attention, grouped matmul, tensor
descriptors, atomics, loops, 3-D grids), each at a moderate size. Per kernel: ``xla`` (a jitted
``tritonplug.triton_call`` on the CPU, ``TRITONPLUG_CPU_PATH=xla``), ``interpret`` (the plugin's
interpreter path, ``TRITONPLUG_CPU_PATH=interpret``) and ``direct`` (Triton's interpreter called as
under ``TRITON_INTERPRET=1``, see ``bench/interpret.py``), on the same data, alternating call by
call. ``speedup`` is direct / xla (goal >= 20). ``compile_s`` is the xla path's time to its first result
(Triton's front end, the translation, JAX's trace and XLA's compile; ``lower_s`` the part before XLA's
compile; run with an empty ``TRITONPLUG_CACHE_DIR`` to compare). ``path`` says whether the XLA path took the kernel
(a fallback to the interpreter is reported, not hidden). Before timing, the xla result is compared
with the direct interpreter's (``max_diff``).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins" / "interpret" / "tests"))
from _util import ROOT, Results, format_table, interleaved_seconds, summarize, write_json  # noqa: E402

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import ml_dtypes  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import xla_attention_kernels as A  # noqa: E402
import xla_corpus_kernels as K  # noqa: E402
from interpret import HostTensor, direct_launch, on_path  # noqa: E402

import tritonplug  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "interpret-corpus-cpu.json"
_TL = {np.dtype(np.float32): tl.float32, np.dtype(np.float16): tl.float16, np.dtype(ml_dtypes.bfloat16): tl.bfloat16,
       np.dtype(np.int8): tl.int8, np.dtype(np.uint8): tl.uint8, np.dtype(np.int32): tl.int32,
       np.dtype(np.uint32): tl.uint32, np.dtype(np.int64): tl.int64}


@dataclass
class Spec:
    """One launch: ``args`` in kernel order (NumPy arrays are operands, anything else a scalar)."""

    kernel: Any
    args: list[Any]
    outs: list[tuple[tuple[int, ...], Any]]
    grid: tuple[int, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    zeroed: tuple[int, ...] = ()
    tolerance: float = 1e-5
    description: str = ""


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _normal(seed: int, shape: tuple[int, ...], dtype: Any = np.float32, scale: float = 1.0) -> np.ndarray:
    return (_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _specs() -> dict[str, Callable[[], Spec]]:
    cdiv = triton.cdiv
    f32 = np.float32
    return {
        "softmax_rows": lambda: Spec(K.softmax_rows_kernel, [_normal(1, (512, 781)), 781, 781, 512, 781],
                                     [((512, 781), f32)], (64,), {"BLOCK": 1024},
                                     description="512x781 fp32, 64 programs looping over rows"),
        "softmax_fp16": lambda: Spec(K.softmax_one_row_kernel, [_normal(2, (256, 1000), np.float16), 1000, 1000],
                                     [((256, 1000), np.float16)], (256,), {"BLOCK": 1024}, tolerance=1e-3,
                                     description="256x1000 fp16, a row per program"),
        "layer_norm": lambda: Spec(K.layer_norm_fwd_kernel, [_normal(3, (128, 1000)), _normal(4, (1000,)),
                                                             _normal(5, (1000,)), 1000, 1000, 1e-5],
                                   [((128, 1000), f32), ((128,), f32), ((128,), f32)], (128,), {"BLOCK": 256},
                                   tolerance=1e-4, description="128x1000, 3 loops of 256-column chunks"),
        "rms_norm": lambda: Spec(K.rms_norm_kernel, [_normal(6, (256, 512)), _normal(7, (512,)), 512, 1e-6],
                                 [((256, 512), f32)], (256,), {"BLOCK": 512}, description="256x512"),
        "dropout": lambda: Spec(K.dropout_kernel, [_normal(8, (1 << 18,)), 1 << 18, 0.25, 42],
                                [((1 << 18,), f32), ((1 << 18,), np.int8)], (256,), {"BLOCK": 1024},
                                description="2^18, tl.rand (Philox)"),
        "activations": lambda: Spec(K.activations_kernel, [_normal(9, (1 << 18,), scale=3), 1 << 18],
                                    [((1 << 18,), f32)] * 3, (256,), {"BLOCK": 1024, "LIBDEVICE": False},
                                    description="2^18, GELU (erf, tanh) and SiLU (tl.math: the interpreter "
                                                "has no libdevice)"),
        "int_ops": lambda: Spec(K.int_ops_kernel, [_rng(10).integers(-10**9, 10**9, 1 << 16).astype(np.int32),
                                                   _rng(11).integers(1, 100, 1 << 16).astype(np.int32),
                                                   _rng(12).integers(0, 1 << 32, 1 << 16, np.uint64).astype(np.uint32),
                                                   1 << 16], [((6 << 16,), np.int32)], (64,), {"BLOCK": 1024},
                                tolerance=0, description="2^16, div/rem/shifts/unsigned/umulhi"),
        "casts": lambda: Spec(K.casts_kernel, [_normal(13, (1 << 16,), scale=4), 1 << 16],
                              [((1 << 16,), np.float16), ((1 << 16,), ml_dtypes.bfloat16), ((1 << 16,), np.uint8),
                               ((1 << 16,), np.uint8), ((1 << 16,), f32), ((1 << 16,), np.int32)], (64,),
                              {"BLOCK": 1024}, tolerance=None,
                              description="2^16, fp16/bf16/fp8 round trips (max_diff not checked: the "
                                          "interpreter's fp8 rounding drops carries, see test_xla_corpus)"),
        "scans": lambda: Spec(K.scans_kernel, [_normal(14, (256, 200)),
                                               _rng(15).uniform(0.5, 1, (256, 200)).astype(f32), 200],
                              [((256, 200), f32)] * 3, (256,), {"BLOCK": 256}, tolerance=1e-4,
                              description="256x200, cumsum + custom-combine scans"),
        "argmax": lambda: Spec(K.argmax_kernel, [_normal(16, (1024, 200)), 1024, 200],
                               [((1024,), f32), ((1024,), np.int32), ((1024,), np.int32)], (cdiv(1024, 16),),
                               {"BLOCK_R": 16, "BLOCK_C": 256}, tolerance=0, description="1024x200"),
        "transpose": lambda: Spec(K.transpose_kernel, [_normal(17, (512, 384)), 512, 384], [((384, 512), f32)],
                                  (16, 12), {"BM": 32, "BN": 32}, tolerance=0, description="512x384, 32x32 tiles"),
        "complex_mul": lambda: Spec(K.complex_mul_kernel, [_normal(18, (1 << 16, 2)), _normal(19, (1 << 16, 2)),
                                                           1 << 16], [((1 << 16, 2), f32)] * 2, (64,),
                                    {"BLOCK": 1024}, description="2^16 pairs: split/join/permute"),
        "flash_attention": lambda: Spec(K.flash_attention_fwd_kernel, [_normal(20, (8, 256, 64)),
                                                                       _normal(21, (8, 256, 64)),
                                                                       _normal(22, (8, 256, 64)), 256, 0.125],
                                        [((8, 256, 64), f32)], (4, 8),
                                        {"HEAD": 64, "BM": 64, "BN": 32, "CAUSAL": True}, tolerance=1e-4,
                                        description="8 heads x 256 x 64, causal, K/V blocks of 32"),
        "attention_bwd": _attention_bwd,
        "grouped_matmul": lambda: Spec(K.grouped_matmul_kernel, [_normal(23, (256, 256), np.float16),
                                                                 _normal(24, (256, 256), np.float16),
                                                                 256, 256, 256, 256, 1, 256, 1, 256, 1],
                                       [((256, 256), np.float16)], (64,),
                                       {"BM": 32, "BN": 32, "BK": 32, "GROUP_M": 4, "ACTIVATION": "leaky_relu"},
                                       tolerance=0.05, description="fp16 256^3, 32^3 tiles"),
        "descriptor_tiles": lambda: Spec(K.descriptor_tiles_kernel, [_normal(25, (256, 256)), 256, 256],
                                         [((256, 256), f32)], (8, 8), {"BM": 32, "BN": 32}, tolerance=1e-6,
                                         description="256x256, tensor descriptors"),
        "histogram": lambda: Spec(K.histogram_kernel, [_normal(26, (1 << 18,), scale=2), 1 << 18, 64, -4.0, 0.125],
                                  [((64,), np.int32), ((64,), f32)], (256,), {"BLOCK": 1024}, zeroed=(0, 1),
                                  tolerance=None, description="2^18 values, 64 bins: atomic_add/atomic_max"),
        "column_sum": lambda: Spec(K.column_sum_atomic_kernel, [_normal(27, (1024, 512)), 1024, 512],
                                   [((512,), f32)], (16, 4), {"ROWS": 64, "BLOCK": 128}, zeroed=(0,),
                                   tolerance=None, description="1024x512, atomic_add of partial sums"),
        "poly_collatz": lambda: Spec(K.poly_collatz_kernel, [_normal(28, (1 << 16,)),
                                                             _rng(29).integers(1, 1000, 64).astype(np.int32),
                                                             1 << 16], [((1 << 16,), f32), ((64,), np.int32)],
                                     (64,), {"BLOCK": 1024, "C0": 1.0, "C1": -2.0, "C2": 0.5, "C3": 0.25},
                                     description="2^16 static_range Horner + per-program while"),
        "grid3d": lambda: Spec(K.grid3d_kernel, [_normal(30, (8, 64, 256)), 64 * 256, 256, 64, 256],
                               [((8, 64, 256), f32), ((8 * 64 * 2,), np.int32)], (2, 64, 8), {"BLOCK": 128},
                               tolerance=0, description="8x64x256, 3-D grid of 1024 programs"),
        "strided_rows": lambda: Spec(K.strided_rows_kernel, [_normal(31, (1024, 128)), 1024, 128],
                                     [((64, 128), f32)], (64,), {"ROWS_PER_PROGRAM": 16, "BLOCK": 128},
                                     tolerance=0, description="1024x128, 16 rows per program"),
    }


def _attention_bwd() -> Spec:
    """Causal attention backward (``plugins/interpret/tests/xla_attention_kernels.py``): 4 heads x 512 x 64 fp16,
    blocks of 128."""
    heads, n, d, scale = 4, 512, 64, 0.125
    q, k, v, do = (_normal(40 + i, (heads, n, d), np.float16) for i in range(4))
    k2 = (k.astype(np.float32) * (scale / np.log(2))).astype(np.float16)    # base-2 logits, as the kernel takes them
    s = np.einsum("hmd,hnd->hmn", q.astype(np.float32), k2.astype(np.float32))
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    lse = (s.max(-1) + np.log2(np.exp2(s - s.max(-1, keepdims=True)).sum(-1))).astype(np.float32)
    o = np.einsum("hmn,hnd->hmd", np.exp2(s - lse[..., None]), v.astype(np.float32))
    delta = (o * do.astype(np.float32)).sum(-1).astype(np.float32)
    return Spec(A.attention_bwd_kernel, [q, k2, v, do, lse, delta, n, scale], [((heads, n, d), np.float16)] * 3,
                (n // 128, heads), {"HEAD": d, "BLOCK": 128, "SLICE": 8}, tolerance=0.05,
                description="4 heads x 512 x 64 fp16, causal, dK/dV and dQ passes, blocks of 128, diagonal in 8 "
                            "steps (as Triton's tutorial)")


# ------------------------------------------------------------------ the three ways to run a spec


def _program(spec: Spec) -> Callable[..., Any]:
    """The jitted function: the spec's arrays are its parameters, scalars and metaparameters are baked in."""
    def program(*operands: Any) -> Any:
        it = iter(operands)
        args = [next(it) if isinstance(a, np.ndarray) else a for a in spec.args]
        outs = [jax.ShapeDtypeStruct(s, d) for s, d in spec.outs]
        return tritonplug.triton_call(*args, kernel=spec.kernel, out_type=outs, grid=spec.grid,
                                      zeroed_outputs=spec.zeroed, **spec.meta)

    return program


def _operands(spec: Spec) -> list[Any]:
    return [jax.numpy.asarray(a) for a in spec.args if isinstance(a, np.ndarray)]


def path_call(spec: Spec, path: str) -> Callable[[], Any]:
    compiled, operands = on_path(path, _program(spec)), _operands(spec)
    return lambda: compiled(*operands)


def direct_call(spec: Spec) -> tuple[Callable[[], None], list[np.ndarray]]:
    outs = [np.zeros(s, d) for s, d in spec.outs]
    # copies: Triton's interpreter writes every argument back after a run, and a CPU jax array made from a NumPy
    # array may share its memory
    host = [HostTensor(a.copy(), _TL[a.dtype]) if isinstance(a, np.ndarray) else a for a in spec.args]
    host += [HostTensor(o, _TL[o.dtype]) for o in outs]
    launch = direct_launch(spec.kernel, spec.grid)

    def run() -> None:
        launch(*host, **spec.meta)

    return run, outs


def xla_path_taken(spec: Spec) -> str:
    """"xla", or why the kernel fell back: the lowering's host call and the plugin's log line."""
    lines: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler, logger = Catch(logging.WARNING), logging.getLogger("tritonplug.interpret")
    logger.addHandler(handler)
    saved = os.environ.get("TRITONPLUG_CPU_PATH")
    os.environ["TRITONPLUG_CPU_PATH"] = "xla"
    try:
        text = jax.jit(_program(spec)).lower(*_operands(spec)).as_text()
    finally:
        logger.removeHandler(handler)
        if saved is None:
            del os.environ["TRITONPLUG_CPU_PATH"]
        else:
            os.environ["TRITONPLUG_CPU_PATH"] = saved
    fallback = [m for m in lines if "runs in Triton's interpreter" in m]
    if fallback or "tritonplug_host_kernel" in text:
        return "interpreter: " + (fallback[0] if fallback else "host call in the lowering")
    return "xla"


def max_diff(ours: Any, direct: list[np.ndarray]) -> float:
    ours = ours if isinstance(ours, list | tuple) else [ours]
    worst = 0.0
    for got, want in zip(ours, direct, strict=True):
        got, want = np.asarray(got).astype(np.float64), want.astype(np.float64)
        both = np.isfinite(got) & np.isfinite(want)
        if not np.array_equal(np.isfinite(got), np.isfinite(want)):
            return float("inf")
        worst = max(worst, float(np.max(np.abs(got[both] - want[both]), initial=0.0)))
    return worst


# ------------------------------------------------------------------ run


def run_one(name: str, spec: Spec, results: Results, reps: int, warmup: int, interpret: bool,
            direct_timed: bool = True) -> None:
    start = time.perf_counter()
    path = xla_path_taken(spec)     # the first lowering: Triton's front end, the translation, JAX's trace
    lowered = time.perf_counter()
    calls = {"xla": path_call(spec, "xla")}
    ours = calls["xla"]()           # lowered again (the kernel cached) and compiled by XLA
    _sync(ours)
    compile_s = {"lower_s": lowered - start, "compile_s": time.perf_counter() - start}
    direct, direct_outs = direct_call(spec)
    direct()
    diff = max_diff(ours, direct_outs)
    if spec.tolerance is not None and diff > spec.tolerance:
        raise AssertionError(f"{name}: the xla result differs from Triton's interpreter by {diff}")
    if interpret:
        calls["interpret"] = path_call(spec, "interpret")
    if direct_timed:
        calls["direct"] = direct
    samples = interleaved_seconds(calls, reps, warmup, _sync)
    for impl, s in samples.items():
        results.add(name, impl, **summarize(s), median_ms=statistics.median(s) * 1e3,
                    description=spec.description, path=path if impl == "xla" else None,
                    max_diff=diff if impl == "xla" else None, **(compile_s if impl == "xla" else {}))


def _sync(out: Any) -> None:
    for leaf in jax.tree_util.tree_leaves(out):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="timed calls per implementation (median taken)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    specs = _specs()
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(specs)}")
    parser.add_argument("--no-interpret", action="store_true", help="skip the plugin's interpreter path")
    parser.add_argument("--xla-only", action="store_true",
                        help="time the xla path alone (Triton's interpreter still runs once, for max_diff): for "
                             "comparing two versions of the translation on a busy machine")
    args = parser.parse_args(argv)
    jax.config.update("jax_platforms", "cpu")
    names = [n for n in args.only.split(",") if n] or list(specs)
    results = Results()
    for name in names:
        with results.guard(name, "setup"):
            run_one(name, specs[name](), results, args.reps, args.warmup, not (args.no_interpret or args.xla_only),
                    not args.xla_only)
            print(f"{name}: done", file=sys.stderr)
    for record in results.records:
        direct = results.find(record["bench"], "direct")
        if record.get("median_us") and direct:
            record["speedup"] = direct["median_us"] / record["median_us"]
    print(format_table(results.records, ["bench", "impl", "median_ms", "speedup", "compile_s", "path", "max_diff",
                                         "samples"]))
    slow = [r["bench"] for r in results.records if r["impl"] == "xla" and r.get("speedup", 0) < 20]
    print(f"xla below 20x Triton's interpreter: {', '.join(slow) or 'none'}")
    path = write_json(args.out, results.records, reps=args.reps, warmup=args.warmup,
                      goal="xla: speedup (direct/xla) >= 20 on every kernel", below_goal=slow)
    print(f"wrote {path}")
    return 0 if all("error" not in r for r in results.records) else 1


if __name__ == "__main__":
    sys.exit(main())
