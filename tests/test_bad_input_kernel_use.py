"""Malformed calls refused by what the kernel does with its arguments, and by the backend's limits.

Every backend runs Triton's front end when lowering (the CPU backend too, as for sm_90), so a scalar
where the kernel dereferences a pointer, an array where it expects a scalar, a ``tl.arange`` extent
that is not a power of two, or a ``try:`` in the kernel is refused the same way on the CPU as for
CUDA: a ``TypeError``/``ValueError`` naming the argument (or constexpr), the kernel and the line,
before anything is compiled or cached. Options and grids are checked the same way on every backend.
"""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from bad_input_support import (
    BOTH,
    OMIT,
    PLATFORM_MARKS,
    SPEC,
    UNKNOWN_OPTION,
    UNKNOWN_OPTION_STAGE,
    Case,
    N,
    another_backends_option_refused,
    call,
    check_refused,
    params,
    skip_without_backends,
    use_fresh_cache,
)
from kernels import add_kernel

import tritonplug
from tritonplug.compile.backends import capability_problem
from tritonplug.inspection import kernel_calls
from tritonplug.records import BackendInfo

HERE = Path(__file__).resolve()
KERNELS = re.escape(str(HERE.parent / "kernels.py"))


@triton.jit
def strided_kernel(x_ptr, stride, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride))


@triton.jit
def load_through(ptr, offs):
    return tl.load(ptr + offs)


@triton.jit
def nested_load_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, load_through(x_ptr, offs) + load_through(y_ptr, offs))


@triton.jit
def atomic_kernel(x_ptr, acc_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.atomic_add(acc_ptr + offs, tl.load(x_ptr + offs)))


@triton.jit
def scalar_bound_kernel(x_ptr, n, out_ptr):
    offs = tl.arange(0, n)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def window_kernel(x_ptr, out_ptr, START: tl.constexpr, END: tl.constexpr):
    offs = tl.arange(START, END)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def try_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    try:
        value = tl.load(x_ptr + offs)
    except Exception:
        value = tl.zeros((BLOCK,), tl.float32)
    tl.store(out_ptr + offs, value)


@triton.jit
def lambda_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    double = lambda v: v * 2  # noqa: E731
    tl.store(out_ptr + offs, double(tl.load(x_ptr + offs)))


@triton.heuristics({"BLOCK": lambda args: 100})
@triton.jit
def heuristic_block_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 96}), triton.Config({"BLOCK": 128})], key=[])
@triton.jit
def tuned_block_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_ctas=16)], key=[])
@triton.jit
def tuned_ctas_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=64)], key=[])
@triton.jit
def tuned_warps_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


