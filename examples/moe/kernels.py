# invoke_fused_moe_triton_kernel is ported from vLLM 0.33.0 (vllm/model_executor/layers/fused_moe/fused_moe.py):
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The grouped matmul's kernels: vLLM's ``fused_moe_kernel`` (forward and dX) and our own dW kernel, with the
block plan both read, computed on the device from group sizes that are traced values.

* ``fused_moe_kernel`` is loaded from the installed vLLM (``vllm/model_executor/layers/fused_moe/fused_moe.py``,
  Apache-2.0) by ``tritonplug.kernels_of``, never copied. Its launcher, vLLM's
  ``invoke_fused_moe_triton_kernel``, is ported in :func:`invoke_fused_moe_triton_kernel` (the unquantised
  path; the notice below is vLLM's). The kernel multiplies the rows of ``A`` that ``sorted_token_ids`` names,
  block by block, by the expert that ``expert_ids`` names for the block: row ``r`` of ``A`` is read as
  ``A[r // top_k]`` and written to ``C[r]``. So the permutation of tokens to expert order is fused into the
  kernel's loads (``top_k`` > 1: each token read once per expert it is routed to, never copied).
* :func:`grouped_matmul_dw_kernel` is ours (vLLM has no backward): ``dW[e] = A[rows of e]^T @ dC[rows of e]``,
  one program per (expert, tile of dW), looping over the expert's rows through the same plan;
  :func:`grouped_matmul_dw_rows_kernel` the same for rows already in group order (``grouped_matmul``), reading
  them directly.
* :func:`block_plan` is vLLM's ``moe_align_block_size`` (a CUDA op there) written in ``jnp``: each expert's
  rows padded to a multiple of ``BLOCK_SIZE_M``, the rows no expert holds after them (written zeros). Sizes are
  traced, so the kernels' grids are sized by the bound on the padded rows,
  ``(cdiv(rows, BLOCK_SIZE_M) + experts + 1) * BLOCK_SIZE_M``, and programs past the
  last expert's padded rows exit at once.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

import tritonplug

VLLM_MODULE = "vllm.model_executor.layers.fused_moe.fused_moe"

#: vLLM's kernel needs its own alignment block as a call constant (the plan depends on it), so autotuning
#: chooses the tile's columns, depth, grouping, warps and stages, not its rows.
FORWARD_CONFIGS = [
    triton.Config({"BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 16}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16}, num_warps=8, num_stages=4),
    # (the widest tiles won at 64 and 128 experts, bench/moe_kernels.py run 13: two more of that width)
    triton.Config({"BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 16}, num_warps=8, num_stages=6),
]
DW_CONFIGS = [
    triton.Config({"BLOCK_SIZE_K": 128, "BLOCK_SIZE_N": 128, "BLOCK_ROWS": 64}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_SIZE_K": 128, "BLOCK_SIZE_N": 256, "BLOCK_ROWS": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_SIZE_K": 64, "BLOCK_SIZE_N": 128, "BLOCK_ROWS": 64}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_SIZE_K": 128, "BLOCK_SIZE_N": 128, "BLOCK_ROWS": 32}, num_warps=4, num_stages=5),
    triton.Config({"BLOCK_SIZE_K": 128, "BLOCK_SIZE_N": 128, "BLOCK_ROWS": 128}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_SIZE_K": 128, "BLOCK_SIZE_N": 256, "BLOCK_ROWS": 32}, num_warps=8, num_stages=4),
    # (the largest tile of 64 rows won at 64 and 128 experts, run 13: fewer, longer programs)
    triton.Config({"BLOCK_SIZE_K": 128, "BLOCK_SIZE_N": 256, "BLOCK_ROWS": 64}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_SIZE_K": 256, "BLOCK_SIZE_N": 128, "BLOCK_ROWS": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_SIZE_K": 256, "BLOCK_SIZE_N": 128, "BLOCK_ROWS": 64}, num_warps=8, num_stages=4),
]
#: On the CPU every kernel is translated to XLA ops; one small configuration (the CPU runs the first).
CPU_FORWARD_CONFIGS = [triton.Config({"BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1})]
CPU_DW_CONFIGS = [triton.Config({"BLOCK_SIZE_K": 32, "BLOCK_SIZE_N": 32, "BLOCK_ROWS": 16})]


#: Whether jaxlib's runtime autotunes on the device (every configuration timed at the call's first run). Off by
#: default: on an H200 a jitted ``grouped_matmul`` autotuned that way hit ``CUDA_ERROR_ILLEGAL_ADDRESS`` inside
#: jaxlib's autotuner (``triton_kernels.cc``, ``cuEventSynchronize``) in processes that had run other XLA programs
#: first, while each configuration alone, and the same kernel launched by Triton on torch tensors under every
#: configuration, ran right (``bench/results/moe-h200/README.md``). Off, each launch asks for ``autotune="first"``:
#: a call runs its tuning record's configuration (``tritonplug.tune`` times each as a program of its own), or the
#: first of its list untuned.
ON_DEVICE_AUTOTUNE = False


def autotune_mode() -> str:
    """The launches' ``autotune`` option (``triton_call``'s): see :data:`ON_DEVICE_AUTOTUNE`."""
    return "runtime" if ON_DEVICE_AUTOTUNE else "first"


#: The shared memory a configuration may ask for: the tiles of ``A`` and ``B`` that its software pipeline holds,
#: ``num_stages`` of each. Hopper allows 227 KiB a block; 224 KiB leaves Triton its own scratch. (Ampere allows
#: 163 KiB: lower it there.)
SHARED_MEMORY_BYTES = 224 * 1024


def _itemsize(array) -> int:
    """Bytes per element of a JAX shape record (``dtype`` a name) or a torch tensor (``torch.float32``)."""
    return jnp.dtype(str(array.dtype).removeprefix("torch.")).itemsize


def _fitting(configs, tile_elements, itemsize: int):
    """``configs`` with each one's ``num_stages`` lowered until its pipeline fits :data:`SHARED_MEMORY_BYTES`, in
    order, without repeats: the configurations are written for 2-byte inputs, and an fp32 call's tiles are twice
    that (vLLM's first configuration at 128 rows asked for 256 KiB in fp32 on an H200)."""
    out, seen = [], set()
    for config in configs:
        stages = config.num_stages
        while stages > 1 and stages * tile_elements(config.kwargs) * itemsize > SHARED_MEMORY_BYTES:
            stages -= 1
        fitted = triton.Config(dict(config.kwargs), num_warps=config.num_warps, num_stages=stages)
        key = (tuple(sorted(config.kwargs.items())), config.num_warps, stages)
        if key not in seen:
            seen.add(key)
            out.append(fitted)
    return out


def fit_forward_configs(configs, named_args, **kwargs):
    """``fused_moe_kernel``'s ``early_config_prune``: :func:`_fitting` for its ``A`` and ``B`` tiles."""
    rows = named_args["BLOCK_SIZE_M"]
    return _fitting(configs, lambda c: (rows + c["BLOCK_SIZE_N"]) * c["BLOCK_SIZE_K"], _itemsize(named_args["a_ptr"]))


def fit_dw_configs(configs, named_args, **kwargs):
    """The dW kernel's ``early_config_prune``: :func:`_fitting` for its tiles of ``A`` and ``dC``."""
    return _fitting(configs, lambda c: (c["BLOCK_SIZE_K"] + c["BLOCK_SIZE_N"]) * c["BLOCK_ROWS"],
                    _itemsize(named_args["a_ptr"]))


def vllm_kernels():
    """vLLM's fused-MoE module, its kernels loaded from source (torch is never imported)."""
    return tritonplug.kernels_of(VLLM_MODULE, use_import=False)


_TUNED: dict[bool, tuple[object, object, object]] = {}


def tuned_kernels(on_cpu: bool):
    """``(forward, dw, dw_rows)``: vLLM's kernel and our two, each under ``triton.autotune`` with its
    configurations."""
    if on_cpu not in _TUNED:
        fwd, dw = (CPU_FORWARD_CONFIGS, CPU_DW_CONFIGS) if on_cpu else (FORWARD_CONFIGS, DW_CONFIGS)

        def tuned_dw(kernel):
            return triton.autotune(configs=dw, key=["K", "N"], prune_configs_by={
                "early_config_prune": fit_dw_configs})(kernel)

        _TUNED[on_cpu] = (
            triton.autotune(configs=fwd, key=["N", "K", "EM"], prune_configs_by={
                "early_config_prune": fit_forward_configs})(vllm_kernels().fused_moe_kernel),
            tuned_dw(grouped_matmul_dw_kernel), tuned_dw(grouped_matmul_dw_rows_kernel))
    return _TUNED[on_cpu]


@triton.jit
def grouped_matmul_dw_kernel(a_ptr, b_ptr, c_ptr, sorted_token_ids_ptr, expert_offsets_ptr, K, N, num_valid_tokens,
                             stride_am, stride_ak, stride_bm, stride_bn, stride_ce, stride_ck, stride_cn,
                             top_k: tl.constexpr, BLOCK_SIZE_K: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                             BLOCK_ROWS: tl.constexpr):
    """``C[e] = A[rows of e // top_k]^T @ B[rows of e]``: rows of expert ``e`` are the plan's padded positions
    ``expert_offsets[e] .. expert_offsets[e + 1]``; a padding position (id ``num_valid_tokens``) adds nothing,
    and an expert without rows writes zeros."""
    pid = tl.program_id(0)
    expert = tl.program_id(1).to(tl.int64)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    offs_k = (pid // num_pid_n) * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
    offs_n = (pid % num_pid_n) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    start = tl.load(expert_offsets_ptr + expert)
    end = tl.load(expert_offsets_ptr + expert + 1)
    acc = tl.zeros((BLOCK_SIZE_K, BLOCK_SIZE_N), dtype=tl.float32)
    for row in range(start, end, BLOCK_ROWS):
        offs_row = row + tl.arange(0, BLOCK_ROWS)
        ids = tl.load(sorted_token_ids_ptr + offs_row, mask=offs_row < end, other=num_valid_tokens).to(tl.int64)
        valid = ids < num_valid_tokens
        a = tl.load(a_ptr + (ids // top_k)[None, :] * stride_am + offs_k[:, None] * stride_ak,
                    mask=valid[None, :] & (offs_k[:, None] < K), other=0.0)
        b = tl.load(b_ptr + ids[:, None] * stride_bm + offs_n[None, :] * stride_bn,
                    mask=valid[:, None] & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    c_ptrs = c_ptr + expert * stride_ce + offs_k[:, None] * stride_ck + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_k[:, None] < K) & (offs_n[None, :] < N))


@triton.jit
def grouped_matmul_dw_rows_kernel(a_ptr, b_ptr, c_ptr, group_ends_ptr, K, N, stride_am, stride_ak, stride_bm,
                                  stride_bn, stride_ce, stride_ck, stride_cn, BLOCK_SIZE_K: tl.constexpr,
                                  BLOCK_SIZE_N: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    """:func:`grouped_matmul_dw_kernel` for rows already in group order (``ragged_dot``'s ``lhs``): the rows of
    group ``e`` are ``group_ends[e - 1] .. group_ends[e]`` of ``A`` and ``B`` themselves, read without the plan's
    row ids."""
    pid = tl.program_id(0)
    expert = tl.program_id(1)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    offs_k = (pid // num_pid_n) * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
    offs_n = (pid % num_pid_n) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    start = tl.load(group_ends_ptr + expert - 1, mask=expert > 0, other=0).to(tl.int64)
    end = tl.load(group_ends_ptr + expert).to(tl.int64)
    acc = tl.zeros((BLOCK_SIZE_K, BLOCK_SIZE_N), dtype=tl.float32)
    for row in range(start, end, BLOCK_ROWS):
        offs_row = row + tl.arange(0, BLOCK_ROWS)
        in_group = offs_row < end
        a = tl.load(a_ptr + offs_row[None, :] * stride_am + offs_k[:, None] * stride_ak,
                    mask=in_group[None, :] & (offs_k[:, None] < K), other=0.0)
        b = tl.load(b_ptr + offs_row[:, None] * stride_bm + offs_n[None, :] * stride_bn,
                    mask=in_group[:, None] & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    c_ptrs = c_ptr + expert.to(tl.int64) * stride_ce + offs_k[:, None] * stride_ck + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_k[:, None] < K) & (offs_n[None, :] < N))


@dataclasses.dataclass(frozen=True)
class BlockPlan:
    """Where each expert's rows go, block by block (vLLM's ``moe_align_block_size`` outputs, plus offsets).

    ``sorted_token_ids[p]``: the row (of ``top_k``-expanded rows) at padded position ``p``, or ``num_rows`` for
    padding; ``expert_ids[b]``: the expert of block ``b``, ``-1`` for the rows no group holds (written zeros);
    ``num_tokens_post_padded``: ``(1,)``, the padded rows in use, those included; ``expert_offsets``:
    ``(experts + 1,)``, each expert's first padded position (and the end of the last); ``group_ends``:
    ``(experts,)``, each group's end in the rows as given, which ``in_order`` plans (rows already sorted by group,
    ``ragged_dot``'s) use to read a group's rows directly (:func:`grouped_matmul_dw_rows_kernel`).
    """

    sorted_token_ids: jax.Array
    expert_ids: jax.Array
    num_tokens_post_padded: jax.Array
    expert_offsets: jax.Array
    group_ends: jax.Array
    num_rows: int
    block_size_m: int
    in_order: bool

    @property
    def padded_rows(self) -> int:
        return self.sorted_token_ids.shape[0]


jax.tree_util.register_dataclass(
    BlockPlan, data_fields=["sorted_token_ids", "expert_ids", "num_tokens_post_padded", "expert_offsets",
                            "group_ends"],
    meta_fields=["num_rows", "block_size_m", "in_order"])


def block_size_m(rows: int, experts: int, on_cpu: bool) -> int:
    """The alignment block: large where experts hold many rows, small where padding would cost more. At 128
    experts of 512 rows (Qwen3's shape) a 128-row block measured faster than a 64-row one in each kernel despite
    its padding (forward 1.35× cuBLAS against 1.50×, dX 1.44× against 1.93×: ``bench/moe_kernels.py``, run 18)."""
    if on_cpu:
        return 16
    per_expert = rows / max(experts, 1)
    return 128 if per_expert >= 256 else 64 if per_expert >= 96 else 32 if per_expert >= 24 else 16


def block_plan(group_sizes: jax.Array, num_rows: int, block_m: int, order: jax.Array | None = None) -> BlockPlan:
    """The plan for ``num_rows`` rows in groups of ``group_sizes`` (traced), in order (``order=None``: the rows
    are already sorted by group, as ``ragged_dot`` takes them) or ``order[i]``: the row at sorted position
    ``i``. Sizes past ``num_rows`` are cut, as the rows end. The rows past ``sum(group_sizes)`` belong to no
    group: the plan places them after the last group in blocks of expert ``-1``, for which vLLM's kernel writes
    zeros, so every row of a result is written and its buffer needs no zero fill (``tritonplug.empty``)."""
    experts = group_sizes.shape[0]
    ends = jnp.minimum(jnp.cumsum(group_sizes.astype(jnp.int32)), num_rows)
    sizes = jnp.diff(ends, prepend=0)
    # the groups, then the rows no group holds as one more group (index ``experts``)
    every = jnp.concatenate([sizes, (num_rows - ends[-1:]).astype(sizes.dtype)])
    starts = jnp.cumsum(every) - every
    padded_ends = jnp.cumsum((every + block_m - 1) // block_m * block_m)
    offsets = jnp.concatenate([jnp.zeros((1,), jnp.int32), padded_ends]).astype(jnp.int32)
    bound = (triton.cdiv(num_rows, block_m) + experts + 1) * block_m
    position = jnp.arange(bound, dtype=jnp.int32)
    group = jnp.searchsorted(padded_ends, position, side="right", method="compare_all")
    group_c = jnp.minimum(group, experts)
    within = position - offsets[group_c]
    valid = (group <= experts) & (within < every[group_c])
    source = jnp.where(valid, starts[group_c] + within, 0)
    rows = source if order is None else order.astype(jnp.int32)[source]
    sorted_ids = jnp.where(valid, rows, num_rows).astype(jnp.int32)
    block_group = group[::block_m]
    expert_ids = jnp.where(block_group < experts, block_group, -1).astype(jnp.int32)
    return BlockPlan(sorted_ids, expert_ids, padded_ends[-1:].astype(jnp.int32), offsets[:experts + 1], ends,
                     num_rows, block_m, order is None)


def fused_moe_launch(A, B, C, topk_weights, plan: BlockPlan, mul_routed_weight: bool, top_k: int, compute_type,
                     transpose_b: bool = False):
    """``(grid, args, kwargs)`` of one ``fused_moe_kernel`` launch, in vLLM's order, for row-major ``A``/``B``/``C`` of
    any array library (JAX here, torch in ``bench/moe_torch.py``'s launch by Triton itself): ``B`` is
    ``(experts, K, N)`` as ``ragged_dot`` holds it (vLLM's is ``(experts, N, K)``: the strides say which), or with
    ``transpose_b`` ``(experts, N, K)``, which multiplies by each expert's transpose (dX). The quantisation, bias
    and tensor-descriptor branches are off."""
    M = A.shape[0]
    num_tokens = M * top_k
    EM = plan.padded_rows
    _, K, N = B.shape
    stride_bk, stride_bn = N, 1
    if transpose_b:
        K, N, stride_bk, stride_bn = N, K, 1, N  # B[e]^T: its rows are B[e]'s columns
    grid = lambda META: (triton.cdiv(EM, plan.block_size_m) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
    args = (A, B, C, None, None, None, topk_weights,
            plan.sorted_token_ids, plan.expert_ids, plan.num_tokens_post_padded,
            N, K, EM, num_tokens,
            A.shape[1], 1, K * N, stride_bk, stride_bn, C.shape[-1], 1,
            0, 0, 0, 0, 0, 0, 0,
            0, 0)
    kwargs = dict(MUL_ROUTED_WEIGHT=mul_routed_weight, top_k=top_k, compute_type=compute_type,
                  use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
                  naive_block_assignment=False, HAS_BIAS=False, BLOCK_SIZE_M=plan.block_size_m, SPLIT_K=1,
                  SWAP_AB=False, USE_TD=False)
    return grid, args, kwargs


def invoke_fused_moe_triton_kernel(A, B, C, topk_weights, plan: BlockPlan, mul_routed_weight: bool, top_k: int,
                                   compute_type, on_cpu: bool, transpose_b: bool = False):
    """vLLM's ``invoke_fused_moe_triton_kernel``, ported: the unquantised path (:func:`fused_moe_launch`).

    Changed from vLLM's: ``A``/``B``/``C`` are JAX arrays (``C``: a ``tritonplug.zeros``/``empty`` placeholder,
    which the launch returns written); the configuration comes from ``triton.autotune`` instead of vLLM's tuned
    JSON files; ``EM`` is the plan's bound (sizes are traced).
    """
    forward = tuned_kernels(on_cpu)[0]
    grid, args, kwargs = fused_moe_launch(A, B, C, topk_weights, plan, mul_routed_weight, top_k, compute_type,
                                          transpose_b)
    return tritonplug.launch(forward)[grid](*args, **kwargs, autotune=autotune_mode())


def uses_dw_rows(plan: BlockPlan, top_k: int) -> bool:
    """Whether dW reads each group's rows directly (:func:`grouped_matmul_dw_rows_kernel`: rows in group order,
    one per token) rather than through the plan's row ids (:func:`grouped_matmul_dw_kernel`). The direct reads
    measured 1.0-1.5x cuBLAS where the row ids measured 1.8-2.2x (``bench/moe_kernels.py``, docs/moe.md)."""
    return plan.in_order and top_k == 1


def dw_launch(a, dc, c, plan: BlockPlan, experts: int, top_k: int):
    """``(grid, args, kwargs)`` of one dW launch writing ``c`` ``(experts, K, N)``, for row-major arrays of any
    library: :func:`grouped_matmul_dw_rows_kernel`'s where :func:`uses_dw_rows`, else
    :func:`grouped_matmul_dw_kernel`'s."""
    K, N = a.shape[1], dc.shape[1]
    grid = lambda META: (triton.cdiv(K, META["BLOCK_SIZE_K"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]), experts)  # noqa: E731
    if uses_dw_rows(plan, top_k):
        return grid, (a, dc, c, plan.group_ends, K, N, K, 1, N, 1, K * N, N, 1), {}
    args = (a, dc, c, plan.sorted_token_ids, plan.expert_offsets, K, N, plan.num_rows, K, 1, N, 1, K * N, N, 1)
    return grid, args, {"top_k": top_k}


def dw_kernel(plan: BlockPlan, top_k: int):
    """The (untuned) kernel :func:`dw_launch` launches."""
    return grouped_matmul_dw_rows_kernel if uses_dw_rows(plan, top_k) else grouped_matmul_dw_kernel


#: Whether a dW whose rows are not in group order (the MoE layer's: tokens read through the router's order)
#: first copies them into the plan's padded group order and reads them there (:func:`in_group_order`), rather
#: than through the row ids. Read when a program is traced (``bench/moe.py --parts layer`` times both).
GATHER_DW_ROWS = True


def in_group_order(a, dc, plan: BlockPlan, top_k: int):
    """``(a', dc', plan')``: the rows of ``a`` (one per token: row ``r`` of ``dc`` pairs with ``a[r // top_k]``)
    and of ``dc`` copied to the plan's padded positions, zeros at the padding, and the in-order plan whose group
    ``e`` is positions ``expert_offsets[e] .. expert_offsets[e + 1]``. The copies cost one pass over both; the
    row-id dW cost 0.4-0.8x cuBLAS's dW more than the same rows read in order (``bench/moe_kernels.py``)."""
    ids = plan.sorted_token_ids  # the padding's id: num_rows, past dc's rows
    a = jnp.take(a, jnp.where(ids < plan.num_rows, ids // top_k, a.shape[0]), axis=0, mode="fill", fill_value=0)
    dc = jnp.take(dc, ids, axis=0, mode="fill", fill_value=0)
    ends = plan.expert_offsets[1:]
    return a, dc, dataclasses.replace(plan, group_ends=ends, num_rows=plan.padded_rows, in_order=True)


def grouped_dw(a, dc, plan: BlockPlan, experts: int, top_k: int, on_cpu: bool):
    """``dW[e] = a[rows of e // top_k]^T @ dc[rows of e]``, ``(experts, a.shape[1], dc.shape[1])`` in ``a``'s dtype."""
    _, dw, dw_rows = tuned_kernels(on_cpu)
    c = tritonplug.empty(experts, a.shape[1], dc.shape[1], dtype=a.dtype)
    if GATHER_DW_ROWS and not uses_dw_rows(plan, top_k):
        a, dc, plan = in_group_order(a, dc, plan, top_k)
        top_k = 1
    grid, args, kwargs = dw_launch(a, dc, c, plan, experts, top_k)
    kernel = dw_rows if uses_dw_rows(plan, top_k) else dw
    return tritonplug.launch(kernel)[grid](*args, **kwargs, autotune=autotune_mode())
