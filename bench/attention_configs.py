"""FLA's parallel attention kernels at launch settings other than FLA's own, against PyTorch's fused attention
(cuDNN's and FlashAttention's), at the Llama 1b config's shapes, on torch tensors (issue 38: attention is the
all-Triton step's gap, 1.75× cuDNN's forward + backward in ``docs/model.md``).

    python bench/attention_configs.py --out bench/results/attention-h200/configs.json

FLA's launchers (``fla.ops.attn.parallel.parallel_attn_fwd`` / ``parallel_attn_bwd``) fix their tiles per device
class (Hopper: ``BT=128, BS=64``, 8 warps, Triton's default stages). This times the installed kernels (never
copied) at each setting of ``--tiles``' grid, one kernel at a time (the forward, the backward's ``dq`` and
``dkv``), each checked against the same kernel at FLA's setting, and the whole forward and backward against torch's
``scaled_dot_product_attention`` (which it is checked against too). Settings Triton cannot compile (shared memory)
are recorded as such; a setting whose outputs differ from FLA's setting's (``BS > BT`` breaks the kernels' causal
blocks) is recorded with its difference, which docs/model.md's renderer reads as wrong.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from _util import Results  # noqa: E402


def _bench(fn) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1e3


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    opts = p.parse_args(argv)

    import torch
    import torch.nn.functional as F
    import triton
    from fla.ops.attn import parallel as fla

    B, T, HQ, H, K = opts.batch, opts.seq, opts.heads, opts.kv_heads, opts.head_dim
    G, scale = HQ // H, K ** -0.5
    results = Results(opts.out, batch=B, seq=T, heads=HQ, kv_heads=H, head_dim=K)
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, T, h, K, device="cuda", dtype=torch.bfloat16) for h in (HQ, H, H, HQ))
    bench = f"attention b={B} t={T} hq={HQ} h={H} k={K}"

    def forward(BT, BS, num_warps, num_stages):
        o = torch.empty(B, T, HQ, K, dtype=v.dtype, device="cuda")
        lse = torch.empty(B, T, HQ, dtype=torch.float, device="cuda")
        grid = (triton.cdiv(T, BT), B * HQ)
        fla.parallel_attn_fwd_kernel[grid](
            q=q, k=k, v=v, o=o, g_cumsum=None, sink_bias=None, lse=lse, scale=scale, cu_seqlens=None,
            chunk_indices=None, B=B, T=T, W=None, H=H, HQ=HQ, G=G, K=K, V=K, BT=BT, BS=BS, BK=K, BV=K,
            num_warps=num_warps, num_stages=num_stages)
        return o, lse

    o_ref, lse_ref = forward(128, 64, 8, 3)
    delta = fla.parallel_attn_bwd_preprocess(o_ref, do)

    def backward(which, BT, BS, num_warps, num_stages):
        grid = (triton.cdiv(T, BT), B * HQ)
        common = dict(q=q, k=k, v=v, g_cumsum=None, lse=lse_ref, delta=delta, do=do, cu_seqlens=None,
                      chunk_indices=None, scale=scale, T=T, W=None, B=B, H=H, HQ=HQ, G=G, K=K, V=K, BT=BT, BS=BS,
                      BK=K, BV=K, num_warps=num_warps, num_stages=num_stages)
        if which == "dq":
            dq = torch.empty(B, T, HQ, K, dtype=torch.float, device="cuda")
            fla.parallel_attn_bwd_kernel_dq[grid](dq=dq, dg_cumsum=None, **common)
            return (dq,)
        dk = torch.empty(B, T, HQ, K, dtype=torch.float, device="cuda")
        dv = torch.empty(B, T, HQ, K, dtype=torch.float, device="cuda")
        fla.parallel_attn_bwd_kernel_dkv[grid](dk=dk, dv=dv, dg_cumsum=None, **common)
        return dk, dv

    kernels = {"forward": forward, "dq": lambda *s: backward("dq", *s), "dkv": lambda *s: backward("dkv", *s)}
    fla_setting = (128, 64, 8, 3)
    for name, run in kernels.items():
        want = run(*fla_setting)
        for setting in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3, 4)):
            BT, BS, warps, stages = setting
            record = dict(BT=BT, BS=BS, num_warps=warps, num_stages=stages, fla_setting=setting == fla_setting)
            try:
                got = run(*setting)
                torch.cuda.synchronize()
            except Exception as e:  # out of shared memory, or a tile Triton refuses
                results.add(bench, name, error=f"{type(e).__name__}: {str(e)[:200]}", **record)
                continue
            diff = max(float((g.float() - w.float()).abs().max()) / max(float(w.float().abs().max()), 1e-30)
                       for g, w in zip(got, want, strict=True))
            us = _bench(lambda run=run, setting=setting: run(*setting))
            results.add(bench, name, median_us=us, max_relative_diff_vs_fla_setting=diff, **record)
            print(f"{name:8s} {setting}: {us:9.1f} us diff {diff:.2g}", flush=True)

    # torch's fused attention, forward and forward + backward, (B, H, T, K) layout
    qt, kt, vt, dot = (x.transpose(1, 2).contiguous().requires_grad_(x is not do) for x in (q, k, v, do))
    for backend in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
        kind = getattr(torch.nn.attention.SDPBackend, backend)

        def sdpa(kind=kind):
            with torch.nn.attention.sdpa_kernel(kind):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, scale=scale, enable_gqa=True)

        try:
            out = sdpa()
            diff = float((out.transpose(1, 2).float() - o_ref.float()).abs().max()) / float(o_ref.float().abs().max())
            fwd = _bench(sdpa)
            both = _bench(lambda: torch.autograd.grad(sdpa(), (qt, kt, vt), dot))
        except Exception as e:
            results.add(bench, f"torch {backend}", error=f"{type(e).__name__}: {str(e)[:200]}")
            continue
        results.add(bench, f"torch {backend}", forward_us=fwd, forward_backward_us=both,
                    max_relative_diff_vs_fla=diff)
        print(f"torch {backend}: forward {fwd:.1f} us, forward+backward {both:.1f} us, diff {diff:.2g}", flush=True)


if __name__ == "__main__":
    main()
