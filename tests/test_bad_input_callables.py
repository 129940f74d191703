"""Malformed calls of the classes of issue 23, refused naming the culprit on every path.

User callables (grid, heuristics, ``early_config_prune``, ``zeroed_outputs``) run inside a guard that names
the callable, the kernel and the missing name; autotune configs may set only the kernel's constexprs;
constexprs of a type the kernel cannot use, descriptors and pointers confused, annotated scalars that do
not fit, 64-bit outputs without ``jax_enable_x64`` and empty grids are named at the call or when lowering
starts, on the CPU as for CUDA. A validation never depends on what ran before (the call memo keys types).
"""

from __future__ import annotations

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
    Case,
    N,
    call,
    check_refused,
    params,
    skip_without_backends,
)
from bad_input_support import use_fresh_cache as _use_fresh_cache

import tritonplug

HERE = Path(__file__).resolve()


@triton.jit
def dtype_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, DTYPE: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(DTYPE).to(tl.float32))


@triton.jit
def annotated_kernel(x_ptr, n: tl.int32, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def descriptor_kernel(d, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, d.load([0]))


@triton.heuristics({"BLOCK": lambda args: [128]})
@triton.jit
def heuristic_list_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.heuristics({"BLOCK": lambda args: args["BLOK"]})
@triton.jit
def heuristic_missing_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 128, "n": 5})], key=[])
@triton.jit
def config_sets_runtime_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOK": 128})], key=[])
@triton.jit
def config_misspelt_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.heuristics({"BLOK": lambda args: 128})
@triton.jit
def heuristic_misspelt_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.heuristics({"num_warps": lambda args: 2})
@triton.jit
def heuristic_warps_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


def prune_reading_a_missing_name(configs, named_args, **kwargs):
    return [c for c in configs if named_args["nn"] > 0]


@triton.autotune(configs=[triton.Config({"BLOCK": 128})], key=[],
                 prune_configs_by={"early_config_prune": prune_reading_a_missing_name})
@triton.jit
def pruned_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 128})], key=[], pre_hook=lambda args: args["x_ptr"].sum())
@triton.jit
def autotune_hook_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


def prune_returning_none(configs, named_args, **kwargs):
    return None


@triton.autotune(configs=[triton.Config({"BLOCK": 128})], key=[],
                 prune_configs_by={"early_config_prune": prune_returning_none})
@triton.jit
def prune_none_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.jit
def descriptor_2d_kernel(d, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, d.load([0, 0]))


def own(fn, *args, **kw):
    return tritonplug.triton_call(*args, kernel=fn, out_type=SPEC, grid=(1,), **kw)


def _line(text: str) -> int:
    return next(i for i, line in enumerate(HERE.read_text().splitlines(), 1) if text in line)


def _at(text: str) -> str:
    return rf'\(File "{HERE}", line {_line(text)}\)'


