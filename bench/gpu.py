"""GPU benchmarks (H200, sm_90): tritonplug vs Triton on torch, jax_triton and XLA, in one run.

    python bench/gpu.py --out $OUT/h200.json                   # everything
    python bench/gpu.py --only add,matmul --out $OUT/a.json    # some groups (see --help)
    python bench/gpu.py --smoke --out /tmp/gpu-smoke.json      # tiny sizes on CPU: checks the script

Implementations per benchmark (``impl``): ``tritonplug`` (a jitted ``tritonplug.triton_call``),
``triton_native`` (the same kernel and configuration launched by Triton on torch tensors),
``jax_triton`` (only when ``import jax_triton`` works, else a ``skipped`` record) and, where one
exists, ``xla`` (``a + b``, ``jnp.dot``, ``jax.nn.softmax``, ``jax.nn.dot_product_attention``).

Timing of device work: a batch of back-to-back asynchronous calls, synchronised once
(``jax.block_until_ready`` / ``torch.cuda.synchronize``), divided by the number of calls; the
median over ``--reps`` batches is ``median_us``. Every impl is timed this same way, so
launch cost hides behind device time exactly as it would in a real program; Triton's own
``do_bench`` (CUDA events, L2 flushed) is recorded beside it for ``triton_native``. Inputs
are fresh random data, and where one set of inputs is smaller than 256 MiB several sets are
rotated so the 50-60 MB L2 never holds them. Compile and first-call measurements run in
fresh subprocesses (``--child``). Each benchmark is guarded: a failure becomes a record with
``error`` and the run goes on; the JSON file is rewritten after every group, so a run cut
short still leaves what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU with JAX

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_hopper  # noqa: E402
from _util import (  # noqa: E402
    ROOT,
    Results,
    batched_seconds,
    check,
    format_table,
    load_example,
    sample_seconds,
    summarize,
    to_numpy,
    write_json,
)

SCRIPT = Path(__file__).resolve()
DEFAULT_OUT = ROOT / "bench" / "results" / "h200.json"
GROUPS = ("copy", "add", "matmul", "softmax", "fused_attention", "launch_overhead", "eager_dispatch", "compile",
          "module_image", "tma_matmul", "layer_norm")
RESULT_MARK = "@@TRITONPLUG_BENCH_RESULT@@"
ROTATE_BYTES = 256 << 20      # rotate input sets until they add up to this (well above L2)
INFLIGHT_BYTES = 8 << 30      # bound on outputs of queued-but-unfinished JAX calls
MIB = 1 << 20


def hopper_matmul_configs() -> list:
    """Realistic sm_90 configurations (after Triton's tutorial 03), for the example's kernel."""
    import triton

    def c(m: int, n: int, k: int, stages: int, warps: int) -> Any:
        return triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_stages=stages,
                             num_warps=warps)

    return [c(128, 256, 64, 3, 8), c(256, 128, 64, 3, 8), c(128, 128, 64, 4, 4), c(128, 128, 64, 4, 8),
            c(128, 256, 64, 4, 8), c(256, 128, 64, 4, 8), c(64, 256, 64, 4, 4), c(128, 128, 32, 4, 4)]


def autotuned_matmul(n_configs: int | None = None) -> Any:
    """A fresh ``triton.autotune`` over the example's matmul ``@triton.jit`` function.

    Each implementation gets its own wrapper: Triton's autotuner keeps state (cache, best
    config) and jax_triton rewrites ``early_config_prune`` on the object it is given.
    """
    import triton

    configs = hopper_matmul_configs()[:n_configs]
    return triton.autotune(configs=configs, key=["M", "N", "K"])(load_example("matmul").matmul_kernel.fn)


def matmul_call(triton_call: Callable, kernel: Any, m: int, n: int, k: int, dtype: Any, **options: Any) -> Callable:
    """[m, k] @ [k, n] with the example's matmul kernel, called through ``triton_call`` (tritonplug's or
    jax-triton's, which take the same arguments)."""
    import jax

    from tritonplug.utils import cdiv

    def grid(meta: dict) -> tuple[int]:
        return (cdiv(m, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"]), )

    def mm(a: Any, b: Any) -> Any:
        return triton_call(a, b, m, n, k, k, 1, n, 1, n, 1, kernel=kernel, grid=grid,
                           out_shape=jax.ShapeDtypeStruct((m, n), dtype), **options)

    return mm


# ------------------------------------------------------------------ run context


class Run:
    """Settings and optional components of one run."""

    def __init__(self, args: argparse.Namespace) -> None:
        import jax

        self.args = args
        self.smoke = args.smoke
        self.results = Results()
        self.platform = jax.devices()[0].platform
        self.on_gpu = self.platform in ("cuda", "rocm", "gpu")  # Device.platform may say "gpu" for CUDA
        if not self.smoke and not self.on_gpu:
            raise SystemExit(f"no GPU visible to JAX (platform {self.platform!r}); use --smoke on a CPU machine")
        self.reps = args.reps or (3 if self.smoke else 10)
        self.batch_seconds = 0.002 if self.smoke else 0.05
        self.torch, self.torch_reason = self._import_torch()
        self.jt, self.jt_reason = import_jax_triton()
        self.jt_lowers = self.jt is not None  # lowering for sm_90 works without a GPU (compile group)
        if self.jt is not None and not self.on_gpu:
            self.jt, self.jt_reason = None, "jax_triton lowers only for GPUs (no CPU platform)"
        self.copy_gbps: float | None = None

    def _import_torch(self) -> tuple[Any, str]:
        if not self.on_gpu:
            return None, "no GPU (smoke run on CPU): Triton launches need a GPU"
        try:
            import torch
        except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
            return None, f"import torch failed: {type(exc).__name__}: {exc}"
        if not torch.cuda.is_available():
            return None, "torch.cuda.is_available() is False"
        return torch, ""

    def write(self) -> None:
        write_json(self.args.out, self.results.records, smoke=self.smoke, reps=self.reps,
                   batch_seconds=self.batch_seconds, groups=self.groups)

    @property
    def groups(self) -> list[str]:
        return [g for g in self.args.only.split(",") if g] or list(GROUPS)

    # -------------------------------------------------------------- timing

    def calls_for(self, one_call_s: float, out_bytes: int) -> int:
        calls = max(3, math.ceil(self.batch_seconds / max(one_call_s, 1e-7)))
        calls = min(calls, 3 if self.smoke else 400, max(2, INFLIGHT_BYTES // max(out_bytes, 1)))
        return calls

    def time_jax(self, fn: Callable, sets: Sequence[tuple], out_bytes: int) -> dict[str, Any]:
        """Device time per call. Short kernels run ``per_program`` times (on distinct input buffers,
        so XLA cannot merge the calls) inside one jitted program, so that one dispatch from Python
        covers many kernels and the host's dispatch cost does not hide the kernel's time."""
        import jax
        import jax.numpy as jnp

        one = min(sample_seconds(lambda: fn(*sets[0]), 3, warmup=1, sync=jax.block_until_ready))
        per_program = 1 if self.smoke or one > DISPATCH_BOUND_S else min(32, math.ceil(DISPATCH_BOUND_S / one))
        set_bytes = sum(a.nbytes for a in sets[0])
        per_program = max(1, min(per_program, PROGRAM_BYTES // max(set_bytes + out_bytes, 1)))
        group = [sets[i] if i < len(sets) else tuple(jnp.array(a, copy=True) for a in sets[i % len(sets)])
                 for i in range(max(per_program, 1))][:per_program]
        if per_program == 1:
            def call(i: int) -> Any:
                return fn(*sets[i % len(sets)])
        else:
            many = jax.jit(lambda group: [fn(*inputs) for inputs in group])

            def call(i: int) -> Any:
                return many(group)
        calls = self.calls_for(one * per_program, out_bytes * per_program)
        samples = batched_seconds(call, calls, self.reps, warmup_calls=max(1, len(sets) // per_program),
                                  sync=jax.block_until_ready)
        samples = [s / per_program for s in samples]
        return {**summarize(samples), "calls_per_sample": calls * per_program, "calls_per_program": per_program,
                "input_sets": len(sets), "one_call_us": one * 1e6}

    def time_torch(self, launch: Callable[[int], Any], n_sets: int) -> dict[str, Any]:
        torch = self.torch

        def sync(_: Any) -> None:
            torch.cuda.synchronize()

        one = min(sample_seconds(lambda: launch(0), 3, warmup=1, sync=sync))
        calls = self.calls_for(one, 0)
        samples = batched_seconds(launch, calls, self.reps, warmup_calls=n_sets, sync=sync)
        record = {**summarize(samples), "calls_per_sample": calls, "input_sets": n_sets, "one_call_us": one * 1e6}
        with contextlib.suppress(Exception):  # Triton's own measure, for reference
            import triton.testing

            record["do_bench_us"] = triton.testing.do_bench(lambda: launch(0), warmup=25, rep=100,
                                                            return_mode="median") * 1e3
        return record

    def skip_native(self, bench: str, **fields: Any) -> bool:
        if self.torch is None:
            self.results.skip(bench, "triton_native", self.torch_reason, **fields)
            return True
        return False

    def skip_jt(self, bench: str, **fields: Any) -> bool:
        if self.jt is None:
            self.results.skip(bench, "jax_triton", self.jt_reason, **fields)
            return True
        return False

    def free(self) -> None:
        import gc

        gc.collect()
        if self.torch is not None:
            self.torch.cuda.empty_cache()


def import_jax_triton() -> tuple[Any, str]:
    """``jax_triton`` or why not. Its import sets TRITON_CACHE_DIR to "" (which makes Triton's
    own launches fail to find a cache), so the variable is put back afterwards."""
    saved = os.environ.get("TRITON_CACHE_DIR")
    try:
        import jax_triton
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return None, f"import jax_triton failed: {type(exc).__name__}: {exc}"
    finally:
        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved
    return jax_triton, ""


DISPATCH_BOUND_S = 400e-6  # below this, one jitted call per kernel would time the host's dispatch
PROGRAM_BYTES = 24 << 30  # inputs + outputs one amortised program may hold on the device


def n_sets_for(set_bytes: int, smoke: bool) -> int:
    return 1 if smoke else max(1, min(16, math.ceil(ROTATE_BYTES / max(set_bytes, 1))))


def dtype_name(dtype: Any) -> str:
    import numpy as np

    return np.dtype(dtype).name


@contextlib.contextmanager
def captured_stderr() -> Iterator[dict[str, str]]:
    """Capture file descriptor 2 (jaxlib's C++ log lines), echoing it afterwards."""
    box = {"text": ""}
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield box
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box["text"] = tmp.read().decode(errors="replace")
            sys.stderr.write(box["text"][-8000:])


_AUTOTUNE_LOG = re.compile(r"Finished autotuning function: (?P<name>.*?) best config (?P<config>.*)")


def jaxlib_pick(log: str) -> str | None:
    """The configuration jaxlib's autotuner chose, from its log lines."""
    matches = list(_AUTOTUNE_LOG.finditer(log))
    return matches[-1].group("config").strip() if matches else None


# ------------------------------------------------------------------ benchmarks


def bench_copy(run: Run) -> None:
    """Device copy bandwidth (read + write), the roofline for ``add``."""
    import jax
    import jax.numpy as jnp

    n = (1 << 12) if run.smoke else (1 << 28)
    nbytes = 4 * n
    bench = "copy"
    with run.results.guard(bench, "xla"):
        x = jax.random.normal(jax.random.key(10), (n, ), jnp.float32)
        copy = jax.jit(lambda a: jnp.copy(a))
        r = run.results.add(bench, "xla", **run.time_jax(copy, [(x, )], nbytes), n=n, what="jnp.copy under jit")
        r["gbps"] = 2 * nbytes / (r["median_us"] * 1e-6) / 1e9
        del x
    if run.torch is not None:
        torch = run.torch
        with run.results.guard(bench, "torch"):
            src = torch.randn(n, device="cuda")
            dst = torch.empty_like(src)
            r = run.results.add(bench, "torch", **run.time_torch(lambda i: dst.copy_(src), 1), n=n,
                                what="Tensor.copy_")
            r["gbps"] = 2 * nbytes / (r["median_us"] * 1e-6) / 1e9
            del src, dst
    else:
        run.results.skip(bench, "torch", run.torch_reason)
    measured = [r["gbps"] for r in run.results.records if r["bench"] == bench and r.get("gbps")]
    run.copy_gbps = max(measured) if measured else None
    run.free()


def bench_add(run: Run) -> None:
    import jax
    import jax.numpy as jnp

    import tritonplug

    ex = load_example("add")
    n = 4096 if run.smoke else 1 << 28
    block = 1024
    bench = "add"
    nbytes = 3 * 4 * n
    grid = (tritonplug.cdiv(n, block), )
    sets_n = n_sets_for(2 * 4 * n, run.smoke)
    keys = jax.random.split(jax.random.key(11), 2 * sets_n)
    sets = [(jax.random.normal(keys[2 * i], (n, ), jnp.float32), jax.random.normal(keys[2 * i + 1], (n, ), jnp.float32))
            for i in range(sets_n)]
    want = sets[0][0] + sets[0][1]
    common = {"n": n, "dtype": "float32", "BLOCK": block}

    def finish(record: dict) -> None:
        record["gbps"] = nbytes / (record["median_us"] * 1e-6) / 1e9
        if run.copy_gbps:
            record["pct_of_copy_bw"] = round(100 * record["gbps"] / run.copy_gbps, 1)

    impls: dict[str, Callable] = {
        "tritonplug": jax.jit(lambda x, y: ex.add(x, y, block)),
        "xla": jax.jit(lambda x, y: x + y),
    }
    if not run.skip_jt(bench, **common):
        jt = run.jt
        impls["jax_triton"] = jax.jit(lambda x, y: jt.triton_call(
            x, y, x.size, kernel=ex.add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid,
            BLOCK=block))
    for impl, fn in impls.items():
        with run.results.guard(bench, impl, **common):
            r = run.results.add(bench, impl, **run.time_jax(fn, sets, 4 * n), **common)
            finish(r)
            check(r, fn(*sets[0]), want, 1e-5)
    del want
    if not run.skip_native(bench, **common):
        torch = run.torch
        with run.results.guard(bench, "triton_native", **common):
            tsets = [(torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.empty(n, device="cuda"))
                     for _ in range(sets_n)]

            def launch(i: int) -> None:
                x, y, out = tsets[i % sets_n]
                ex.add_kernel[grid](x, y, n, out, BLOCK=block)

            r = run.results.add(bench, "triton_native", **run.time_torch(launch, sets_n), **common)
            finish(r)
            launch(0)
            check(r, to_numpy(tsets[0][2]), to_numpy(tsets[0][0] + tsets[0][1]), 1e-5)
            del tsets
    del sets
    run.free()


def bench_matmul(run: Run) -> None:
    for dtype in ("float16", "bfloat16"):
        matmul_one(run, dtype)
        run.write()


def matmul_one(run: Run, dtype_str: str) -> None:
    import jax
    import jax.numpy as jnp

    import tritonplug

    m = n = k = 128 if run.smoke else 4096
    bench = f"matmul_{'fp16' if dtype_str == 'float16' else 'bf16'}"
    dtype = jnp.dtype(dtype_str)
    flops = 2 * m * n * k
    configs = [str(c) for c in hopper_matmul_configs()]
    common = {"shape": [m, n, k], "dtype": dtype_str, "configs": len(configs)}

    def grid(meta: dict) -> tuple[int]:  # for Triton's own launcher; matmul_call has the same
        return (tritonplug.cdiv(m, meta["BLOCK_M"]) * tritonplug.cdiv(n, meta["BLOCK_N"]), )

    sets_n = n_sets_for(2 * 2 * m * k, run.smoke)
    keys = jax.random.split(jax.random.key(12), 2 * sets_n)
    sets = [(jax.random.normal(keys[2 * i], (m, k), dtype), jax.random.normal(keys[2 * i + 1], (k, n), dtype))
            for i in range(sets_n)]
    want = jnp.dot(sets[0][0].astype(jnp.float32), sets[0][1].astype(jnp.float32))
    tol = 0.05 * float(jnp.max(jnp.abs(want))) + 0.5
    impls: dict[str, Callable] = {
        "tritonplug": jax.jit(matmul_call(tritonplug.triton_call, autotuned_matmul(), m, n, k, dtype)),
        "xla": jax.jit(lambda a, b: jnp.dot(a, b)),
    }
    if not run.skip_jt(bench, **common):
        impls["jax_triton"] = jax.jit(matmul_call(run.jt.triton_call, autotuned_matmul(), m, n, k, dtype))
    for impl, fn in impls.items():
        with run.results.guard(bench, impl, **common):
            with captured_stderr() as log:
                first = fn(*sets[0])
                jax.block_until_ready(first)
            fields = dict(common)
            if impl != "xla":
                fields["config"] = jaxlib_pick(log["text"]) or (
                    "(host backend: first configuration)" if not run.on_gpu else "(no jaxlib autotune log seen)")
            r = run.results.add(bench, impl, **run.time_jax(fn, sets, 2 * m * n), **fields)
            r["tflops"] = flops / (r["median_us"] * 1e-6) / 1e12
            check(r, first, want, tol)
    del want
    if not run.skip_native(bench, **common):
        torch = run.torch
        with run.results.guard(bench, "triton_native", **common):
            native = autotuned_matmul()
            tdtype = getattr(torch, dtype_str)
            tsets = [(torch.randn((m, k), device="cuda", dtype=tdtype),
                      torch.randn((k, n), device="cuda", dtype=tdtype),
                      torch.empty((m, n), device="cuda", dtype=tdtype)) for _ in range(sets_n)]

            def launch(i: int) -> None:
                a, b, c = tsets[i % sets_n]
                native[grid](a, b, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                             c.stride(1), c)

            launch(0)  # autotunes
            torch.cuda.synchronize()
            best = getattr(native, "best_config", None)
            r = run.results.add(bench, "triton_native", **run.time_torch(launch, sets_n), **common,
                                config=str(best) if best is not None else None)
            r["tflops"] = flops / (r["median_us"] * 1e-6) / 1e12
            a, b, c = tsets[0]
            launch(0)
            ref = a.float() @ b.float()
            check(r, to_numpy(c), to_numpy(ref), 0.05 * float(ref.abs().max()) + 0.5)
            del tsets
    del sets
    run.free()


def bench_softmax(run: Run) -> None:
    import jax
    import jax.numpy as jnp
    import triton

    ex = load_example("softmax")
    rows = 8 if run.smoke else 4096
    col_sizes = (256, 512) if run.smoke else (4096, 8192, 16384, 32768)
    dtype = jnp.float32
    for cols in col_sizes:
        bench = f"softmax_{rows}x{cols}"
        block = triton.next_power_of_2(cols)
        warps = 8 if block >= 2048 else 4
        common = {"shape": [rows, cols], "dtype": "float32", "BLOCK": block, "num_warps": warps}
        nbytes = 2 * 4 * rows * cols
        sets_n = n_sets_for(4 * rows * cols, run.smoke)
        keys = jax.random.split(jax.random.key(13 + cols), sets_n)
        sets = [(jax.random.normal(key, (rows, cols), dtype), ) for key in keys]
        want = jax.nn.softmax(sets[0][0], axis=-1)
        impls: dict[str, Callable] = {"tritonplug": jax.jit(ex.softmax),
                                      "xla": jax.jit(lambda x: jax.nn.softmax(x, axis=-1))}
        if not run.skip_jt(bench, **common):
            jt = run.jt
            impls["jax_triton"] = jax.jit(lambda x, jt=jt, cols=cols, block=block, warps=warps: jt.triton_call(
                x, cols, cols, kernel=ex.softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                grid=(rows, ), num_warps=warps, BLOCK=block))
        for impl, fn in impls.items():
            with run.results.guard(bench, impl, **common):
                r = run.results.add(bench, impl, **run.time_jax(fn, sets, 4 * rows * cols), **common)
                r["gbps"] = nbytes / (r["median_us"] * 1e-6) / 1e9
                check(r, fn(*sets[0]), want, 1e-5)
        del want, sets
        if not run.skip_native(bench, **common):
            torch = run.torch
            with run.results.guard(bench, "triton_native", **common):
                tsets = [(torch.randn((rows, cols), device="cuda"), torch.empty((rows, cols), device="cuda"))
                         for _ in range(sets_n)]

                def launch(i: int, tsets: list = tsets, cols: int = cols, block: int = block,
                           warps: int = warps) -> None:
                    x, out = tsets[i % len(tsets)]
                    ex.softmax_kernel[(rows, )](x, cols, x.stride(0), out, BLOCK=block, num_warps=warps)

                r = run.results.add(bench, "triton_native", **run.time_torch(launch, sets_n), **common)
                r["gbps"] = nbytes / (r["median_us"] * 1e-6) / 1e9
                launch(0)
                check(r, to_numpy(tsets[0][1]), to_numpy(torch.softmax(tsets[0][0], -1)), 1e-5)
                del tsets
        run.free()
        run.write()


def bench_attention(run: Run) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import tritonplug

    ex = load_example("fused_attention")
    shape = (1, 2, 128, 16) if run.smoke else (4, 16, 4096, 64)
    dtype_str = "float32" if run.smoke else "float16"
    dtype = jnp.dtype(dtype_str)
    batch, heads, seq, dim = shape
    block_m = block_n = 64
    scale = 1.0 / math.sqrt(dim)
    set_bytes = 3 * math.prod(shape) * dtype.itemsize
    sets_n = n_sets_for(set_bytes, run.smoke)
    for causal in (False, True):
        bench = "fused_attention_causal" if causal else "fused_attention"
        common = {"shape": list(shape), "dtype": dtype_str, "causal": causal, "BLOCK_M": block_m, "BLOCK_N": block_n}
        flops = 4 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
        keys = jax.random.split(jax.random.key(14), 3 * sets_n)
        sets = [tuple(jax.random.normal(keys[3 * i + j], shape, dtype) for j in range(3)) for i in range(sets_n)]
        want = ex.reference(*sets[0], causal)
        tol = 2e-2

        def to_bthd(q: Any, k: Any, v: Any) -> tuple:
            return tuple(jnp.swapaxes(t, 1, 2) for t in (q, k, v))

        impls: dict[str, tuple[Callable, Any]] = {
            "tritonplug": (jax.jit(lambda q, k, v, c=causal: ex.attention(q, k, v, c, block_m, block_n)), None)}
        if not run.skip_jt(bench, **common):
            jt = run.jt
            grid = (tritonplug.cdiv(seq, block_m), batch * heads)
            impls["jax_triton"] = (jax.jit(lambda q, k, v, c=causal, jt=jt, grid=grid: jt.triton_call(
                q, k, v, seq, np.float32(scale), kernel=ex.attention_fwd_kernel,
                out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=grid, num_warps=4, num_stages=2,
                HEAD_DIM=dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=c)), None)
        bthd_sets = [jax.block_until_ready(to_bthd(*s)) for s in sets]  # [B, T, N, H] for jax.nn
        impls["xla"] = (jax.jit(lambda q, k, v, c=causal: jax.nn.dot_product_attention(q, k, v, is_causal=c)), "bthd")
        if run.on_gpu:
            impls["xla_cudnn"] = (jax.jit(lambda q, k, v, c=causal: jax.nn.dot_product_attention(
                q, k, v, is_causal=c, implementation="cudnn")), "bthd")
        for impl, (fn, layout) in impls.items():
            with run.results.guard(bench, impl, **common):
                use = bthd_sets if layout == "bthd" else sets
                r = run.results.add(bench, impl, **run.time_jax(fn, use, math.prod(shape) * dtype.itemsize), **common)
                r["tflops"] = flops / (r["median_us"] * 1e-6) / 1e12
                got = fn(*use[0])
                check(r, jnp.swapaxes(got, 1, 2) if layout == "bthd" else got, want, tol)
        del want, sets, bthd_sets
        if not run.skip_native(bench, **common):
            torch = run.torch
            with run.results.guard(bench, "triton_native", **common):
                tsets = [tuple(torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
                         + (torch.empty(shape, device="cuda", dtype=torch.float16), ) for _ in range(sets_n)]
                tgrid = (tritonplug.cdiv(seq, block_m), batch * heads)

                def launch(i: int, tsets: list = tsets, causal: bool = causal, tgrid: tuple = tgrid) -> None:
                    q, k, v, o = tsets[i % len(tsets)]
                    ex.attention_fwd_kernel[tgrid](q, k, v, seq, scale, o, HEAD_DIM=dim, BLOCK_M=block_m,
                                                   BLOCK_N=block_n, CAUSAL=causal, num_warps=4, num_stages=2)

                r = run.results.add(bench, "triton_native", **run.time_torch(launch, sets_n), **common)
                r["tflops"] = flops / (r["median_us"] * 1e-6) / 1e12
                launch(0)
                q, k, v, o = tsets[0]
                ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                       is_causal=causal)
                check(r, to_numpy(o), to_numpy(ref), tol)
                del tsets
        run.free()
        run.write()


def bench_launch_overhead(run: Run) -> None:
    """Per-call cost of many tiny kernels in one jitted function (unrolled, and in a fori_loop)."""
    import jax
    import jax.numpy as jnp

    ex = load_example("add")
    n, block = 1024, 1024
    steps = 10 if run.smoke else 1000
    x = jax.random.normal(jax.random.key(15), (n, ), jnp.float32)
    y = jax.random.normal(jax.random.key(16), (n, ), jnp.float32)

    def tp_call(a: Any, b: Any) -> Any:
        return ex.add(a, b, block)

    calls = {"tritonplug": tp_call}
    if run.jt is not None:
        jt = run.jt

        def jt_call(a: Any, b: Any) -> Any:
            return jt.triton_call(a, b, a.size, kernel=ex.add_kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype),
                                  grid=(1, ), BLOCK=block)

        calls["jax_triton"] = jt_call

    def unrolled(call: Callable) -> Callable:
        def chain(a: Any, b: Any) -> Any:
            for _ in range(steps):
                a = call(a, b)
            return a
        return chain

    def fori(call: Callable) -> Callable:
        return lambda a, b: jax.lax.fori_loop(0, steps, lambda i, acc: call(acc, b), a)

    want = x + steps * y
    for variant, make in (("unrolled", unrolled), ("fori_loop", fori)):
        bench = f"launch_overhead_{variant}"
        common = {"steps": steps, "n": n}
        for impl, call in calls.items():
            with run.results.guard(bench, impl, **common):
                start = time.perf_counter()
                fn = jax.jit(make(call)).trace(x, y).lower().compile()
                build_s = time.perf_counter() - start
                samples = sample_seconds(lambda fn=fn: fn(x, y), run.reps, warmup=2, sync=jax.block_until_ready)
                per_call = [s / steps for s in samples]
                r = run.results.add(bench, impl, **summarize(per_call), **common, trace_lower_compile_s=build_s)
                check(r, fn(x, y), want, 1e-3 * steps)
        if run.jt is None:
            run.results.skip(bench, "jax_triton", run.jt_reason, **common)
        run.results.skip(bench, "xla", "no XLA counterpart: XLA fuses a chain of adds into one kernel", **common)
        if not run.skip_native(bench, **common):
            torch = run.torch
            with run.results.guard(bench, "triton_native", **common):
                buffers = (torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.empty(n, device="cuda"))

                def loop(buffers: tuple = buffers, torch: Any = torch) -> None:
                    tx, ty, tout = buffers
                    for _ in range(steps):
                        ex.add_kernel[(1, )](tx, ty, n, tout, BLOCK=block)
                    torch.cuda.synchronize()

                samples = sample_seconds(loop, run.reps, warmup=1)
                run.results.add(bench, "triton_native", **summarize([s / steps for s in samples]), **common,
                                what="Python loop of launches, one synchronize")
    run.free()


def bench_eager(run: Run) -> None:
    """One un-jitted call on 1024 elements: latency (synchronised each call) and async per-call."""
    import jax
    import jax.numpy as jnp

    import tritonplug

    ex = load_example("add")
    n, block = 1024, 1024
    calls = 20 if run.smoke else 200
    bench = "eager_dispatch"
    common = {"n": n}
    x = jax.random.normal(jax.random.key(17), (n, ), jnp.float32)
    y = jax.random.normal(jax.random.key(18), (n, ), jnp.float32)
    out_shape = jax.ShapeDtypeStruct((n, ), jnp.float32)
    impls: dict[str, Callable] = {
        "tritonplug": lambda: tritonplug.triton_call(x, y, n, kernel=ex.add_kernel, out_shape=out_shape, grid=(1, ),
                                                     BLOCK=block),
        "xla": lambda: x + y,
    }
    if not run.skip_jt(bench, **common):
        jt = run.jt
        impls["jax_triton"] = lambda: jt.triton_call(x, y, n, kernel=ex.add_kernel, out_shape=out_shape, grid=(1, ),
                                                     BLOCK=block)
    for impl, fn in impls.items():
        with run.results.guard(bench, impl, **common):
            latency = []
            for _ in range(run.reps):
                latency.extend(sample_seconds(fn, calls // run.reps or 1, warmup=2, sync=jax.block_until_ready))
            asynchronous = batched_seconds(lambda i, fn=fn: fn(), calls, run.reps, 2, jax.block_until_ready)
            r = run.results.add(bench, impl, **summarize(latency), **common,
                                async_median_us=summarize(asynchronous)["median_us"])
            check(r, fn(), x + y, 1e-5)
    if not run.skip_native(bench, **common):
        torch = run.torch
        with run.results.guard(bench, "triton_native", **common):
            tx, ty, tout = torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.empty(n, device="cuda")

            def launch(i: int = 0) -> None:
                ex.add_kernel[(1, )](tx, ty, n, tout, BLOCK=block)

            latency = sample_seconds(launch, calls, warmup=2, sync=lambda _: torch.cuda.synchronize())
            asynchronous = batched_seconds(launch, calls, run.reps, 2, lambda _: torch.cuda.synchronize())
            run.results.add(bench, "triton_native", **summarize(latency), **common,
                            async_median_us=summarize(asynchronous)["median_us"])
    run.free()


# ------------------------------------------------------------------ subprocess benchmarks


def run_child(kind: str, child_args: dict, env: dict[str, str], timeout: float = 540) -> dict:
    """Run ``gpu.py --child kind`` in a fresh interpreter; its result dict (or an ``error``)."""
    full_env = {**os.environ, **env}
    command = [sys.executable, str(SCRIPT), "--child", kind, "--child-args", json.dumps(child_args)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"child {kind} timed out after {timeout:.0f}s"}
    wall = time.perf_counter() - start
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK):])
            result["process_wall_s"] = wall
            return result
    tail = (proc.stderr or "")[-3000:]
    return {"error": f"child {kind} exited {proc.returncode} without a result; stderr tail:\n{tail}",
            "process_wall_s": wall}


def child_env(run: Run, cache_dir: str, **extra: str) -> dict[str, str]:
    env = {"TRITONPLUG_CACHE_DIR": cache_dir, "TRITONPLUG_CACHE": "1", **extra}
    if run.smoke:
        env.update({"TRITONPLUG_CUDA_ARCH": "90", "JAX_PLATFORMS": "cpu"})
    return env


def add_child_record(run: Run, bench: str, impl: str, result: dict, **common: Any) -> dict:
    fields = {k: v for k, v in result.items() if k != "error"}
    if "error" in result:
        return run.results.add(bench, impl, median_us=None, error=result["error"], **common, **fields)
    return run.results.add(bench, impl, **common, **fields)


def bench_compile(run: Run) -> None:
    n_configs = run.args.compile_configs or (2 if run.smoke else 8)
    common = {"kernel": "autotuned matmul fp16 4096^3", "configs": n_configs}
    args = {"configs": n_configs, "smoke": run.smoke}
    with tempfile.TemporaryDirectory(prefix="tritonplug-bench-cache-") as scratch:
        shared = os.path.join(scratch, "shared")
        for bench, cache in (("compile_cold", shared), ("compile_warm", shared)):
            result = run_child("compile", args, child_env(run, cache))
            r = add_child_record(run, bench, "tritonplug", result, **common)
            if r.get("lower_s") is not None:
                r["median_us"] = r["lower_s"] * 1e6
            run.write()
        for workers in (1, 16):
            bench = f"compile_workers_{workers}"
            result = run_child("compile", args, child_env(run, os.path.join(scratch, f"w{workers}"),
                                                          TRITONPLUG_COMPILE_WORKERS=str(workers)))
            r = add_child_record(run, bench, "tritonplug", result, **common)
            if r.get("lower_s") is not None:
                r["median_us"] = r["lower_s"] * 1e6
            run.write()
        if not run.jt_lowers:
            run.results.skip("compile_cold", "jax_triton", run.jt_reason, **common)
        else:
            result = run_child("compile_jax_triton", args, child_env(run, os.path.join(scratch, "jt")))
            r = add_child_record(run, "compile_cold", "jax_triton", result, **common)
            if r.get("lower_s") is not None:
                r["median_us"] = r["lower_s"] * 1e6
        if run.torch is None:
            run.results.skip("compile_cold", "triton_native", run.torch_reason, **common)
        else:
            triton_cache = os.path.join(scratch, "triton-native-cache")
            result = run_child("compile_triton_native", args,
                               child_env(run, os.path.join(scratch, "tn"), TRITON_CACHE_DIR=triton_cache))
            r = add_child_record(run, "compile_cold", "triton_native", result, **common)
            if r.get("compile_s") is not None:
                r["median_us"] = r["compile_s"] * 1e6


def bench_module_image(run: Run) -> None:
    """PTX (jaxlib runs ptxas at first execution) vs Triton's cubin in the proto's module_image."""
    with tempfile.TemporaryDirectory(prefix="tritonplug-bench-mi-") as scratch:
        for kernel in ("add", "matmul_fp16"):
            bench = f"ptx_vs_cubin_{kernel}"
            cache = os.path.join(scratch, kernel)
            for flag in ("0", "1"):
                impl = "tritonplug_cubin" if flag == "1" else "tritonplug_ptx"
                result = run_child("first_call", {"kernel": kernel, "smoke": run.smoke},
                                   child_env(run, cache, TRITONPLUG_CUDA_MODULE_IMAGE=flag))
                r = add_child_record(run, bench, impl, result, TRITONPLUG_CUDA_MODULE_IMAGE=flag)
                if run.smoke and "error" not in r:
                    r["skipped"] = "no GPU: lowered for sm_90 only (has_module_image checked), not executed"
            run.write()
        # Does jaxlib use module_image? Make its ptxas fail: if the cubin run still works, ptxas was skipped.
        bad = {"JAX_TRITON_PTXAS_EXTRA_FLAGS": "--tritonplug-probe-not-a-ptxas-flag"}
        probe: dict[str, Any] = {}
        for flag in ("0", "1"):
            result = run_child("first_call", {"kernel": "add", "smoke": run.smoke, "small": True},
                               child_env(run, os.path.join(scratch, "probe"), TRITONPLUG_CUDA_MODULE_IMAGE=flag, **bad))
            probe[flag] = "ok" if "error" not in result else result["error"].splitlines()[-1][:300]
        if run.smoke:
            verdict = "not run: needs a GPU"
        elif probe["0"] == "ok":
            verdict = "inconclusive: a bad JAX_TRITON_PTXAS_EXTRA_FLAGS did not break the PTX path"
        elif probe["1"] == "ok":
            verdict = "jaxlib uses module_image (the cubin path ran without ptxas)"
        else:
            verdict = "jaxlib ignores module_image (ptxas ran, and failed, with the cubin passed too)"
        run.results.add("ptx_vs_cubin_probe", "tritonplug", median_us=None, ptx_run=probe["0"], cubin_run=probe["1"],
                        verdict=verdict, note=verdict)


# ------------------------------------------------------------------ children (fresh processes)


def child_compile(args: dict) -> dict:
    """Lower the autotuned fp16 matmul for sm_90 (every configuration compiled) in this fresh process."""
    start = time.perf_counter()
    import jax
    import jax.numpy as jnp

    import tritonplug
    from tritonplug.compile.workers import pool_size

    import_s = time.perf_counter() - start
    m = n = k = 4096
    mm = matmul_call(tritonplug.triton_call, autotuned_matmul(args["configs"]), m, n, k, jnp.float16)
    spec = jax.ShapeDtypeStruct((m, k), jnp.float16)

    start = time.perf_counter()
    lowered = jax.jit(mm).trace(spec, spec).lower(lowering_platforms=("cuda", ))
    lower_s = time.perf_counter() - start
    result = {"import_s": import_s, "lower_s": lower_s, "compile_stats": tritonplug.compile_stats(),
              "workers": pool_size()}
    if not args["smoke"]:
        start = time.perf_counter()
        lowered.compile()
        result["xla_compile_s"] = time.perf_counter() - start
    return result


def child_compile_jax_triton(args: dict) -> dict:
    start = time.perf_counter()
    import jax
    import jax.numpy as jnp


    jt, reason = import_jax_triton()
    if jt is None:
        raise RuntimeError(reason)
    import_s = time.perf_counter() - start
    m = n = k = 4096
    mm = matmul_call(jt.triton_call, autotuned_matmul(args["configs"]), m, n, k, jnp.float16,
                     compute_capability=90 if args["smoke"] else None)
    spec = jax.ShapeDtypeStruct((m, k), jnp.float16)

    start = time.perf_counter()
    jax.jit(mm).trace(spec, spec).lower(lowering_platforms=("cuda", ))
    return {"import_s": import_s, "lower_s": time.perf_counter() - start, "what": "in-process, serial compile"}


def child_compile_triton_native(args: dict) -> dict:
    """Triton compiling the same configurations itself (``JITFunction.warmup``, one after another)."""
    start = time.perf_counter()
    import torch

    import_s = time.perf_counter() - start
    m = n = k = 4096
    fn = load_example("matmul").matmul_kernel.fn
    a = torch.randn((m, k), device="cuda", dtype=torch.float16)
    b = torch.randn((k, n), device="cuda", dtype=torch.float16)
    c = torch.empty((m, n), device="cuda", dtype=torch.float16)
    start = time.perf_counter()
    for config in hopper_matmul_configs()[:args["configs"]]:
        fn.warmup(a, b, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), c,
                  grid=(1, ), num_warps=config.num_warps, num_stages=config.num_stages, **config.kwargs)
    return {"import_s": import_s, "compile_s": time.perf_counter() - start, "what": "JITFunction.warmup, serial"}


def child_first_call(args: dict) -> dict:
    """Lower, compile, then time the first execution (jaxlib loads the kernel then) and steady state."""
    import jax
    import jax.numpy as jnp

    import tritonplug
    from tritonplug.inspection import kernel_calls

    ex = load_example("add")
    smoke = args["smoke"]
    if args["kernel"] == "add":
        n = 1024 if (smoke or args.get("small")) else 1 << 28
        x = jax.random.normal(jax.random.key(1), (n, ), jnp.float32)
        y = jax.random.normal(jax.random.key(2), (n, ), jnp.float32)
        operands, fn = (x, y), (lambda a, b: ex.add(a, b))
        out_bytes = 4 * n
    else:
        m = n = k = 4096
        a = jax.random.normal(jax.random.key(1), (m, k), jnp.float16)
        b = jax.random.normal(jax.random.key(2), (k, n), jnp.float16)
        operands, out_bytes = (a, b), 2 * m * n
        fn = matmul_call(tritonplug.triton_call, autotuned_matmul(), m, n, k, jnp.float16)
    start = time.perf_counter()
    lowered = jax.jit(fn).trace(*operands).lower(lowering_platforms=("cuda", ))
    lower_s = time.perf_counter() - start
    calls = kernel_calls(lowered.as_text())
    kernels = [c["kernel_call"]["kernel"] for c in calls if "kernel_call" in c] + [
        cfg["kernel_call"]["kernel"] for c in calls for cfg in c.get("autotuned_kernel_call", {}).get("configs", [])]
    result: dict[str, Any] = {"lower_s": lower_s, "kernels": len(kernels),
                              "has_module_image": bool(kernels) and all(k.get("module_image") for k in kernels),
                              "compile_stats": tritonplug.compile_stats()}
    if smoke:
        result["median_us"] = None
        return result
    start = time.perf_counter()
    compiled = lowered.compile()
    result["xla_compile_s"] = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(compiled(*operands))
    result["first_call_ms"] = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    jax.block_until_ready(compiled(*operands))
    result["second_call_ms"] = (time.perf_counter() - start) * 1e3
    if not args.get("small"):
        samples = batched_seconds(lambda i: compiled(*operands), max(3, min(100, INFLIGHT_BYTES // out_bytes)), 10, 2,
                                  jax.block_until_ready)
        result.update(summarize(samples))
    return result


CHILDREN = {"compile": child_compile, "compile_jax_triton": child_compile_jax_triton,
            "compile_triton_native": child_compile_triton_native, "first_call": child_first_call}


def child_main(kind: str, raw_args: str) -> int:
    result = CHILDREN[kind](json.loads(raw_args))
    print(RESULT_MARK + json.dumps(result, default=str), flush=True)
    return 0


# ------------------------------------------------------------------ main

BENCHES: dict[str, Callable[[Run], None]] = {
    "copy": bench_copy, "add": bench_add, "matmul": bench_matmul, "softmax": bench_softmax,
    "fused_attention": bench_attention, "launch_overhead": bench_launch_overhead, "eager_dispatch": bench_eager,
    "compile": bench_compile, "module_image": bench_module_image,
    "tma_matmul": gpu_hopper.bench_tma_matmul, "layer_norm": gpu_hopper.bench_layer_norm,
}
COLUMNS = ["bench", "impl", "median_us", "ratio_vs_triton_native", "gbps", "tflops", "check", "config"]


def merge(paths: Sequence[str], out: str) -> int:
    """One file from several runs (e.g. a run split in two to fit a time limit)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    records = [r for run in runs for r in run["records"]]
    sources = [{"file": str(p), "command": run.get("command"), "environment": run.get("environment")}
               for p, run in zip(paths, runs, strict=True)]
    write_json(out, records, merged_from=sources)
    print(format_table(records, COLUMNS))
    print(f"wrote {out}")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON file to write (on the GPU machine: under $OUT)")
    parser.add_argument("--only", default="", help=f"comma-separated groups, in order: {','.join(GROUPS)}")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on CPU; GPU-only parts recorded as skipped")
    parser.add_argument("--reps", type=int, default=0, help="timed batches per measurement (default 10, smoke 3)")
    parser.add_argument("--compile-configs", type=int, default=0, help="matmul configs compiled in the compile group "
                                                                       "(default 8, smoke 2)")
    parser.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                        help="combine the records of earlier runs' files into --out, and print the table")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args.child, args.child_args)
    if args.merge:
        return merge(args.merge, args.out)
    if args.smoke:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    run = Run(args)
    unknown = [g for g in run.groups if g not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown group(s) {unknown}; choose from {', '.join(GROUPS)}")
    print(f"platform {run.platform}; torch: {'yes' if run.torch else run.torch_reason}; "
          f"jax_triton: {'yes' if run.jt else run.jt_reason}", file=sys.stderr)
    for group in run.groups:
        start = time.perf_counter()
        with run.results.guard(group, "(group)"):
            BENCHES[group](run)
        print(f"[{group}] done in {time.perf_counter() - start:.1f}s", file=sys.stderr)
        run.results.add_ratios("triton_native", "ratio_vs_triton_native")
        run.write()
    print(format_table(run.results.records, COLUMNS))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
