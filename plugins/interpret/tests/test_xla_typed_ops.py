"""The XLA translator's front: TTIR read once into typed ops, and the one pointer-lane evaluator's views.

The module text below is written as Triton 3.9 prints a canonicalised kernel (a copy kernel with a
loop over four blocks); the tests check the typed fields every pass reads instead of the op's text,
and that the windows and bounds views of the evaluator's result are right for the launch's buffers.
"""

from __future__ import annotations

import numpy as np
from tritonplug_interpret.xla import lane_rules, lanes
from tritonplug_interpret.xla.ttir import parse_module, program_axis, walk
from tritonplug_interpret.xla.windows import Axis, windows

TTIR = """
module {
  tt.func public @copy(%arg0: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %arg1: !tt.ptr<f32>, %arg2: i32) \
attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c4_i32 = arith.constant 4 : i32
    %c512_i32 = arith.constant 512 : i32
    %cst = arith.constant dense<128> : tensor<128xi32>
    %cst_0 = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %0 = tt.get_program_id x : i32
    %1 = arith.muli %0, %c512_i32 : i32
    %2 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %3 = tt.splat %1 : i32 -> tensor<128xi32>
    %4 = arith.addi %3, %2 : tensor<128xi32>
    %5 = tt.splat %arg0 : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>>
    %6 = tt.addptr %5, %4 : tensor<128x!tt.ptr<f32>>, tensor<128xi32>
    %7:2 = scf.for %arg3 = %c0_i32 to %c4_i32 step %c1_i32 iter_args(%arg4 = %cst_0, %arg5 = %6) \
-> (tensor<128xf32>, tensor<128x!tt.ptr<f32>>)  : i32 {
      %12 = tt.load %arg5 : tensor<128x!tt.ptr<f32>>
      %13 = arith.addf %arg4, %12 : tensor<128xf32>
      %14 = tt.addptr %arg5, %cst : tensor<128x!tt.ptr<f32>>, tensor<128xi32>
      scf.yield %13, %14 : tensor<128xf32>, tensor<128x!tt.ptr<f32>>
    }
    %8 = tt.splat %arg2 : i32 -> tensor<128xi32>
    %9 = arith.cmpi slt, %4, %8 : tensor<128xi32>
    %10 = tt.splat %arg1 : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>>
    %11 = tt.addptr %10, %4 : tensor<128x!tt.ptr<f32>>, tensor<128xi32>
    tt.store %11, %7#0, %9 : tensor<128x!tt.ptr<f32>>
    tt.return
  }
}
""".replace("\\\n", "")


def _function():
    return parse_module(TTIR)["copy"]


def _op(fn, name):
    return next(op for op in walk(fn.body) if op.name == name)


def test_headers_are_typed_fields():
    fn = _function()
    loop = _op(fn, "scf.for")
    header = loop.loop
    assert (header.iv, header.lower, header.upper, header.step) == ("%arg3", "%c0_i32", "%c4_i32", "%c1_i32")
    assert loop.loop.iter_args == (("%arg4", "%cst_0"), ("%arg5", "%6"))
    assert loop.result_types == ("tensor<128xf32>", "tensor<128x!tt.ptr<f32>>")
    assert loop.results == ["%7#0", "%7#1"]
    assert _op(fn, "arith.cmpi").keyword == "slt"
    assert program_axis(_op(fn, "tt.get_program_id")) == 0
    assert _op(fn, "tt.make_range").int_attr("end") == 128
    assert [op.int_value for op in fn.body.ops[:5]] == [0, 1, 4, 512, 128]
    assert _op(fn, "tt.splat").result_types == ("tensor<128xi32>",)
    assert fn.args[0] == ("%arg0", "!tt.ptr<f32>")


def test_ops_key_by_identity():
    fn = _function()
    a, b = fn.body.ops[0], fn.body.ops[1]
    assert len({a: 1, b: 2}) == 2 and a != b


def _found(fn, programs: int, n: int):
    zero = np.zeros((), np.int64)
    pointers = {"%arg0": lanes.Lanes((), 0, zero), "%arg1": lanes.Lanes((), 1, zero)}
    pointers["%arg2"] = lanes.Lanes((), None, np.asarray(n, np.int64))
    return lanes.analyse(fn, pointers, (programs, 1, 1))


def test_one_evaluator_views():
    fn = _function()
    found = _found(fn, 3, 1500)
    load = _op(fn, "tt.load")
    # the loop's load: 3 programs x 4 trips of 128 lanes, 512 apart per program and 128 per trip
    assert sorted(found.loads[load].starts.tolist()) == sorted(512 * p + 128 * t for p in range(3) for t in range(4))
    ld = found.loads[load]
    assert lanes.within(ld.lanes, ld.starts, (128,), 1536) and not lanes.within(ld.lanes, ld.starts, (128,), 1535)
    assert found.trips[_op(fn, "scf.for")] == 4
    store = _op(fn, "tt.store")
    slices = windows(fn, found, 3)
    window = slices[store]
    assert (window.start, window.axes) == (0, (Axis(512, 3, 3), Axis(1, 128, 128)))
    assert load not in slices       # not top level: a strided view's window, not a grid-wide slice


def test_every_rule_is_one_table_entry():
    # the ops of pointer arithmetic the evaluator knows, each taught once
    for name in ("tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.make_range", "arith.addi",
                 "arith.muli", "arith.subi", "tt.get_program_id", "arith.constant"):
        assert callable(lane_rules.RULES[name])
    assert lane_rules.SOURCES <= set(lane_rules.RULES)
