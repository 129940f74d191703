"""``examples/moe``: ``grouped_matmul`` (``jax.lax.ragged_dot``'s op on vLLM's ``fused_moe_kernel`` and our dW
kernel), ``gathered_matmul`` (the permutation fused, ``top_k`` > 1) and ``block_plan``, against ``ragged_dot``
and NumPy references written here, on the CPU; lowered for sm_90 without a GPU where the cuda plugin is.

Needs vLLM 0.33.0 installed (``tox -e corpus`` installs it with ``--no-deps``: no torch); its kernel is read
from the installed source by ``tritonplug.kernels_of``. Skipped where vLLM is not installed.

Shapes are fixed (each new one compiles the translated kernels again); group sizes, the values that change,
are traced, so every drawn example runs through one compiled function.
"""

from __future__ import annotations

import functools
import importlib.machinery
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import for_backend
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.moe import kernels  # noqa: E402
from examples.moe.grouped import gathered_matmul, on_cpu  # noqa: E402
from examples.moe.ops import grouped_matmul  # noqa: E402  (the public name, issue 36)

pytestmark = pytest.mark.skipif(importlib.machinery.PathFinder.find_spec("vllm") is None,  # finds, never imports
                                reason="vllm is not installed (tox -e corpus installs vllm==0.33.0 with --no-deps)")