def line_of(text: str, path: Path = HERE, after: str = "") -> int:
    """The first line holding ``text`` (not a ``def``) after the first line holding ``after``."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i, line in enumerate(lines[start:], start + 1) if text in line and "def " not in line)


def at(text: str, path: Path = HERE, after: str = "") -> str:
    """The location the error names, as a regular expression."""
    return rf'\(File "{re.escape(str(path))}", line {line_of(text, path, after)}\)'


KERNELS_PY = HERE.parent / "kernels.py"
LOAD_LINE = at("tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask)", KERNELS_PY)
MASK_LINE = at("mask = offs < n", KERNELS_PY)
ARANGE_LINE = at("offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", KERNELS_PY)


def as_pointer(name: str, value: str, where: str = LOAD_LINE, kernel: str = "add_kernel") -> str:
    return (rf"argument '{name}' of kernel '{kernel}' is used as a pointer by the kernel {where}, but a scalar "
            rf"was passed \({value}\); pass an array for it")


def as_scalar(name: str, bound_to: str, where: str = MASK_LINE, kernel: str = "add_kernel") -> str:
    return (rf"argument '{name}' of kernel '{kernel}' is used as a scalar by the kernel {where}, but it was bound "
            rf"to {bound_to}")


def arange(names: str, values: str, expected: str, where: str = ARANGE_LINE, kernel: str = "add_kernel") -> str:
    return rf"{names} of kernel '{kernel}' \({values}\) bound a tl\.arange {where} that needs {expected}"


def own(fn, x, *args, out_shape=SPEC, grid=(1,), **kw):
    return tritonplug.triton_call(x, *args, kernel=fn, out_shape=out_shape, grid=grid, **kw)


CASES: dict[str, Case] = {
    # a scalar where the kernel dereferences a pointer
    "float_for_pointer": Case(lambda x, y: call(x, 3.0), TypeError, as_pointer("y_ptr", r"3\.0, fp32"), BOTH),
    "int_for_pointer": Case(lambda x, y: call(x, 3), TypeError, as_pointer("y_ptr", "3, i32"), BOTH),
    "one_for_pointer": Case(lambda x, y: call(x, 1), TypeError, as_pointer("y_ptr", "1, i32"), BOTH),
    "bool_for_pointer": Case(lambda x, y: call(x, True), TypeError, as_pointer("y_ptr", "True, i1"), BOTH),
    "numpy_float_for_pointer": Case(lambda x, y: call(x, np.float32(2)), TypeError,
                                    as_pointer("y_ptr", r"2\.0, fp32"), BOTH),
    "int64_for_first_pointer": Case(lambda x, y: call(2**40, y), TypeError, as_pointer("x_ptr", "1099511627776, i64"),
                                    BOTH),
    "scalar_pointer_by_keyword": Case(lambda x, y: tritonplug.triton_call(x, y_ptr=0.5, n=N, kernel=add_kernel,
                                                                          out_shape=SPEC, grid=2, BLOCK=128),
                                      TypeError, as_pointer("y_ptr", r"0\.5, fp32"), BOTH),
    "scalar_pointer_in_nested_function": Case(
        lambda x, y: own(nested_load_kernel, x, 2.0, BLOCK=N), TypeError,
        as_pointer("y_ptr", r"2\.0, fp32", at("load_through(x_ptr, offs) + load_through(y_ptr, offs)"),
                   "nested_load_kernel"), BOTH),
    "scalar_for_atomic_pointer": Case(
        lambda x, y: own(atomic_kernel, x, 0, BLOCK=N), TypeError,
        as_pointer("acc_ptr", "0, i32", at("tl.atomic_add(acc_ptr + offs"), "atomic_kernel"), BOTH),
    # an array where the kernel expects a scalar
    "array_for_scalar": Case(lambda x, y: call(x, y, x), TypeError, as_scalar("n", "an array of fp32"), BOTH),
    "int_array_for_scalar": Case(lambda x, y: call(x, y, jnp.arange(N, dtype=jnp.int32)), TypeError,
                                 as_scalar("n", "an array of i32"), BOTH),
    "zero_d_array_for_scalar": Case(lambda x, y: call(x, y, jnp.asarray(N)), TypeError,
                                    as_scalar("n", "an array of i32"), BOTH),
    "array_for_stride": Case(lambda x, y: own(strided_kernel, x, y, BLOCK=N), TypeError,
                             as_scalar("stride", "an array of fp32", at("tl.load(x_ptr + offs * stride)"),
                                       "strided_kernel"), BOTH),
    "output_buffer_lands_on_scalar": Case(
        lambda x, y: tritonplug.triton_call(x, kernel=add_kernel, out_shape=(SPEC, SPEC, SPEC), grid=2, BLOCK=128),
        TypeError, as_scalar("n", "an output buffer of out_shape") + r"; pass the scalar as an operand", BOTH),
    # tl.arange extents from constexprs
    "block_not_power_of_two": Case(lambda x, y: call(x, y, BLOCK=100), ValueError,
                                   arange("tl.constexpr 'BLOCK'", "BLOCK=100", "a power-of-two extent"), BOTH),
    "block_96": Case(lambda x, y: call(x, y, BLOCK=96), ValueError,
                     arange("tl.constexpr 'BLOCK'", "BLOCK=96", "a power-of-two extent"), BOTH),
    "block_zero": Case(lambda x, y: call(x, y, BLOCK=0), ValueError,
                       arange("tl.constexpr 'BLOCK'", "BLOCK=0", "an end greater than its start"), BOTH),
    "block_negative": Case(lambda x, y: call(x, y, BLOCK=-128), ValueError,
                           arange("tl.constexpr 'BLOCK'", "BLOCK=-128", r"bounds between 0 and 2\*\*32 - 1"), BOTH),
    "block_too_large": Case(lambda x, y: call(x, y, BLOCK=2**21), ValueError,
                            arange("tl.constexpr 'BLOCK'", "BLOCK=2097152", r"at most 1048576 elements"), BOTH),
    "window_not_power_of_two": Case(
        lambda x, y: own(window_kernel, x, START=16, END=64), ValueError,
        arange("tl.constexprs 'START', 'END'", "START=16, END=64", "a power-of-two extent",
               at("offs = tl.arange(START, END)"), "window_kernel"), BOTH),
    "window_reversed": Case(
        lambda x, y: own(window_kernel, x, START=64, END=0), ValueError,
        arange("tl.constexprs 'START', 'END'", "START=64, END=0", "an end greater than its start",
               at("offs = tl.arange(START, END)"), "window_kernel"), BOTH),
    "runtime_scalar_bounds_arange": Case(
        lambda x, y: own(scalar_bound_kernel, x, 64), TypeError,
        rf"argument 'n' of kernel 'scalar_bound_kernel' bounds a tl\.arange {at('offs = tl.arange(0, n)')}, whose "
        r"bounds must be compile-time constants, but it is a runtime argument; declare it `n: tl\.constexpr`", BOTH),
    "heuristic_block_not_power_of_two": Case(
        lambda x, y: call(x, y, kernel=heuristic_block_kernel, BLOCK=OMIT), ValueError,
        arange("tl.constexpr 'BLOCK'", "BLOCK=100", "a power-of-two extent",
               at("offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", after="def heuristic_block_kernel"),
               "heuristic_block_kernel"), BOTH),
    "autotune_block_not_power_of_two": Case(
        lambda x, y: call(x, y, kernel=tuned_block_kernel, BLOCK=OMIT), ValueError,
        arange("tl.constexpr 'BLOCK'", "BLOCK=96", "a power-of-two extent",
               at("offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", after="def tuned_block_kernel"),
               "tuned_block_kernel"), BOTH),
    # kernel source the GPU front end refuses is refused on the CPU too
    "kernel_with_try": Case(
        lambda x, y: own(try_kernel, x, BLOCK=N), tritonplug.KernelSourceError,
        rf"kernel 'try_kernel' {at('    try:')}:(.|\n)*unsupported AST node type: Try", BOTH),
    "kernel_with_lambda": Case(
        lambda x, y: own(lambda_kernel, x, BLOCK=N), tritonplug.KernelSourceError,
        rf"kernel 'lambda_kernel' {at('double = lambda v')}:(.|\n)*unsupported AST node type: Lambda", BOTH),
    # options, validated the same on every backend
    "backend_option_unknown": Case(lambda x, y: call(x, y, backend_options={"bogus": 1}), ValueError,
                                   rf"{UNKNOWN_OPTION} \['bogus'\]", UNKNOWN_OPTION_STAGE),
    "backend_option_misspelt": Case(lambda x, y: call(x, y, backend_options={"maxnregs": 64}), ValueError,
                                    rf"{UNKNOWN_OPTION} \['maxnregs'\]", UNKNOWN_OPTION_STAGE),
    "backend_option_of_another_backend": Case(lambda x, y: call(x, y, backend_options={"waves_per_eu": 2}),
                                              ValueError, *another_backends_option_refused("waves_per_eu")),
    "num_ctas_three": Case(lambda x, y: call(x, y, num_ctas=3), ValueError,
                           r"num_ctas must be a power of two >= 1, got 3"),
    "num_ctas_negative": Case(lambda x, y: call(x, y, num_ctas=-2), ValueError,
                              r"num_ctas must be a power of two >= 1, got -2"),
    "num_ctas_string": Case(lambda x, y: call(x, y, num_ctas="2"), TypeError, r"num_ctas must be an int, got str"),
    "num_ctas_sixteen": Case(lambda x, y: call(x, y, num_ctas=16), ValueError,
                             r"num_ctas must be one of \(1, 2, 4, 8\).*sm_90.*got 16", BOTH),
    "num_ctas_4_on_sm80": Case(lambda x, y: call(x, y, num_ctas=4, compute_capability=80), ValueError,
                               r"num_ctas=4 needs thread-block clusters .*sm_80, where num_ctas must be 1", ("cuda",)),
    "num_stages_string": Case(lambda x, y: call(x, y, num_stages="3"), TypeError,
                              r"num_stages must be an int, got str"),
    "num_warps_64": Case(lambda x, y: call(x, y, num_warps=64), ValueError,
                         r"num_warps must be a power of two between 1 and 32, got 64", BOTH),
    "autotune_config_num_ctas_sixteen": Case(lambda x, y: call(x, y, kernel=tuned_ctas_kernel, BLOCK=OMIT),
                                             ValueError, r"num_ctas must be one of \(1, 2, 4, 8\).*got 16", BOTH),
    "autotune_config_num_warps_64": Case(lambda x, y: call(x, y, kernel=tuned_warps_kernel, BLOCK=OMIT), ValueError,
                                         r"num_warps must be a power of two between 1 and 32, got 64", BOTH),
    # grids a GPU cannot launch
    "grid_y_70000": Case(lambda x, y: call(x, y, grid=(1, 70000)), ValueError,
                         r"grid \(1, 70000, 1\) is too large for backend '(interpret|cuda)': it launches at most 65535 "
                         r"program instances along y \(limits x, y, z: \(2147483647, 65535, 65535\)\), got 70000",
                         BOTH),
    "grid_z_65536": Case(lambda x, y: call(x, y, grid=(1, 1, 65536)), ValueError,
                         r"at most 65535 program instances along z .*got 65536", BOTH),
    "grid_callable_y_too_large": Case(lambda x, y: call(x, y, grid=lambda meta: (2, 2**20)), ValueError,
                                      r"grid \(2, 1048576, 1\) is too large .*along y", BOTH),
}

pytestmark = skip_without_backends


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_state):
    return use_fresh_cache(tmp_path / "kernel-cache", monkeypatch, fresh_state)


@pytest.mark.parametrize(("name", "stage", "platform"), params(CASES))
def test_malformed_call_is_refused_early_and_caches_nothing(name: str, stage: str, platform: str,
                                                            fresh_cache: Path) -> None:
    check_refused(CASES[name], stage, platform, fresh_cache)


def test_the_suites_hold_at_least_eighty_malformed_calls() -> None:
    import test_bad_input

    assert len(CASES) + len(test_bad_input.CASES) >= 100
    assert len(params(CASES)) + len(params(test_bad_input.CASES)) >= 150


@pytest.mark.parametrize("platform", [pytest.param(p, marks=PLATFORM_MARKS[p]) for p in BOTH])
def test_the_largest_grid_and_cluster_are_accepted(platform: str, fresh_cache: Path) -> None:
    """The limits are the limits: 65,535 in y and z and num_ctas=8 lower (for CUDA, into the kernel call)."""
    def f(x, y):
        return call(x, y, grid=(2**31 - 1, 65535, 65535), num_ctas=8)
    text = jax.jit(f).trace(SPEC, SPEC).lower(lowering_platforms=(platform,)).as_text()
    if platform == "cuda":
        (launch,) = kernel_calls(text)
        assert [launch["kernel_call"][f"grid_{axis}"] for axis in "012"] == [2**31 - 1, 65535, 65535]
        assert launch["kernel_call"]["kernel"]["num_ctas"] == 8


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("option_names", ["num_warps"], r"option_names=\['num_warps'\]; expected None or a tuple of str"),
    ("option_names", ("num_warps", 3), r"expected None or a tuple of str"),
    ("max_grid", (65535, 65535), r"max_grid=\(65535, 65535\); expected None or a tuple of three positive ints"),
    ("max_grid", (0, 1, 1), r"expected None or a tuple of three positive ints"),
])
def test_malformed_capabilities_are_reported(field: str, value, problem: str) -> None:
    info = BackendInfo("broken", ("cpu",), "1", **{field: value})
    assert re.search(problem, capability_problem(info) or "")


def test_an_unknown_option_is_refused_at_the_call_naming_the_closest_known_one() -> None:
    from tritonplug.calls.options import CallOptions, check_option_names

    gpus = [BackendInfo("a", ("cuda",), "1", option_names=("maxnreg", "num_warps")),
            BackendInfo("b", ("rocm",), "1", option_names=("waves_per_eu",))]
    options = CallOptions(grid=(1,), backend_options={"maxnregs": 64}).checked(1)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['maxnregs'\] \(did you mean 'maxnreg'\?\): no "
                                         r"installed backend \(a, b\) accepts them; the options they accept are "
                                         r"\['maxnreg', 'num_warps', 'waves_per_eu'\]"):
        check_option_names(options, gpus)
    check_option_names(CallOptions(grid=(1,), backend_options={"waves_per_eu": 2}).checked(1), gpus)
    check_option_names(options, [*gpus, BackendInfo("c", ("cpu",), "1")])  # c accepts what it likes
