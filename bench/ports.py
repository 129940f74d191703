"""The ports of ``examples/ports`` against the same library ops launched by their own torch launchers.

    python bench/ports.py --out bench/results/ports-h100.json     # GPU machine (torch, liger-kernel, fla-core)
    python bench/ports.py --smoke --out /tmp/ports-smoke.json      # tiny sizes on the CPU: checks the script

Per op and direction (``fwd``/``bwd``), implementations (``impl``):

* ``torch``: the library's launcher (``liger_kernel.ops.rms_norm.rms_norm_forward`` …) on torch tensors,
  the same kernel objects the port launches (with torch importable, ``kernels_of`` imports the module);
* ``tritonplug``: the ported launcher, jitted; buffers written in place are ``jax.new_ref`` s of
  the jitted function's arguments, so XLA copies each first (JAX keeps the caller's array);
* ``tritonplug_donated``: the same with those arguments donated (each call's output feeds the next
  call), so the kernel writes the caller's buffer: what a training step that donates gets.

Time per call: ``--calls`` back-to-back asynchronous calls synchronised once, median over ``--reps``
batches (``median_us``), warm (compiled and autotuned before timing); ``ratio`` is the median over
the torch launcher's. Outputs of the two sides are compared once (``check``). Where the port differs
in work from the library (cross entropy), the record's ``note`` says so.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU with JAX

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import ROOT, Results, batched_seconds, check, format_table, summarize, to_numpy, write_json  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))

SIZES = {  # GPU sizes; --smoke divides them
    "rms_norm": dict(rows=16384, cols=4096),
    "swiglu": dict(rows=16384, cols=4096),
    "cross_entropy": dict(rows=4096, vocab=32000),
    "rope": dict(bsz=4, seq=2048, n_q=32, n_kv=8, hd=128),
    "fla_fused_recurrent": dict(B=4, T=1024, H=16, K=64, V=64),
}
SMOKE = {
    "rms_norm": dict(rows=32, cols=64), "swiglu": dict(rows=32, cols=64), "cross_entropy": dict(rows=16, vocab=100),
    "rope": dict(bsz=1, seq=8, n_q=4, n_kv=2, hd=16), "fla_fused_recurrent": dict(B=1, T=8, H=2, K=16, V=16),
}


class Side:
    """One framework's arrays and how to wait for them."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "torch":
            import torch

            self.torch = torch
            self.device = "cuda"
            self.sync = lambda _: torch.cuda.synchronize()
        else:
            import jax

            self.sync = jax.block_until_ready

    def array(self, name: str, values: Any, dtype: str, prepare: Callable[[str, Any], Any] | None) -> Any:
        if self.name == "torch":
            tensor = self.torch.from_numpy(values).to(self.device, getattr(self.torch, dtype))
            return prepare(name, tensor) if prepare else tensor
        import jax.numpy as jnp

        return jnp.asarray(values, getattr(jnp, dtype))