#: rows (not a multiple of the CPU's block of 16 rows), depth, columns (neither a multiple of the CPU's 32), groups
M, K, N, G = 40, 24, 20, 4
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _normal(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


LHS, RHS, WEIGHTS = _normal(0, M, K), _normal(1, G, K, N), _normal(2, M, N)


def numpy_ragged_dot(lhs, rhs, sizes) -> np.ndarray:
    """Group by group, in float64: rows ``[start, start + size)`` times ``rhs[e]``; the rows after, zero."""
    lhs, rhs = (np.asarray(jnp.asarray(x, jnp.float32), np.float64) for x in (lhs, rhs))
    out, start = np.zeros((lhs.shape[0], rhs.shape[2])), 0
    for e, size in enumerate(np.asarray(sizes)):
        out[start:start + size] = lhs[start:start + size] @ rhs[e]
        start += size
    return out


@functools.partial(jax.jit, static_argnames="preferred_element_type")
def _grouped(lhs, rhs, sizes, preferred_element_type=None):
    return grouped_matmul(lhs, rhs, sizes, preferred_element_type=preferred_element_type)


def _weighted_sum_grad(matmul):
    return jax.jit(jax.grad(lambda lhs, rhs, sizes, w: jnp.sum(matmul(lhs, rhs, sizes).astype(jnp.float32) * w),
                            argnums=(0, 1)))


_GRAD, _RAGGED_GRAD = _weighted_sum_grad(grouped_matmul), _weighted_sum_grad(jax.lax.ragged_dot)


@st.composite
def group_sizes(draw, rows: int = M) -> np.ndarray:
    """Sizes of 1 or ``G`` groups summing to at most ``rows`` (cut points drawn, then differenced): zeros where
    two cuts meet, a sum under ``rows`` where the last cut falls short."""
    groups = draw(st.sampled_from([1, G]))
    cuts = sorted(draw(st.lists(st.integers(0, rows), min_size=groups, max_size=groups)))
    return np.diff([0, *cuts]).astype(np.int32)


FORWARD_EXAMPLES = ([0, 0, M, 0], [M, 0, 0, 0], [7, 0, 12, 0], [0, 0, 0, 0], [16, 3, 16, 5], [M], [M - 9])
TOLERANCES = {"float32": {"rtol": 1e-5, "atol": 1e-5}, "bfloat16": {"rtol": 2e-2, "atol": 5e-2}}


def _forward_examples(test):
    for sizes in FORWARD_EXAMPLES:
        test = example(sizes=np.array(sizes, np.int32))(test)
    return test


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@settings(SETTINGS, max_examples=12)
@_forward_examples
@given(sizes=group_sizes())
def test_forward_matches_ragged_dot_and_numpy(dtype, sizes):
    groups, total = len(sizes), int(sizes.sum())
    lhs, rhs = jnp.asarray(LHS, dtype), jnp.asarray(RHS[:groups], dtype)
    out = _grouped(lhs, rhs, jnp.asarray(sizes))
    assert out.shape == (M, N) and out.dtype == jnp.dtype(dtype)
    got = np.asarray(out.astype(jnp.float32))
    np.testing.assert_allclose(got, numpy_ragged_dot(lhs, rhs, sizes), **TOLERANCES[dtype])
    want = np.asarray(jax.lax.ragged_dot(lhs, rhs, jnp.asarray(sizes)).astype(jnp.float32))
    np.testing.assert_allclose(got, want, **TOLERANCES[dtype])
    assert not np.any(got[total:]), f"rows past sum(group_sizes) = {total} are not zero"


def test_group_sizes_are_traced_not_baked_into_the_compiled_function():
    f = jax.jit(lambda lhs, rhs, sizes: grouped_matmul(lhs, rhs, sizes))
    lhs, rhs = jnp.asarray(LHS), jnp.asarray(RHS)
    first, second = np.array([10, 0, 20, 10], np.int32), np.array([3, 30, 0, 2], np.int32)
    out_first, out_second = np.asarray(f(lhs, rhs, first)), np.asarray(f(lhs, rhs, second))
    assert f._cache_size() == 1  # one trace and compile served both
    np.testing.assert_allclose(out_first, numpy_ragged_dot(LHS, RHS, first), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out_second, numpy_ragged_dot(LHS, RHS, second), rtol=1e-5, atol=1e-5)
    assert not np.allclose(out_first, out_second)


GRADIENT_CASES = {"empty-group": [10, 0, 20, 10], "empty-group-sum-under-m": [5, 0, 17, 3], "one-group": [0, 0, M, 0],
                  "all-empty": [0, 0, 0, 0]}


def test_gradients_match_ragged_dot():
    """One test for the cases (one compile, on one pytest-xdist worker)."""
    for case, sizes in GRADIENT_CASES.items():
        sizes = np.array(sizes, np.int32)
        args = (jnp.asarray(LHS), jnp.asarray(RHS), jnp.asarray(sizes), jnp.asarray(WEIGHTS))
        (dlhs, drhs), (want_dlhs, want_drhs) = _GRAD(*args), _RAGGED_GRAD(*args)
        np.testing.assert_allclose(dlhs, want_dlhs, rtol=1e-5, atol=1e-5, err_msg=f"{case}: d lhs")
        np.testing.assert_allclose(drhs, want_drhs, rtol=1e-5, atol=1e-5, err_msg=f"{case}: d rhs")
        dlhs, drhs = np.asarray(dlhs), np.asarray(drhs)
        assert not np.any(dlhs[sizes.sum():]), f"{case}: rows past sum(group_sizes) have a gradient"
        for e in np.flatnonzero(sizes == 0):
            assert not np.any(drhs[e]), f"{case}: group {e} has no rows, yet its dW is not exactly zero"


@pytest.mark.parametrize(("in_order", "gather"), [(True, False), (False, False), (False, True)],
                         ids=["rows-kernel", "plan-kernel", "plan-rows-copied"])
def test_dw_row_blocks_longer_than_an_experts_padded_rows(monkeypatch, in_order, gather):
    """The GPU's dW configurations walk 32-64 rows at a time over experts padded to 16: the mask on the rows
    (``offs_row < end``) keeps the next expert's rows out. The CPU's (16 rows, the CPU's block) never needs it.
    Both dW kernels: rows in group order (``grouped_matmul``'s plan) and rows through the plan's ids (an explicit
    order, here the identity), read there or first copied into the plan's padded group order."""
    import triton

    forward = kernels.tuned_kernels(True)[0]
    config = triton.Config({"BLOCK_SIZE_K": 32, "BLOCK_SIZE_N": 32, "BLOCK_ROWS": 64})
    dw_kernels = [triton.autotune(configs=[config], key=["K", "N"])(k)
                  for k in (kernels.grouped_matmul_dw_kernel, kernels.grouped_matmul_dw_rows_kernel)]
    monkeypatch.setitem(kernels._TUNED, True, (forward, *dw_kernels))
    monkeypatch.setattr(kernels, "GATHER_DW_ROWS", gather)
    sizes = np.array([10, 0, 20, 7], np.int32)
    plan = kernels.block_plan(jnp.asarray(sizes), M, 16, order=None if in_order else jnp.arange(M))
    assert kernels.uses_dw_rows(plan, 1) is in_order
    dw = np.asarray(kernels.grouped_dw(jnp.asarray(LHS), jnp.asarray(WEIGHTS), plan, G, 1, True))
    ends = np.cumsum(sizes)
    for e, (start, end) in enumerate(zip(ends - sizes, ends, strict=True)):
        want = LHS[start:end].astype(np.float64).T @ WEIGHTS[start:end]
        np.testing.assert_allclose(dw[e], want, rtol=1e-5, atol=1e-5, err_msg=f"dW of group {e}")


def test_preferred_element_type_float32_with_bfloat16_inputs():
    sizes = np.array([10, 0, 20, 7], np.int32)
    lhs, rhs = jnp.asarray(LHS, jnp.bfloat16), jnp.asarray(RHS, jnp.bfloat16)
    out = _grouped(lhs, rhs, jnp.asarray(sizes), preferred_element_type=jnp.float32)
    assert out.dtype == jnp.float32
    # bf16 products are exact in fp32 and accumulation is fp32: no bf16 rounding of the result
    np.testing.assert_allclose(out, numpy_ragged_dot(lhs, rhs, sizes), rtol=1e-5, atol=1e-5)
    want = jax.lax.ragged_dot(lhs, rhs, jnp.asarray(sizes), preferred_element_type=jnp.float32)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


F32 = {"lhs": jnp.ones((8, 4)), "rhs": jnp.ones((2, 4, 3)), "group_sizes": jnp.array([3, 5], jnp.int32)}
BAD_ARGUMENTS = [  # (id, arguments replaced, exception, names its message gives: the first in backquotes)
    ("lhs-3d", {"lhs": jnp.ones((2, 4, 4))}, ValueError, ["lhs"]),
    ("rhs-2d", {"rhs": jnp.ones((4, 3))}, ValueError, ["rhs"]),
    ("k-mismatch", {"rhs": jnp.ones((2, 5, 3))}, ValueError, ["rhs", "lhs"]),
    ("sizes-length", {"group_sizes": jnp.array([3, 2, 3], jnp.int32)}, ValueError, ["group_sizes"]),
    ("sizes-float", {"group_sizes": jnp.array([3.0, 5.0])}, TypeError, ["group_sizes"]),
    ("sizes-list", {"group_sizes": [3, 5]}, TypeError, ["group_sizes"]),
    ("mixed-dtypes", {"rhs": jnp.ones((2, 4, 3), jnp.bfloat16)}, TypeError, ["lhs", "rhs"]),
    ("int8", {"lhs": jnp.ones((8, 4), jnp.int8), "rhs": jnp.ones((2, 4, 3), jnp.int8)}, TypeError, ["lhs"]),
    ("int8-rhs", {"rhs": jnp.ones((2, 4, 3), jnp.int8)}, TypeError, ["rhs"]),
    ("group-offset", {"group_offset": jnp.array([1], jnp.int32)}, NotImplementedError, ["group_offset"]),
    ("preferred-int32", {"preferred_element_type": jnp.int32}, TypeError, ["preferred_element_type"]),
]


@pytest.mark.parametrize(("replaced", "error", "names"), [case[1:] for case in BAD_ARGUMENTS],
                         ids=[case[0] for case in BAD_ARGUMENTS])
def test_a_bad_argument_raises_at_the_call_naming_it(replaced, error, names):
    with pytest.raises(error) as info:
        grouped_matmul(**{**F32, **replaced})
    message = str(info.value)
    assert f"`{names[0]}`" in message and all(name in message for name in names[1:]), message


TOKENS, TOP_K = 12, 2


def _gathered(a, b, order, sizes, weights, grad=False):
    def run(a, b):
        plan = kernels.block_plan(sizes, TOKENS * TOP_K, kernels.block_size_m(TOKENS * TOP_K, G, True), order=order)
        return gathered_matmul(a, b, plan, TOP_K, jnp.dtype(jnp.float32), on_cpu())

    if grad:
        return jax.grad(lambda a, b: jnp.sum(run(a, b) * weights), argnums=(0, 1))(a, b)
    return run(a, b)


#: one compiled ``_gathered`` per dW path (``kernels.GATHER_DW_ROWS`` is read when a program is traced)
_GATHERED = {gather: jax.jit(_gathered, static_argnames="grad") for gather in (True, False)}


@pytest.mark.parametrize("gather", [True, False], ids=["dw-on-copied-rows", "dw-through-row-ids"])
@settings(SETTINGS, max_examples=4)
@example(experts=[0, 1, 3] * (TOKENS * TOP_K // 3))  # expert 2 gets no rows
@given(experts=st.lists(st.integers(0, G - 1), min_size=TOKENS * TOP_K, max_size=TOKENS * TOP_K))
def test_gathered_matmul_top_k_in_router_order(gather, experts):
    """Row ``r`` is ``a[r // top_k] @ b[experts[r]]``; the rows are read in ``argsort(experts)`` order. dW both
    ways: on the rows copied into group order (``kernels.in_group_order``) and through the plan's row ids."""
    experts = np.array(experts)
    order = np.argsort(experts).astype(np.int32)
    sizes = np.bincount(experts, minlength=G).astype(np.int32)
    a, b, w = LHS[:TOKENS], RHS, WEIGHTS[:TOKENS * TOP_K]
    token = np.arange(TOKENS * TOP_K) // TOP_K
    want = np.einsum("rk,rkn->rn", a[token].astype(np.float64), b[experts])
    want_da = np.zeros((TOKENS, K))
    np.add.at(want_da, token, np.einsum("rn,rkn->rk", w.astype(np.float64), b[experts]))  # top_k copies summed
    want_db = np.zeros((G, K, N))
    np.add.at(want_db, experts, np.einsum("rk,rn->rkn", a[token].astype(np.float64), w))

    args = (jnp.asarray(a), jnp.asarray(b), jnp.asarray(order), jnp.asarray(sizes), jnp.asarray(w))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "GATHER_DW_ROWS", gather)
        np.testing.assert_allclose(_GATHERED[gather](*args), want, rtol=1e-5, atol=1e-5)
        da, db = _GATHERED[gather](*args, grad=True)
    np.testing.assert_allclose(da, want_da, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, want_db, rtol=1e-5, atol=1e-5)


def numpy_block_plan(sizes, num_rows, block_m, order):
    """vLLM's ``moe_align_block_size`` as a loop, the rows no group holds placed last in blocks of expert ``-1``:
    ``(sorted_token_ids, expert_ids, expert_offsets, num_tokens_post_padded)``."""
    rows = np.arange(num_rows) if order is None else np.asarray(order)
    bound = (-(-num_rows // block_m) + len(sizes) + 1) * block_m
    ids, blocks, offsets, start = [], [], [0], 0
    for e, size in enumerate([*sizes, num_rows]):  # the last: every row left
        size = min(int(size), num_rows - start)  # sizes past the rows are cut
        padded = -(-size // block_m) * block_m
        ids += [*rows[start:start + size], *[num_rows] * (padded - size)]
        blocks += [e if e < len(sizes) else -1] * (padded // block_m)
        offsets.append(offsets[-1] + padded)
        start += size
    ids += [num_rows] * (bound - len(ids))
    blocks += [-1] * (bound // block_m - len(blocks))
    return np.array(ids), np.array(blocks), np.array(offsets[:-1]), offsets[-1]


_PLAN = jax.jit(kernels.block_plan, static_argnums=(1, 2))


@settings(SETTINGS, max_examples=25)
@example(sizes=[0, 0, 0, 0], block_m=16, permute=False)
@example(sizes=[M, 0, 0, 0], block_m=16, permute=True)
@example(sizes=[16, 0, 32, 0], block_m=16, permute=False)
@example(sizes=[30, 30, 0, 5], block_m=32, permute=True)  # sum past the rows: cut
@given(sizes=st.lists(st.integers(0, M), min_size=G, max_size=G), block_m=st.sampled_from([16, 32]),
       permute=st.booleans())
def test_block_plan_matches_a_numpy_loop(sizes, block_m, permute):
    order = np.random.default_rng(sum(sizes)).permutation(M).astype(np.int32) if permute else None
    plan = _PLAN(jnp.array(sizes, jnp.int32), M, block_m, None if order is None else jnp.asarray(order))
    ids, expert_ids, offsets = (np.asarray(x) for x in (plan.sorted_token_ids, plan.expert_ids, plan.expert_offsets))
    want_ids, want_blocks, want_offsets, want_used = numpy_block_plan(sizes, M, block_m, order)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(expert_ids, want_blocks)
    np.testing.assert_array_equal(offsets, want_offsets)
    assert np.asarray(plan.num_tokens_post_padded).tolist() == [want_used]
    assert (plan.num_rows, plan.block_size_m) == (M, block_m)
    # the properties the kernels rely on, stated directly
    used = ids[:want_used]
    valid = used[used != M]
    rows = np.arange(M) if order is None else order
    assert sorted(valid.tolist()) == list(range(M))  # every row once within the used blocks: all written
    assert not np.any(ids[want_used:] != M)  # past them, padding only
    placed = min(sum(sizes), M)
    for position, row in enumerate(ids[:want_used]):
        expert = expert_ids[position // block_m]
        if row != M:  # a grouped row in its group's block; a row no group holds in a block of expert -1
            assert (expert >= 0) == (row in set(rows[:placed].tolist())), (position, row, expert)
    assert not np.any(np.diff(offsets) % block_m)
    for block, expert in enumerate(expert_ids):
        first = block * block_m
        assert expert == (np.searchsorted(offsets, first, side="right") - 1 if first < offsets[-1] else -1)


@for_backend("cuda")
def test_lowers_for_sm90_without_a_gpu(monkeypatch):
    """Forward, dX and dW make a CUDA program on a CPU machine (with the CPU's configurations: ``on_cpu()``
    asks the default backend)."""
    from tritonplug.inspection import kernel_calls

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    spec = jax.ShapeDtypeStruct
    args = (spec((M, K), jnp.bfloat16), spec((G, K, N), jnp.bfloat16), spec((G,), jnp.int32))
    forward = jax.jit(lambda lhs, rhs, sizes: grouped_matmul(lhs, rhs, sizes)).trace(*args)
    text = forward.lower(lowering_platforms=("cuda",)).as_text()
    assert [call["name"] for call in kernel_calls(text)] == ["fused_moe_kernel"]
    assert "triton_kernel_call" in text
    grad = jax.grad(lambda lhs, rhs, sizes: jnp.sum(grouped_matmul(lhs, rhs, sizes).astype(jnp.float32)),
                    argnums=(0, 1))
    text = jax.jit(grad).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert sorted(call["name"] for call in kernel_calls(text)) == ["fused_moe_kernel", "fused_moe_kernel",
                                                                   "grouped_matmul_dw_rows_kernel"]


def _shared_memory(node) -> list[int]:
    """Every ``shared_mem_bytes`` in a decoded kernel call."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "shared_mem_bytes"] + [
            x for v in node.values() for x in _shared_memory(v)]
    return [x for v in node for x in _shared_memory(v)] if isinstance(node, list) else []


@for_backend("cuda")
def test_every_gpu_configuration_fits_hopper_shared_memory_in_fp32(monkeypatch):
    """The GPU configurations are written for 2-byte inputs; in fp32 their pipelines are pruned to fit (vLLM's first
    configuration at 128 rows asked for 256 KiB on an H200). Every configuration lowered, as on-device autotuning
    lowers them; bf16's are kept as written."""
    from tritonplug.inspection import kernel_calls

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    monkeypatch.setattr(kernels, "ON_DEVICE_AUTOTUNE", True)
    rows, k, n, g = 512, 256, 256, 2
    spec = jax.ShapeDtypeStruct

    def loss(a, b, sizes):
        plan = kernels.block_plan(sizes, rows, 128)
        return jnp.sum(gathered_matmul(a, b, plan, 1, jnp.dtype(jnp.float32), False))

    args = (spec((rows, k), jnp.float32), spec((g, k, n), jnp.float32), spec((g,), jnp.int32))
    text = jax.jit(jax.grad(loss, argnums=(0, 1))).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    calls = kernel_calls(text)
    assert sorted(c["name"] for c in calls) == ["fused_moe_kernel", "fused_moe_kernel",
                                                "grouped_matmul_dw_rows_kernel"]
    for call in calls:
        sizes = _shared_memory(call)
        assert len(call["autotuned_kernel_call"]["configs"]) > 1 and sizes
        assert max(sizes) <= 227 * 1024, (call["name"], sizes)
    bf16 = {"a_ptr": spec((rows, k), jnp.bfloat16), "BLOCK_SIZE_M": 128}
    written = lambda configs: [(c.kwargs, c.num_warps, c.num_stages) for c in configs]  # noqa: E731
    assert written(kernels.fit_forward_configs(kernels.FORWARD_CONFIGS, bf16)) == written(kernels.FORWARD_CONFIGS)
    assert written(kernels.fit_dw_configs(kernels.DW_CONFIGS, bf16)) == written(kernels.DW_CONFIGS)
