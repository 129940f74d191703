"""The interpret backend's runner and hooks, driven with hand-made Launch records (no JAX): operands
left unchanged, results written back, launch setup cached, wrong buffers refused; the plugin's compile
and make_kernel hooks. Numerics: ``test_interpret_runner_numerics.py``.
"""

from __future__ import annotations

import os

import interpret_helpers
import numpy as np
import pytest
from interpret_runner_kernels import add_kernel, copy_kernel, scribble_kernel
from interpret_runner_support import CHECK, RNG, cdiv, make_launch, read_only, run
from tritonplug_interpret import plugin
from tritonplug_interpret.runner import OutOfBoundsAccess, run_launch

from tritonplug.records import ArrayParam, CompileJob, ConstexprParam, HostKernel, Options, ScalarParam

# ----------------------------------------------------------------------------- operands

@CHECK
def test_operands_are_not_mutated(check):
    n, block = 100, 64
    x = read_only(RNG.standard_normal(n).astype(np.float32))
    writable = x.copy()
    out = np.zeros_like(x)
    for operand in (x, writable):
        run(scribble_kernel, (cdiv(n, block), ), [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"),
                                                  ConstexprParam(block)],
            ["x_ptr", "out_ptr", "n", "BLOCK"], [operand], [out], check)
        np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(writable, x)


def test_non_contiguous_result_is_written_back():
    n, block = 40, 64
    x = RNG.standard_normal(n).astype(np.float32)
    storage = np.zeros(2 * n, np.float32)
    out = storage[::2]
    run(copy_kernel, (1, ), [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(block)],
        ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out], check=True)
    np.testing.assert_array_equal(storage[::2], x)
    np.testing.assert_array_equal(storage[1::2], 0)


def test_launch_setup_is_cached():
    from tritonplug_interpret import runner

    x, out = np.zeros(4, np.float32), np.zeros(4, np.float32)
    params = [ArrayParam(0), ArrayParam(1), ScalarParam(4, "i32"), ConstexprParam(4)]
    launch = make_launch(copy_kernel, (1, ), params, ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out])
    assert runner.prepare(launch, False) is runner.prepare(launch, False)
    assert runner.prepare(launch, True) is not runner.prepare(launch, False)
    assert plugin.OutOfBoundsAccess is OutOfBoundsAccess and issubclass(OutOfBoundsAccess, IndexError)


def test_wrong_buffer_count_or_dtype_is_an_error():
    n = 8
    x, out = np.zeros(n, np.float32), np.zeros(n, np.float32)
    params = [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(8)]
    launch = make_launch(copy_kernel, (1, ), params, ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out])
    with pytest.raises(ValueError, match="1 operand"):
        run_launch(launch, [], [out], False)
    with pytest.raises(TypeError, match="float64"):
        run_launch(launch, [x.astype(np.float64)], [out], False)


# ----------------------------------------------------------------------------- plugin hooks

def test_compile_and_make_kernel(monkeypatch):
    target = plugin.tritonplug_detect_target("cpu", None, {})
    job = CompileJob("interpret", "add_kernel", target, Options(), "module {}", "ttir")
    binary = plugin.tritonplug_compile(job)
    assert (binary.kernel_name, binary.format, list(binary.images), dict(binary.metadata)) == \
        ("add_kernel", "ttir", ["ttir"], {})
    assert binary.images["ttir"].decode().startswith("module")  # canonicalised by Triton's passes
    n = 10
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(2, np.float32)
    params = [ArrayParam(0), ArrayParam(1), ScalarParam(n, "i32"), ConstexprParam(16)]
    launch = make_launch(copy_kernel, (1, ), params, ["x_ptr", "out_ptr", "n", "BLOCK"], [x], [out])
    for flag, raises in (("1", True), ("0", False)):
        monkeypatch.setenv(plugin.CHECK_VARIABLE, flag)
        kernel = plugin.tritonplug_make_kernel(target, binary, launch)
        assert isinstance(kernel, HostKernel) and kernel.launch is launch
        assert kernel.kernel_name == "copy_kernel"
        if raises:
            with pytest.raises(OutOfBoundsAccess, match="out_ptr"):
                kernel.run([x], [out])
        else:
            big = np.zeros(n, np.float32)  # the store stays inside: just check it runs unchecked
            plugin.tritonplug_make_kernel(target, binary, make_launch(
                copy_kernel, (1, ), launch.params, launch.arg_names, [x], [big])).run([x], [big])
            np.testing.assert_array_equal(big, x)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="kernels are already interpreted")
def test_kernels_are_plain_jit_functions():
    from triton.runtime.jit import JITFunction

    assert isinstance(add_kernel, JITFunction) and isinstance(interpret_helpers.scale_shift, JITFunction)
