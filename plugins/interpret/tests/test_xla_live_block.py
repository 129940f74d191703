"""A lane-wise kernel's block cut to its live lanes (:mod:`tritonplug_interpret.xla.live_block`; issue 38: SwiGLU's
5632 columns in a block of 8192, translated on the whole block, ran 1.10-1.12x XLA's op inlined on the H200).

Each case runs a real Triton kernel on the XLA path against NumPy (or the RoPE port's ``jnp`` reference), its
outputs holding ``OLD`` before the call (a lane written that should not be shows), and reads the compiled HLO: a
cut translation holds no array a dimension of which is as wide as the block. Rows narrower than their block
(drawn), stores of two widths, a square block, blocks of two sizes and RoPE's heads are cut; kernels the cut must
leave whole (a reduction over padded lanes, an access without a mask, a range not starting at 0, a constant
holding a value per lane) keep the block, and their numbers.
"""

from __future__ import annotations

import importlib
import importlib.util
import re

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tritonplug_interpret.xla import plan, ttir
from tritonplug_interpret.xla.program import BufferInfo
from xla_hlo_support import compiled_hlo

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret"), pytest.mark.usefixtures("fresh_xla_path")]
OLD = -7.0


def _run(kernel, inputs: tuple, outs: tuple, grid: tuple, *args, **constexprs) -> tuple[list[np.ndarray], str]:
    """``kernel(*inputs, *outs, *args)`` over ``grid`` on the XLA path, each output of shape ``outs[i]`` holding
    ``OLD`` before the call: the outputs and the compiled HLO."""
    def fn(*arrays):
        refs = [jax.new_ref(a) for a in arrays[len(inputs):]]
        tritonplug.triton_call(*arrays[:len(inputs)], *refs, *args, kernel=kernel, out_type=(), grid=grid,
                               **constexprs)
        return [r[...] for r in refs]

    arrays = (*inputs, *(np.full(shape, OLD, np.float32) for shape in outs))
    return [np.asarray(o) for o in jax.jit(fn)(*arrays)], compiled_hlo(fn, *arrays)


#: an array's type in HLO text: ``f32[3,64]``, ``pred[64]``, ``s32[]``
_ARRAY_TYPE = re.compile(r"\b(?:pred|[subf]\d+|bf16)\[([\d,]*)\]")


def _holds_block(hlo: str, block: int) -> bool:
    """Whether any array of ``hlo`` has a dimension ``block`` wide (the buffers' rows are of other widths)."""
    return any(str(block) in dims.split(",") for dims in _ARRAY_TYPE.findall(hlo))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


@triton.jit
def _gated_kernel(a_ptr, b_ptr, c_ptr, stride, n, BLOCK: tl.constexpr, N_CONST: tl.constexpr):
    # SwiGLU's form: one row per program, its first n of BLOCK lanes live (n a scalar, or constexpr when N_CONST)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    if N_CONST > 0:
        mask = cols < N_CONST
    else:
        mask = cols < n
    a = tl.load(a_ptr + row * stride + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(c_ptr + row * stride + cols, a * tl.sigmoid(a) * b, mask=mask)


@settings(max_examples=12, deadline=None)
@example(n=1, wider=True, gap=0, rows=3, constexpr=False)     # one live lane of two
@given(n=st.integers(1, 200), wider=st.booleans(), gap=st.integers(0, 9), rows=st.integers(1, 5),
       constexpr=st.booleans())
def test_a_row_narrower_than_its_block_is_computed_on_its_lanes(n, wider, gap, rows, constexpr):
    block = triton.next_power_of_2(n) * (2 if wider else 1)
    stride = n + gap
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal(rows * stride).astype(np.float32) for _ in range(2))
    (c,), hlo = _run(_gated_kernel, (a, b), (a.shape,), (rows,), stride, n, BLOCK=block,
                     N_CONST=n if constexpr else 0)
    want = np.full((rows, stride), OLD, np.float32)
    a2, b2 = a.reshape(rows, stride)[:, :n], b.reshape(rows, stride)[:, :n]
    want[:, :n] = a2 * _sigmoid(a2) * b2
    np.testing.assert_allclose(c.reshape(rows, stride), want, rtol=1e-5, atol=1e-6)
    if n < block and block not in (rows, stride, rows * stride):
        assert not _holds_block(hlo, block), "the translation kept the padded block"