def _random(seed: int, *shape: int, scale: float = 1.0) -> Any:
    import numpy as np

    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def cases(sizes: dict[str, dict[str, int]], dtype: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (op, direction): inputs (numpy), a jax call, the torch call, which jax arguments are written."""
    import jax.numpy as jnp
    import numpy as np
    from ports import fla_fused_recurrent, liger_cross_entropy, liger_rms_norm, liger_rope, liger_swiglu

    out: dict[tuple[str, str], dict[str, Any]] = {}
    s = sizes["rms_norm"]
    x, w, dy = _random(0, s["rows"], s["cols"]), 1 + 0.1 * _random(1, s["cols"]), _random(2, s["rows"], s["cols"])
    _, _, rstd, bs, nw, _ = liger_rms_norm.rms_norm_forward(jnp.asarray(x, dtype), jnp.asarray(w, dtype), 1e-6, 0.0,
                                                            "llama", None)
    rstd = np.asarray(rstd)
    out["rms_norm", "fwd"] = dict(
        inputs=dict(X=(x, dtype), W=(w, dtype)),
        jax=lambda X, W: liger_rms_norm.rms_norm_forward(X, W, 1e-6, 0.0, "llama", None)[0],
        torch=lambda X, W: _lib("liger_kernel.ops.rms_norm").rms_norm_forward(X, W, 1e-6, 0.0, "llama", None)[0])
    out["rms_norm", "bwd"] = dict(
        inputs=dict(dY=(dy, dtype), X=(x, dtype), W=(w, dtype), RSTD=(rstd, "float32")), written=("dY",),
        jax=lambda dY, X, W, RSTD: liger_rms_norm.rms_norm_backward(dY, X, W, RSTD, 0.0, 0, bs, nw, True, None),
        torch=lambda dY, X, W, RSTD: _lib("liger_kernel.ops.rms_norm").rms_norm_backward(
            dY, X, W, RSTD, 0.0, 0, bs, nw, True, None))
    s = sizes["swiglu"]
    a, b = _random(3, s["rows"], s["cols"]), _random(4, s["rows"], s["cols"])
    out["swiglu", "fwd"] = dict(inputs=dict(a=(a, dtype), b=(b, dtype)),
                                jax=lambda a, b: liger_swiglu.swiglu_forward(a, b)[2],
                                torch=lambda a, b: _lib("liger_kernel.ops.swiglu").swiglu_forward(a, b)[2])
    out["swiglu", "bwd"] = dict(inputs=dict(a=(a, dtype), b=(b, dtype), dc=(dy[:, :s["cols"]], dtype)),
                                written=("a", "b"), jax=liger_swiglu.swiglu_backward,
                                torch=lambda a, b, dc: _lib("liger_kernel.ops.swiglu").swiglu_backward(a, b, dc))
    s = sizes["cross_entropy"]
    logits = _random(5, s["rows"], s["vocab"])
    target = np.random.default_rng(6).integers(0, s["vocab"], s["rows"]).astype(np.int32)
    ce = dict(_input=(logits, dtype), target=(target, "int32"))
    out["cross_entropy", "fwd"] = dict(
        inputs=ce, written=("_input",),
        jax=lambda _input, target: liger_cross_entropy.cross_entropy_forward(
            _input, target, None, -100, 0.0, 0.0, "mean", None, False)[4],
        prepare=lambda name, t: t.long() if name == "target" else t.requires_grad_(),  # HAS_GRADIENTS, as the port
        torch=lambda _input, target: _lib("liger_kernel.ops.cross_entropy").cross_entropy_forward(
            _input, target, None, -100, 0.0, 0.0, "mean", None, False)[4],
        note="torch: .item() syncs the host in every call (Liger's launcher)")
    out["cross_entropy", "bwd"] = dict(
        inputs=dict(_input=(logits, dtype), grad_output=(np.float32(0.5), dtype)), written=("_input",),
        jax=liger_cross_entropy.cross_entropy_backward,
        torch=lambda _input, grad_output: _lib("liger_kernel.ops.cross_entropy").cross_entropy_backward(
            _input, grad_output),
        note="grad_output 0.5: both multiply (Liger skips the pass when it is exactly 1; the port cannot tell)")
    s = sizes["rope"]  # q, k stored (bsz, seq, heads, hd); both sides see them as HF does, (bsz, heads, seq, hd)
    q, k = _random(7, s["bsz"], s["seq"], s["n_q"], s["hd"]), _random(8, s["bsz"], s["seq"], s["n_kv"], s["hd"])
    freqs = np.arange(s["seq"], dtype=np.float32)[:, None] / 100.0 ** (np.arange(s["hd"] // 2) / (s["hd"] // 2))
    emb = np.concatenate([freqs, freqs], -1)[None].astype(np.float32)
    rope = dict(q=(q, dtype), k=(k, dtype), cos=(np.cos(emb), dtype), sin=(np.sin(emb), dtype))
    for direction, fn in (("fwd", "rope_forward"), ("bwd", "rope_backward")):
        # JAX: the model's swapaxes to (bsz, heads, seq, hd) and back cancel the port's (XLA folds the pairs);
        # torch: transpose(1, 2) views, as HF passes them. Both return (bsz, seq, heads, hd).
        out["rope", direction] = dict(
            inputs=rope, written=("q", "k"),
            prepare=lambda name, t: t.transpose(1, 2) if name in ("q", "k") else t,
            jax=lambda q, k, cos, sin, fn=fn: tuple(jnp.swapaxes(o, 1, 2) for o in getattr(liger_rope, fn)(
                jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2), cos, sin)[:2]),
            torch=lambda q, k, cos, sin, fn=fn: tuple(o.transpose(1, 2) for o in getattr(
                _lib("liger_kernel.ops.rope"), fn)(q, k, cos, sin)[:2]))
    s = sizes["fla_fused_recurrent"]
    shape_qk, shape_v = (s["B"], s["T"], s["H"], s["K"]), (s["B"], s["T"], s["H"], s["V"])
    fla = dict(q=(_random(9, *shape_qk), dtype), k=(_random(10, *shape_qk, scale=1 / s["K"]), dtype),
               v=(_random(11, *shape_v), dtype))
    scale = s["K"] ** -0.5
    out["fla_fused_recurrent", "fwd"] = dict(
        inputs=fla, jax=lambda q, k, v: fla_fused_recurrent.fused_recurrent_fwd(q, k, v, scale=scale)[0],
        torch=lambda q, k, v: _lib("fla.ops.common.fused_recurrent").fused_recurrent_fwd(q, k, v, scale=scale)[0])
    return out


def _lib(module: str) -> Any:
    import importlib

    return importlib.import_module(module)


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (tuple, list)) else value


def run_case(results: Results, op: str, direction: str, case: dict[str, Any], args: argparse.Namespace,
             torch_ok: bool) -> None:
    import jax

    bench = f"{op}.{direction}"
    written = case.get("written", ())
    names = list(case["inputs"])
    note = case.get("note")
    outputs: dict[str, Any] = {}
    sides: list[tuple[str, Callable[..., Any], Side, tuple[int, ...]]] = []
    jax_side = Side("jax")
    sides.append(("tritonplug", jax.jit(case["jax"]), jax_side, ()))
    if written:
        donate = tuple(names.index(n) for n in written)
        sides.append(("tritonplug_donated", jax.jit(case["jax"], donate_argnums=donate), jax_side, donate))
    if torch_ok:
        sides.append(("torch", case["torch"], Side("torch"), ()))
    else:
        results.skip(bench, "torch", "torch is not importable here")
    for impl, fn, side, donate in sides:
        with results.guard(bench, impl):
            prepare = case.get("prepare")

            def fresh(side=side, prepare=prepare) -> list[Any]:
                return [side.array(n, v, d, prepare) for n, (v, d) in case["inputs"].items()]

            state = fresh()
            outputs[impl] = to_numpy(_first(fn(*fresh())))

            def call(i: int, fn=fn, state=state, donate=donate) -> Any:
                result = fn(*state)
                if donate:  # the donated buffers come back as the outputs: the next call writes them
                    values = result if isinstance(result, (tuple, list)) else (result,)
                    for position, value in zip(donate, values, strict=False):
                        if getattr(value, "shape", None) == state[position].shape:
                            state[position] = value
                return result

            samples = batched_seconds(call, args.calls, args.reps, args.calls, side.sync)
            record = results.add(bench, impl, **summarize(samples), **({"note": note} if note else {}))
            if impl == "torch" and "tritonplug" in outputs:
                check(record, outputs["tritonplug"], outputs["torch"], tol=args.tol)
    results.add_ratios("torch", "ratio")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ports.json"))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, few calls: checks the script on a CPU")
    parser.add_argument("--only", default="", help="comma-separated ops (rms_norm, swiglu, cross_entropy, rope, "
                                                   "fla_fused_recurrent)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--tol", type=float, default=0.05, help="max abs difference tritonplug vs torch")
    args = parser.parse_args()
    if args.smoke:
        args.calls, args.reps, args.dtype = 3, 3, "float32"
    try:
        import torch

        torch_ok = torch.cuda.is_available()
    except ImportError:
        torch_ok = False
    results = Results()
    only = {o for o in args.only.split(",") if o}
    for (op, direction), case in cases(SMOKE if args.smoke else SIZES, args.dtype).items():
        if not only or op in only:
            run_case(results, op, direction, case, args, torch_ok)
            print(f"{op}.{direction} done", file=sys.stderr)
    columns = ("bench", "impl", "median_us", "min_us", "ratio", "check")
    print(format_table(results.records, columns))
    path = write_json(args.out, results.records, smoke=args.smoke, dtype=args.dtype, calls=args.calls, reps=args.reps)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
