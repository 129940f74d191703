"""A lane-wise kernel's block cut to its live lanes (:mod:`tritonplug_interpret.xla.live_block`; issue 38: SwiGLU's
5632 columns in a block of 8192, translated on the whole block, ran 1.4-1.7x XLA's own op inlined on the H200).

Each case runs a real Triton kernel on the XLA path against NumPy, its outputs holding ``OLD`` before the call (a
lane written that should not be shows), and reads the compiled HLO: a cut translation holds no array as wide as
the block and no pad. Kernels the cut must leave whole (a reduction over padded lanes, an access without a mask, a
range not starting at 0, a 2-D block) are checked to keep the block and their numbers.
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
from xla_hlo_support import compiled_hlo

import tritonplug
from tritonplug_interpret.xla import plan, ttir
from tritonplug_interpret.xla.program import BufferInfo

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
def _square_kernel(x_ptr, out_ptr, n, B: tl.constexpr):
    # a 2-D block, both dimensions B: only rank-1 blocks are cut
    r = tl.arange(0, B)[:, None]
    c = tl.arange(0, B)[None, :]
    mask = (r < n) & (c < n)
    tl.store(out_ptr + r * B + c, tl.load(x_ptr + r * B + c, mask=mask) + 1, mask=mask)


def test_a_two_dimensional_block_is_not_cut():
    b, n = 16, 11
    x = np.random.default_rng(7).standard_normal(b * b).astype(np.float32)
    (out,), hlo = _run(_square_kernel, (x,), (x.shape,), (1,), n, B=b)
    live = (np.arange(b)[:, None] < n) & (np.arange(b)[None, :] < n)
    np.testing.assert_allclose(out.reshape(b, b), np.where(live, x.reshape(b, b) + 1, OLD))


@triton.jit
def _two_blocks_kernel(x_ptr, out_ptr, n, width, BLOCK: tl.constexpr):
    # two blocks of different sizes (BLOCK and BLOCK // 2): only a function of one block size is cut
    at = tl.program_id(0) * width
    wide, half = tl.arange(0, BLOCK), tl.arange(0, BLOCK // 2)
    tl.store(out_ptr + at + wide, tl.load(x_ptr + at + wide, mask=wide < n) * 2, mask=wide < n)
    tl.store(out_ptr + at + BLOCK + half, tl.load(x_ptr + at + half, mask=half < n // 2) + 1, mask=half < n // 2)


def test_blocks_of_two_sizes_are_not_cut():
    rows, block, n, width = 2, 64, 50, 100
    x = np.random.default_rng(8).standard_normal(rows * width).astype(np.float32)
    (out,), hlo = _run(_two_blocks_kernel, (x,), (x.shape,), (rows,), n, width, BLOCK=block)
    x2, want = x.reshape(rows, width), np.full((rows, width), OLD, np.float32)
    want[:, :n] = x2[:, :n] * 2
    want[:, block:block + n // 2] = x2[:, :n // 2] + 1
    np.testing.assert_allclose(out.reshape(rows, width), want)
    assert _holds_block(hlo, block)


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