def test_a_row_of_no_lanes_writes_nothing():
    """``n = 0``: every lane masked off in every program; the block is not cut to nothing."""
    rows, block = 2, 8
    a = np.random.default_rng(9).standard_normal(rows * block).astype(np.float32)
    (c,), hlo = _run(_gated_kernel, (a, a), (a.shape,), (rows,), block, 0, BLOCK=block, N_CONST=0)
    np.testing.assert_array_equal(c, np.full(a.shape, OLD, np.float32))
    assert not any("0" in dims.split(",") for dims in _ARRAY_TYPE.findall(hlo))


@triton.jit
def _two_stores_kernel(x_ptr, p_ptr, q_ptr, n1, n2, width, BLOCK: tl.constexpr, VALUE_MASK: tl.constexpr):
    # two stores under masks of different widths (n1 < n2): the block is cut to n2, the narrower mask kept
    at = tl.program_id(0) * width + tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + at, mask=cols < n2, other=3.0)
    tl.store(p_ptr + at, tl.where(cols < n1, x * 2, 7.0), mask=cols < n2)
    if VALUE_MASK:
        tl.store(q_ptr + at, x + 1, mask=(cols < n1) & (x > 0))
    else:
        tl.store(q_ptr + at, x + 1, mask=cols < n1)


@pytest.mark.parametrize("value_mask", [False, True], ids=["box", "box-and-values"])
def test_stores_of_different_widths_cut_the_block_to_the_widest(value_mask):
    rows, block, n1, n2, width = 3, 64, 20, 45, 50
    x = np.random.default_rng(5).standard_normal(rows * width).astype(np.float32)
    (p, q), hlo = _run(_two_stores_kernel, (x,), (x.shape, x.shape), (rows,), n1, n2, width, BLOCK=block,
                       VALUE_MASK=value_mask)
    cols = np.arange(width)[None, :]
    x2 = x.reshape(rows, width)
    np.testing.assert_allclose(p.reshape(rows, width), np.where(cols < n1, x2 * 2, np.where(cols < n2, 7.0, OLD)))
    live = (cols < n1) & ((x2 > 0) if value_mask else True)
    np.testing.assert_allclose(q.reshape(rows, width), np.where(live, x2 + 1, OLD))
    assert not _holds_block(hlo, block)


#: ``_whole_kernel``'s forms, none of which may be cut
SUM, UNMASKED_STORE, UNMASKED_LOAD, OFFSET_RANGE = range(4)


@triton.jit
def _whole_kernel(x_ptr, out_ptr, n, width, BLOCK: tl.constexpr, FORM: tl.constexpr):
    row = tl.program_id(0)
    if FORM == 3:
        cols = tl.arange(BLOCK, 2 * BLOCK) - BLOCK     # a range that does not start at 0
    else:
        cols = tl.arange(0, BLOCK)
    at = row * width + cols
    mask = cols < n
    if FORM == 2:
        x = tl.load(x_ptr + at)
    else:
        x = tl.load(x_ptr + at, mask=mask, other=1.0)
    if FORM == 0:
        x = x - tl.sum(x, axis=0)      # the padded lanes' ``other`` counts
    if FORM == 1:
        tl.store(out_ptr + at, x * 2)
    else:
        tl.store(out_ptr + at, x * 2, mask=mask)


@pytest.mark.parametrize("form", [SUM, UNMASKED_STORE, UNMASKED_LOAD, OFFSET_RANGE],
                         ids=["sum", "unmasked-store", "unmasked-load", "offset-range"])
def test_kernels_whose_padded_lanes_count_keep_their_block(form):
    rows, block, n, width = 3, 64, 37, 70     # rows 70 apart: the last 6 columns of each stay OLD
    x = np.random.default_rng(6).standard_normal(rows * width).astype(np.float32)
    (out,), hlo = _run(_whole_kernel, (x,), (x.shape,), (rows,), n, width, BLOCK=block, FORM=form)
    x2 = x.reshape(rows, width)[:, :block]
    cols = np.arange(block)[None, :]
    loaded = x2 if form == UNMASKED_LOAD else np.where(cols < n, x2, 1.0)
    if form == SUM:
        loaded = loaded - loaded.sum(axis=1, keepdims=True)
    want = np.full((rows, width), OLD, np.float32)
    want[:, :block] = loaded * 2 if form == UNMASKED_STORE else np.where(cols < n, loaded * 2, OLD)
    np.testing.assert_allclose(out.reshape(rows, width), want, rtol=1e-5, atol=1e-5)
    assert _holds_block(hlo, block)


