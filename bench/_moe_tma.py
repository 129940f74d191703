"""A candidate grouped matmul measured against vLLM's ``fused_moe_kernel`` (``bench/moe_kernels.py``) and not used:
rows already in group order (``ragged_dot``'s ``lhs``), its tiles read by the GPU's tensor memory accelerator
through host-side tensor descriptors, where vLLM's kernel reads each row through the plan's row ids. On an H200
(``bench/results/moe-h200/run34-tma-kernels``) it ran no faster: 128 experts forward 438 µs against vLLM's 437,
dX 524 against 518; 64 experts forward 397 against 351. The row ids are not what keeps the forward and dX from
cuBLAS's speed.

:func:`grouped_matmul_tma_kernel` multiplies block ``b`` of the plan (``examples/moe/kernels.py: BlockPlan``, in
order: the block's rows are consecutive, from its first row id) by its expert's weights; rows past the group's end
in the block's last tile belong to the next group (or lie past the matrix, read as zeros) and are computed but not
stored. ``TRANSPOSE_B`` multiplies by each expert's transpose (dX). A block of expert ``-1`` (rows no group holds)
writes zeros. Checked against torch's grouped matmul by ``bench/moe_kernels.py`` (its first configuration).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def grouped_matmul_tma_kernel(a_desc, b_desc, c_ptr, sorted_token_ids_ptr, expert_ids_ptr, group_ends_ptr, num_rows,
                              N, K, B_ROWS, stride_cm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, TRANSPOSE_B: tl.constexpr):
    """``C[rows of block] = A[rows] @ B[e]`` (``B[e]^T`` with ``TRANSPOSE_B``): ``A`` is ``(rows, K)``, ``B`` the
    experts' weights as one ``(experts * B_ROWS, ·)`` matrix (``ragged_dot``'s ``(g, k, n)`` reshaped), ``C``
    ``(rows, N)``; ``K`` a multiple of ``BLOCK_K``."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    expert = tl.load(expert_ids_ptr + pid_m)
    ids = tl.load(sorted_token_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if expert < 0:      # rows no group holds (and blocks past the plan's end, whose ids are all num_rows)
        zeros = tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty)
        c_ptrs = c_ptr + ids[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
        tl.store(c_ptrs, zeros, mask=(ids < num_rows)[:, None] & (offs_n < N)[None, :])
        return
    first = tl.load(sorted_token_ids_ptr + pid_m * BLOCK_M)
    end = tl.load(group_ends_ptr + expert)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([first, k])
        if TRANSPOSE_B:
            b = b_desc.load([expert * B_ROWS + pid_n * BLOCK_N, k]).T
        else:
            b = b_desc.load([expert * B_ROWS + k, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    offs_m = first + tl.arange(0, BLOCK_M)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m < end)[:, None] & (offs_n < N)[None, :])


#: The tiles tried: the block's rows are the plan's (``BLOCK_M``); the descriptors' blocks follow each configuration.
TMA_CONFIGS = [
    triton.Config({"BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_N": 128, "BLOCK_K": 128}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=5),
]