CONSTEXPR = r"tl\.constexpr 'BLOCK' of kernel 'add_kernel' was given "
CASES: dict[str, Case] = {
    # constexprs of a type the kernel cannot use, named with the type (and the value that compiles)
    "block_float": Case(lambda x, y: call(x, y, BLOCK=128.0), TypeError,
                        CONSTEXPR + r"128\.0 \(float\), which the kernel cannot use .*it compiles with BLOCK=128 "
                        r"\(int\)", BOTH),
    "block_string": Case(lambda x, y: call(x, y, BLOCK="128"), TypeError,
                         CONSTEXPR + r"'128' \(str\), .*BLOCK=128 \(int\)", BOTH),
    "block_one_element_tuple": Case(lambda x, y: call(x, y, BLOCK=(128,)), TypeError,
                                    CONSTEXPR + r"\(128,\) \(tuple\)", BOTH),
    "block_none": Case(lambda x, y: call(x, y, BLOCK=None), TypeError,
                       CONSTEXPR + r"None \(NoneType\), and the kernel fails on it", BOTH),
    "heuristic_returns_a_list": Case(
        lambda x, y: call(x, y, kernel=heuristic_list_kernel, BLOCK=OMIT), TypeError,
        r"tl\.constexpr 'BLOCK' of kernel 'heuristic_list_kernel' was given \[128\] \(list\).*BLOCK=128", BOTH),
    "dtype_from_jax": Case(lambda x, y: own(dtype_kernel, x, BLOCK=N, DTYPE=jnp.float16), TypeError,
                           r"tl\.constexpr 'DTYPE' of kernel 'dtype_kernel' was given jax\.numpy\.float16 \(a "
                           rf"NumPy/JAX dtype\).*{_at('.to(DTYPE)')}.*DTYPE=tl\.float16", BOTH),
    "dtype_from_numpy": Case(lambda x, y: own(dtype_kernel, x, BLOCK=N, DTYPE=jnp.dtype("float16")), TypeError,
                             r"tl\.constexpr 'DTYPE' .*given dtype\('float16'\) \(a NumPy/JAX dtype\)", BOTH),
    "dtype_as_a_string": Case(lambda x, y: own(dtype_kernel, x, BLOCK=N, DTYPE="fp16"), TypeError,
                              r"tl\.constexpr 'DTYPE' .*given 'fp16' \(str\).*DTYPE=tl\.float16", BOTH),
    "dtype_numpy_scalar_type": Case(lambda x, y: own(dtype_kernel, x, BLOCK=N, DTYPE=np.float16), TypeError,
                                    r"tl\.constexpr 'DTYPE' .*given numpy\.float16 \(a NumPy/JAX dtype\)", BOTH),
    # annotated parameters
    "annotated_int32_given_2_pow_40": Case(lambda x, y: own(annotated_kernel, x, 2**40, BLOCK=N), ValueError,
                                           r"argument 'n' of kernel 'annotated_kernel' is annotated i32, but "
                                           r"1099511627776 does not fit"),
    "annotated_int32_given_a_float": Case(lambda x, y: own(annotated_kernel, x, 3.0, BLOCK=N), TypeError,
                                          r"argument 'n' .*annotated i32, but a float was passed"),
    # user callables
    "grid_callable_without_argument": Case(lambda x, y: call(x, y, grid=lambda: (2,)), TypeError,
                                           r"grid callable <lambda> .*of kernel 'add_kernel' cannot be called with "
                                           r"one argument, the dict of metaparameters"),
    "grid_callable_reads_a_missing_name": Case(lambda x, y: call(x, y, grid=lambda m: (m["BLOK"],)), KeyError,
                                               r"grid callable <lambda> \(File .*\) of kernel 'add_kernel' reads "
                                               r"'BLOK', which the call does not have .*did you mean 'BLOCK'"),
    # as Triton's launcher, a grid callable sees every argument (m["n"] works); a name no argument has is named
    "grid_callable_reads_a_name_no_argument_has": Case(
        lambda x, y: call(x, y, grid=lambda m: (m["N_ROWS"] // m["BLOCK"],)), KeyError,
        r"grid callable <lambda> .*of kernel 'add_kernel' reads 'N_ROWS'"),
    "zeroed_callable_reads_a_missing_name": Case(
        lambda x, y: call(x, y, zeroed_outputs=lambda m: (m["SIZE"],)), KeyError,
        r"zeroed_outputs callable <lambda> .*of kernel 'add_kernel' reads 'SIZE'"),
    "heuristic_reads_a_missing_name": Case(
        lambda x, y: call(x, y, kernel=heuristic_missing_kernel, BLOCK=OMIT), KeyError,
        r"heuristic for 'BLOCK' <lambda> .*of kernel 'heuristic_missing_kernel' reads 'BLOK'"),
    "early_config_prune_reads_a_missing_name": Case(
        lambda x, y: call(x, y, kernel=pruned_kernel, BLOCK=OMIT), KeyError,
        r"early_config_prune prune_reading_a_missing_name .*of kernel 'pruned_kernel' reads 'nn'.*did you mean "
        r"'n'"),
    "config_sets_a_runtime_argument": Case(
        lambda x, y: call(x, y, kernel=config_sets_runtime_kernel, BLOCK=OMIT), ValueError,
        r"kernel 'config_sets_runtime_kernel': autotune config .* sets 'n', a runtime argument .*Conflicting "
        r"meta-parameters"),
    "heuristic_misspells_a_constexpr": Case(
        lambda x, y: call(x, y, kernel=heuristic_misspelt_kernel, BLOCK=OMIT), ValueError,
        r"kernel 'heuristic_misspelt_kernel': triton\.heuristics\(\{'BLOK': \.\.\.\}\) sets 'BLOK', which is not a "
        r"parameter of the kernel; did you mean 'BLOCK'"),
    "config_misspells_a_constexpr": Case(
        lambda x, y: call(x, y, kernel=config_misspelt_kernel, BLOCK=OMIT), ValueError,
        r"autotune config .* sets 'BLOK', which is not a parameter of the kernel; did you mean 'BLOCK'"),
    "grid_callable_raises": Case(lambda x, y: call(x, y, grid=lambda m: (m["BLOCK"] // 0,)), ZeroDivisionError,
                                 r"grid callable <lambda> \(File .*\) of kernel 'add_kernel' raised "
                                 r"ZeroDivisionError"),
    "autotune_with_a_pre_hook": Case(lambda x, y: call(x, y, kernel=autotune_hook_kernel, BLOCK=OMIT),
                                     NotImplementedError, r"triton\.autotune pre_hook <lambda> .* of kernel "
                                                          r"'autotune_hook_kernel' reads 'x_ptr'\.sum"),
    "early_config_prune_returns_none": Case(
        lambda x, y: call(x, y, kernel=prune_none_kernel, BLOCK=OMIT), TypeError,
        r"early_config_prune prune_returning_none .*must return a list of triton.Config, got NoneType"),
    # descriptors and pointers confused
    "descriptor_of_another_rank": Case(lambda x, y: own(descriptor_2d_kernel, tritonplug.TensorDescriptor.from_array(
        x, [16]), BLOCK=16), TypeError, r"argument 'd' of kernel 'descriptor_2d_kernel' is a TensorDescriptor of "
                                        r"float32\[256\] with block_shape \[16\] \(rank 1\).*expected 1 offsets",
        ("cpu",)),
    "descriptor_for_a_pointer": Case(lambda x, y: call(x, tritonplug.TensorDescriptor.from_array(y, [16])),
                                     TypeError, r"argument 'y_ptr' of kernel 'add_kernel' is used as a pointer by "
                                                r"the kernel .*but a TensorDescriptor was passed", ("cpu",)),
    "array_for_a_descriptor": Case(lambda x, y: own(descriptor_kernel, x, BLOCK=16), TypeError,
                                   r"argument 'd' of kernel 'descriptor_kernel' is used as a tensor descriptor by "
                                   r"the kernel \(d\.load\).*but an array was passed", BOTH),
    "descriptor_block_not_an_int": Case(lambda x, y: call(x, tritonplug.TensorDescriptor.from_array(y, [16.5])),
                                        TypeError, r"block_shape\[0\] must be an int, got 16\.5 \(float\)"),
    "alias_index_a_float": Case(lambda x, y: call(x, y, input_output_aliases={0: 0.0}), TypeError,
                                r"input_output_aliases: indices must be ints, got 0\.0 \(float\)"),
    "grid_callable_returns_a_string_dimension": Case(lambda x, y: call(x, y, grid=lambda m: ("2",)), TypeError,
                                                     r"got '2' \(str\) in grid \('2',\) \(returned by the grid "
                                                     r"callable\)"),
    # outputs and grids
    "int64_output_without_x64": Case(lambda x, y: call(x, y, out_shape=jax.ShapeDtypeStruct((N,), jnp.int64)),
                                     TypeError, r"out_shape leaf 0 is int64, but 64-bit types are disabled in JAX "
                                                r"\(jax_enable_x64 is off"),
    "empty_grid": Case(lambda x, y: call(x, y, grid=(0,)), ValueError,
                       r"grid \(0,\) of kernel 'add_kernel' launches no program.*zeroed_outputs, or updated in place"),
    "grid_callable_returns_an_empty_grid": Case(lambda x, y: call(x, y, grid=lambda m: (4, 0)), ValueError,
                                                r"grid \(4, 0\) of kernel 'add_kernel' \(returned by the grid "
                                                r"callable\) launches no program"),
}

pytestmark = skip_without_backends


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_state):
    return _use_fresh_cache(tmp_path / "kernel-cache", monkeypatch, fresh_state)


@pytest.mark.parametrize(("name", "stage", "platform"), params(CASES))
def test_malformed_call_is_refused_naming_the_culprit(name: str, stage: str, platform: str,
                                                      fresh_cache: Path) -> None:
    check_refused(CASES[name], stage, platform, fresh_cache)


@pytest.mark.parametrize(("good", "bad", "error"), [
    ({"grid": (2,)}, {"grid": (2.0,)}, r"grid dimensions must be .*got 2\.0"),
    ({"num_warps": 1}, {"num_warps": True}, r"num_warps must be an int, got bool"),
    ({"num_warps": 4}, {"num_warps": 4.0}, r"num_warps must be an int, got float"),
    ({"debug": False}, {"debug": 0}, r"debug must be a bool, got int"),
    ({"grid": (2,)}, {"grid": (2, 0)}, r"grid \(2, 0\) of kernel 'add_kernel' launches no program"),
])
@PLATFORM_MARKS["cpu"]  # eager calls on the CPU
def test_a_call_equal_in_value_to_a_memoised_one_is_validated_afresh(good, bad, error, fresh_cache: Path) -> None:
    """The memo keys every option with its type: ``grid=(2.0,)`` right after ``grid=(2,)`` is refused, as a
    first call would be."""
    x = jax.device_put(jnp.arange(N, dtype=jnp.float32), jax.devices("cpu")[0])
    call(x, x, **good)
    call(x, x, **good)  # memoised now
    with pytest.raises(TypeError if "launches" not in error else ValueError, match=error):
        call(x, x, **bad)


@pytest.mark.parametrize("platform", [pytest.param(p, marks=PLATFORM_MARKS[p]) for p in BOTH])
def test_a_descriptor_for_a_pointer_names_the_argument_on_every_platform(platform: str, fresh_cache: Path) -> None:
    """On the CPU, and on CUDA with jaxlib 0.11.1+, the front end's failure is blamed on ``y_ptr``; an older
    jaxlib refuses descriptors before the front end runs, naming the argument too."""
    def f(x, y):
        return call(x, tritonplug.TensorDescriptor.from_array(y, [16]))
    with pytest.raises((TypeError, NotImplementedError), match=r"argument 'y_ptr'"):
        jax.jit(f).trace(SPEC, SPEC).lower(lowering_platforms=(platform,))


@pytest.mark.parametrize("platform", [pytest.param("cuda", marks=PLATFORM_MARKS["cuda"])])
def test_a_heuristic_may_set_a_launch_option(platform: str, fresh_cache: Path) -> None:
    """``triton.heuristics({"num_warps": ...})`` is Triton's way to pick warps per call: it is not a misspelt
    constexpr, and the launch gets it."""
    from tritonplug.inspection import kernel_calls

    text = jax.jit(lambda x, y: call(x, y, kernel=heuristic_warps_kernel)).trace(SPEC, SPEC).lower(
        lowering_platforms=(platform,)).as_text()
    (launch,) = kernel_calls(text)
    assert launch["kernel_call"]["kernel"]["num_warps"] == 2