@triton.jit
def _square_kernel(x_ptr, out_ptr, n, stride, B: tl.constexpr):
    # a square block: both dimensions of size B, cut to n on both
    r = tl.arange(0, B)[:, None]
    c = tl.arange(0, B)[None, :]
    mask = (r < n) & (c < n)
    tl.store(out_ptr + r * stride + c, tl.load(x_ptr + r * stride + c, mask=mask) + 1, mask=mask)


def test_a_square_block_is_cut_on_both_dimensions():
    b, n, stride, rows = 16, 11, 20, 24     # a buffer of 24 rows of 20: neither as wide nor as tall as the block
    x = np.random.default_rng(7).standard_normal(rows * stride).astype(np.float32)
    (out,), hlo = _run(_square_kernel, (x,), (x.shape,), (1,), n, stride, B=b)
    live = (np.arange(rows)[:, None] < n) & (np.arange(stride)[None, :] < n)
    np.testing.assert_allclose(out.reshape(rows, stride), np.where(live, x.reshape(rows, stride) + 1, OLD))
    assert not _holds_block(hlo, b)


@triton.jit
def _two_blocks_kernel(x_ptr, out_ptr, n, width, BLOCK: tl.constexpr, MASK_HALF: tl.constexpr):
    # two blocks of different sizes (BLOCK and BLOCK // 2), each cut to the lanes its accesses leave live; the
    # half block unmasked (MASK_HALF false) keeps its size whole, and the other is still cut
    at = tl.program_id(0) * width
    wide, half = tl.arange(0, BLOCK), tl.arange(0, BLOCK // 2)
    tl.store(out_ptr + at + wide, tl.load(x_ptr + at + wide, mask=wide < n) * 2, mask=wide < n)
    if MASK_HALF:
        tl.store(out_ptr + at + BLOCK + half, tl.load(x_ptr + at + half, mask=half < n // 2) + 1, mask=half < n // 2)
    else:
        tl.store(out_ptr + at + BLOCK + half, tl.load(x_ptr + at + half) + 1)


@pytest.mark.parametrize("mask_half", [True, False], ids=["both-masked", "half-unmasked"])
def test_blocks_of_two_sizes_are_each_cut_to_their_own_lanes(mask_half):
    rows, block, n, width = 2, 64, 50, 100
    x = np.random.default_rng(8).standard_normal(rows * width).astype(np.float32)
    (out,), hlo = _run(_two_blocks_kernel, (x,), (x.shape,), (rows,), n, width, BLOCK=block, MASK_HALF=mask_half)
    x2, want = x.reshape(rows, width), np.full((rows, width), OLD, np.float32)
    want[:, :n] = x2[:, :n] * 2
    written = n // 2 if mask_half else block // 2
    want[:, block:block + written] = x2[:, :written] + 1
    np.testing.assert_allclose(out.reshape(rows, width), want)
    assert not _holds_block(hlo, block) and _holds_block(hlo, block // 2) != mask_half


#: ``out[i] = x[i] + c[i]`` for the first 5 of 8 lanes, ``c`` the constant ``CONSTANT`` (TTIR as Triton prints it)
_TTIR = """module {
  tt.func public @k(%arg0: !tt.ptr<f32>, %arg1: !tt.ptr<f32>) attributes {noinline = false} {
    %cst = arith.constant CONSTANT : tensor<8xf32>
    %cst_0 = arith.constant dense<5> : tensor<8xi32>
    %0 = tt.make_range {end = 8 : i32, start = 0 : i32} : tensor<8xi32>
    %1 = arith.cmpi slt, %0, %cst_0 : tensor<8xi32>
    %2 = tt.splat %arg0 : !tt.ptr<f32> -> tensor<8x!tt.ptr<f32>>
    %3 = tt.addptr %2, %0 : tensor<8x!tt.ptr<f32>>, tensor<8xi32>
    %4 = tt.load %3, %1 : tensor<8x!tt.ptr<f32>>
    %5 = arith.addf %4, %cst : tensor<8xf32>
    %6 = tt.splat %arg1 : !tt.ptr<f32> -> tensor<8x!tt.ptr<f32>>
    %7 = tt.addptr %6, %0 : tensor<8x!tt.ptr<f32>>, tensor<8xi32>
    tt.store %7, %5, %1 : tensor<8x!tt.ptr<f32>>
    tt.return
  }
}"""


@pytest.mark.parametrize("constant,cut", [("dense<1.000000e+00>", True),
                                          ("dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]>", False)],
                         ids=["splat", "one-value-a-lane"])
def test_a_constant_of_a_value_per_lane_keeps_the_block(constant, cut):
    """A splat constant is the same on fewer lanes; a constant holding a value per lane is not (Triton folds few
    such, so the TTIR is written here)."""
    fn = ttir.parse_module(_TTIR.replace("CONSTANT", constant))["k"]
    f32 = np.dtype(np.float32)
    planned = plan.make(fn, {"%arg0": 0, "%arg1": 1}, [("%arg0", ("ptr", 0, "f32")), ("%arg1", ("ptr", 1, "f32"))],
                        [BufferInfo("x", f32, 8), BufferInfo("out", f32, 8)], (1, 1, 1))
    ends = [op.int_attr("end") for op in ttir.walk(planned.fn.body) if op.name == "tt.make_range"]
    assert ends == ([5] if cut else [8])


def test_liger_rope_with_heads_that_do_not_fill_their_blocks():
    """6 query heads in a block of 8 and 3 key heads in a block of 4 (the rotary half, 16 columns, fills its block):
    both head blocks cut, the numbers as the port's ``jnp`` reference."""
    if importlib.util.find_spec("liger_kernel") is None:
        pytest.skip("liger_kernel is not installed (tox's cpu and corpus envs install it)")
    port = importlib.import_module("ports.liger_rope")
    rng = np.random.default_rng(10)   # Hugging Face's layout: (batch, heads, seq, head_dim), cos/sin (1, seq, dim)
    q, k = rng.standard_normal((1, 6, 5, 32)).astype(np.float32), rng.standard_normal((1, 3, 5, 32)).astype(np.float32)
    angles = np.arange(5)[:, None] * rng.uniform(0.1, 1.0, 16)[None, :]
    cos = np.cos(np.concatenate([angles, angles], -1)).astype(np.float32)[None]
    sin = np.sin(np.concatenate([angles, angles], -1)).astype(np.float32)[None]

    hlo = compiled_hlo(port.liger_rope, q, k, cos, sin)
    assert not _holds_block(hlo, 8) and not _holds_block(hlo, 4)
    got, want = jax.jit(port.liger_rope)(q, k, cos, sin), port.rope_reference(q, k, cos, sin)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


def _swiglu_port():
    if importlib.util.find_spec("liger_kernel") is None:
        pytest.skip("liger_kernel is not installed (tox's cpu and corpus envs install it)")
    return importlib.import_module("ports.liger_swiglu")


@pytest.mark.parametrize("ffn", [5632, 3000])
def test_liger_swiglu_at_a_models_width_holds_no_padded_block(ffn):
    """Liger's SwiGLU forward and backward (the 1b config's 5632 columns in a block of 8192): no pad, nothing as
    wide as the block, numbers as NumPy's."""
    port = _swiglu_port()
    block = triton.next_power_of_2(ffn)
    rng = np.random.default_rng(ffn)
    a, b, dc = (rng.standard_normal((4, ffn)).astype(np.float32) for _ in range(3))

    def forward(a, b):
        return port.swiglu_forward(a, b)[2]

    def backward(a, b, dc):
        return port.swiglu_backward(a, b, dc)

    for hlo in (compiled_hlo(forward, a, b), compiled_hlo(backward, a, b, dc)):
        assert not _holds_block(hlo, block) and " pad(" not in hlo
    np.testing.assert_allclose(np.asarray(jax.jit(forward)(a, b)), a * _sigmoid(a) * b, rtol=1e-5, atol=1e-6)
    da, db = (np.asarray(v) for v in jax.jit(backward)(a, b, dc))
    s = _sigmoid(a)
    np.testing.assert_allclose(db, dc * a * s, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(da, dc * b * s * (1 + a * (1 - s)), rtol=1e-5, atol=1e-5)
