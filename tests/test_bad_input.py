"""Malformed ``triton_call``s are refused with an error naming the culprit, before anything is compiled or cached.

Each case runs against a fresh, empty kernel cache. Most are refused at the ``triton_call`` site
(``jax.jit(f).trace`` raises); the few that need the target or the kernel's source are refused when
lowering starts (``trace`` succeeds, ``lower`` raises) on each platform they concern. Afterwards the
cache holds no entry, and a valid call works: it runs on the CPU interpreter, or lowers for sm_90
(writing the cache entry that proves the cache was live).
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
    SPEC,
    UNKNOWN_OPTION,
    UNKNOWN_OPTION_STAGE,
    Case,
    N,
    cache_files,
    call,
    check_refused,
    params,
    skip_without_backends,
    use_fresh_cache,
)
from kernels import add_kernel

import tritonplug

HERE = Path(__file__).resolve()


@triton.jit
def undefined_name_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + not_defined_anywhere)  # noqa: F821


@triton.jit
def bad_op_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, 3)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


def _pre_hook(*args, **kwargs) -> None:
    args[0]["x_ptr"].item()  # reads a value: no XLA program can run this before the launch


@triton.autotune(configs=[triton.Config({"BLOCK": 128}, pre_hook=_pre_hook)], key=["n"])
@triton.jit
def pre_hook_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def autotuned_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


def plain_function(x_ptr, y_ptr, n, out_ptr, BLOCK):
    pass


def alias_with_ref(x, y):
    ref = jax.new_ref(x)
    call(ref, y, input_output_aliases={0: 0})
    return ref[...]


def ref_as_constexpr(x, y):
    return call(x, y, BLOCK=jax.new_ref(x))


class Shape:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def _source_line(text: str) -> int:
    return next(i for i, line in enumerate(HERE.read_text().splitlines(), 1) if text in line and "def " not in line)


F32_256 = r"float32\[256\]"


class ForeignDtype:
    """A dtype NumPy does not know, as ``torch.float32`` is."""

    def __repr__(self) -> str:
        return "<foreign float32>"

CASES: dict[str, Case] = {
    # the kernel
    "kernel_plain_function": Case(lambda x, y: call(x, y, kernel=plain_function), TypeError,
                                  r"kernel must be a @triton.jit function.*got function"),
    "kernel_none": Case(lambda x, y: call(x, y, kernel=None), TypeError, r"kernel must be .*got NoneType"),
    "kernel_string": Case(lambda x, y: call(x, y, kernel="add_kernel"), TypeError, r"kernel must be .*got str"),
    # out_shape / out_type
    "out_shape_int": Case(lambda x, y: call(x, y, out_shape=5), TypeError,
                          r"out_shape leaf 0 must have \.shape and \.dtype .*got int"),
    "out_type_int_named_as_out_type": Case(lambda x, y: call(x, y, out_shape=OMIT, out_type=5), TypeError,
                                           r"out_type leaf 0 must have \.shape and \.dtype .*got int"),
    "out_type_with_a_foreign_dtype": Case(
        lambda x, y: call(x, y, out_shape=OMIT, out_type=Shape((N,), ForeignDtype())), TypeError,
        r"out_type leaf 0 has dtype <foreign float32>, which is no NumPy/JAX dtype \(a torch dtype\?\)"),
    "out_shape_string": Case(lambda x, y: call(x, y, out_shape="float32"), TypeError, r"out_shape leaf 0 .*got str"),
    "out_shape_list_of_ints": Case(lambda x, y: call(x, y, out_shape=[N]), TypeError,
                                   r"out_shape leaf 0 .*got int: 256"),
    "out_shape_none_without_out_type": Case(lambda x, y: call(x, y, out_shape=None), TypeError,
                                            r"missing required keyword argument: 'out_type'"),
    "out_shape_and_out_type": Case(lambda x, y: call(x, y, out_type=SPEC), TypeError,
                                   r"pass out_shape or out_type, not both"),
    "out_shape_negative_dimension": Case(lambda x, y: call(x, y, out_shape=Shape((-1,), np.float32)), TypeError,
                                         r"out_shape leaf 0 has a non-static or negative shape \(-1,\)"),
    "out_shape_empty": Case(lambda x, y: call(x, y, out_shape=()), TypeError,
                            r"parameters \['out_ptr'\] have no argument, but out_shape has only 0 outputs"),
    "out_shape_complex64": Case(lambda x, y: call(x, y, out_shape=jax.ShapeDtypeStruct((N,), jnp.complex64)),
                                TypeError, r"out_shape leaf 0: dtype complex64 is not supported"),
    # grid
    "grid_four_dimensions": Case(lambda x, y: call(x, y, grid=(1, 1, 1, 1)), ValueError,
                                 r"grid must be an int or a tuple of 1 to 3 ints, got \(1, 1, 1, 1\)"),
    "grid_negative": Case(lambda x, y: call(x, y, grid=(-1,)), ValueError,
                          r"grid dimensions must be between 0 and 2\*\*31-1, got -1"),
    "grid_too_large": Case(lambda x, y: call(x, y, grid=(1, 2**31)), ValueError,
                           r"grid dimensions must be between 0 and 2\*\*31-1, got 2147483648"),
    "grid_float": Case(lambda x, y: call(x, y, grid=2.0), ValueError, r"grid must be an int .*got 2\.0"),
    "grid_float_dimension": Case(lambda x, y: call(x, y, grid=(2.0, 1)), TypeError,
                                 r"grid dimensions must be ints .*got 2\.0"),
    "grid_string": Case(lambda x, y: call(x, y, grid="2"), ValueError, r"grid must be an int .*got '2'"),
    "grid_bool": Case(lambda x, y: call(x, y, grid=(True,)), TypeError, r"grid dimensions must be ints"),
    "grid_callable_returns_none": Case(lambda x, y: call(x, y, grid=lambda meta: None), ValueError,
                                       r"grid must be .*\(returned by the grid callable\), got None"),
    "grid_callable_returns_four_dims": Case(lambda x, y: call(x, y, grid=lambda meta: (1, 1, 1, 1)), ValueError,
                                            r"grid .*\(returned by the grid callable\), got \(1, 1, 1, 1\)"),
    "grid_callable_returns_float": Case(lambda x, y: call(x, y, grid=lambda meta: 2.0), ValueError,
                                        r"grid .*\(returned by the grid callable\), got 2\.0"),
    "autotuned_grid_callable_returns_none": Case(
        lambda x, y: call(x, y, kernel=autotuned_kernel, grid=lambda meta: None, BLOCK=OMIT), ValueError,
        r"grid .*\(returned by the grid callable\), got None"),  # resolved at the call (compile.resolver)
    # binding operands to parameters
    "too_many_positional_arguments": Case(lambda x, y: call(x, y, N, x, x, x), TypeError,
                                          r"kernel 'add_kernel': too many positional arguments"),
    "array_lands_on_a_constexpr": Case(lambda x, y: call(x, y, N, x, x), TypeError,
                                       r"'BLOCK' .*tl\.constexpr, but an array was passed as positional argument 5"),
    "too_many_operands": Case(lambda x, y: call(x, y, N, x), TypeError,
                              r"kernel 'add_kernel' got too many operands: 4 operands leave 0 parameters"),
    "too_few_operands": Case(lambda x, y: tritonplug.triton_call(x, kernel=add_kernel, out_shape=SPEC, grid=2,
                                                                 BLOCK=128), TypeError,
                             r"too few operands: parameters \['y_ptr', 'n', 'out_ptr'\] have no argument"),
    "missing_constexpr": Case(lambda x, y: call(x, y, BLOCK=OMIT), TypeError,
                              r"missing a value for its tl\.constexpr parameter 'BLOCK': pass BLOCK="),
    "unknown_keyword": Case(lambda x, y: call(x, y, BLOKC=128), TypeError,
                            r"unexpected keyword argument 'BLOKC': it is neither a parameter of kernel 'add_kernel'"),
    "same_parameter_twice": Case(lambda x, y: call(x, y, x_ptr=x), TypeError,
                                 r"multiple values for argument 'x_ptr'"),
    "array_as_constexpr": Case(lambda x, y: call(x, y, BLOCK=x), TypeError,
                               r"argument 'BLOCK' of kernel 'add_kernel' is a tl\.constexpr, but an array"),
    "ref_as_constexpr": Case(ref_as_constexpr, TypeError,
                             r"argument 'BLOCK' .*is a tl\.constexpr, but a Ref \(jax\.new_ref\)"),
    "unhashable_metaparameter_list": Case(lambda x, y: call(x, y, BLOCK=[128]), TypeError,
                                          r"metaparameter 'BLOCK' of kernel 'add_kernel' must be hashable, got list"),
    "unhashable_metaparameter_dict": Case(lambda x, y: call(x, y, BLOCK={"v": 128}), TypeError,
                                          r"metaparameter 'BLOCK' .*must be hashable, got dict"),
    # scalars and dtypes
    "integer_2_pow_64": Case(lambda x, y: call(x, y, 2**64), ValueError,
                             r"argument 'n' .*integer 18446744073709551616 does not fit in 64 bits"),
    "integer_below_int64": Case(lambda x, y: call(x, y, -(2**63) - 1), ValueError,
                                r"argument 'n' .*integer -9223372036854775809 does not fit in 64 bits"),
    "complex_scalar": Case(lambda x, y: call(x, y, 1j), TypeError, r"argument 'n' .*got complex"),
    "complex64_operand": Case(lambda x, y: call(x, y.astype(jnp.complex64)), TypeError,
                              r"argument 'y_ptr' of kernel 'add_kernel': dtype complex64 is not supported"),
    "string_operand": Case(lambda x, y: call(x, "y"), TypeError,
                           r"argument 'y_ptr' of kernel 'add_kernel': expected an array, .*got str"),
    "object_operand": Case(lambda x, y: call(x, object()), TypeError, r"argument 'y_ptr' .*got object"),
    # None is Triton's constexpr None: refused by the front end, where the kernel uses it as a pointer
    "none_operand": Case(lambda x, y: call(x, None), TypeError,
                         r"argument 'y_ptr' of kernel 'add_kernel' is None, .*uses it as a pointer", BOTH),
    "string_inside_tuple_operand": Case(lambda x, y: call(x, ("s", y)), TypeError,
                                        r"argument 'y_ptr'\[0\] of kernel 'add_kernel': .*got str"),
    # input_output_aliases
    "alias_input_out_of_range": Case(lambda x, y: call(x, y, input_output_aliases={5: 0}), ValueError,
                                     r"input_output_aliases: input index 5 is out of range; .*got 2 array operands"),
    "alias_negative_input": Case(lambda x, y: call(x, y, input_output_aliases={-1: 0}), ValueError,
                                 r"input_output_aliases: input index -1 is out of range"),
    "alias_input_one_past_the_end": Case(lambda x, y: call(x, y, input_output_aliases={2: 0}), ValueError,
                                         r"input_output_aliases: input index 2 is out of range; .*got 2 array "
                                         r"operands"),
    "alias_negative_output": Case(lambda x, y: call(x, y, input_output_aliases={0: -1}), ValueError,
                                  r"input_output_aliases: output index -1 is out of range"),
    "alias_output_out_of_range": Case(lambda x, y: call(x, y, input_output_aliases={0: 1}), ValueError,
                                      r"input_output_aliases: output index 1 is out of range; out_shape has 1"),
    "alias_of_a_scalar": Case(lambda x, y: call(x, y, input_output_aliases={2: 0}, out_shape=OMIT, out_type=SPEC),
                              ValueError, r"input_output_aliases: input 2 is a scalar \(256\)"),
    "alias_shape_mismatch": Case(lambda x, y: call(x, y, out_shape=jax.ShapeDtypeStruct((2 * N,), jnp.float32),
                                                   input_output_aliases={0: 0}), ValueError,
                                 rf"input_output_aliases: input 0 is {F32_256} but output 0 is float32\[512\]"),
    "alias_dtype_mismatch": Case(lambda x, y: call(x, y, out_shape=jax.ShapeDtypeStruct((N,), jnp.int32),
                                                   input_output_aliases={0: 0}), ValueError,
                                 rf"input_output_aliases: input 0 is {F32_256} but output 0 is int32\[256\]"),
    "two_inputs_aliased_to_one_output": Case(lambda x, y: call(x, y, input_output_aliases={0: 0, 1: 0}), ValueError,
                                             r"input_output_aliases maps two inputs to one output"),
    "aliases_not_a_dict": Case(lambda x, y: call(x, y, input_output_aliases=[(0, 0)]), TypeError,
                               r"input_output_aliases must be a dict"),
    "aliases_with_a_ref_operand": Case(alias_with_ref, ValueError,
                                       r"input_output_aliases cannot be combined with Ref arguments"),
    # zeroed_outputs
    "zeroed_output_out_of_range": Case(lambda x, y: call(x, y, zeroed_outputs=(1,)), ValueError,
                                       r"zeroed_outputs: output index 1 is out of range; out_shape has 1 outputs"),
    "zeroed_callable_out_of_range": Case(lambda x, y: call(x, y, zeroed_outputs=lambda meta: (3,)), ValueError,
                                         r"zeroed_outputs: output index 3 .*\(returned by the zeroed_outputs callable"),
    "zeroed_outputs_an_int": Case(lambda x, y: call(x, y, zeroed_outputs=0), TypeError,
                                  r"zeroed_outputs must be a sequence of output indices"),
    "zeroed_outputs_a_string_index": Case(lambda x, y: call(x, y, zeroed_outputs=("0",)), TypeError,
                                          r"zeroed_outputs: output indices must be ints, got '0'"),
    # options
    "num_warps_not_power_of_two": Case(lambda x, y: call(x, y, num_warps=3), ValueError,
                                       r"num_warps must be a power of two >= 1, got 3"),
    "num_warps_zero": Case(lambda x, y: call(x, y, num_warps=0), ValueError, r"num_warps must be .*got 0"),
    "num_warps_negative": Case(lambda x, y: call(x, y, num_warps=-4), ValueError, r"num_warps must be .*got -4"),
    "num_warps_string": Case(lambda x, y: call(x, y, num_warps="4"), TypeError, r"num_warps must be an int, got str"),
    "num_stages_negative": Case(lambda x, y: call(x, y, num_stages=-1), ValueError,
                                r"num_stages must be an int >= 0, got -1"),
    "num_ctas_zero": Case(lambda x, y: call(x, y, num_ctas=0), ValueError,
                          r"num_ctas must be a power of two >= 1, got 0"),
    "num_ctas_2_below_sm90": Case(lambda x, y: call(x, y, num_ctas=2, compute_capability=80), ValueError,
                                  r"num_ctas=2 needs thread-block clusters .*sm_80", ("cuda",)),
    "compute_capability_float": Case(lambda x, y: call(x, y, compute_capability=9.0), TypeError,
                                     r"compute_capability must be an int such as 90, got 9\.0"),
    "compute_capability_string": Case(lambda x, y: call(x, y, compute_capability="90"), TypeError,
                                      r"compute_capability must be an int such as 90, got '90'"),
    "compute_capability_out_of_range": Case(lambda x, y: call(x, y, compute_capability=5), ValueError,
                                            r"compute_capability: compute capability 5 is outside", ("cuda",)),
    "enable_fp_fusion_string": Case(lambda x, y: call(x, y, enable_fp_fusion="yes"), TypeError,
                                    r"enable_fp_fusion must be a bool, got str"),
    "debug_int": Case(lambda x, y: call(x, y, debug=1), TypeError, r"debug must be a bool, got int"),
    "backend_options_conflict_with_num_warps": Case(
        lambda x, y: call(x, y, num_warps=4, backend_options={"num_warps": 8}), ValueError,
        r"backend_options sets \['num_warps'\], also passed as triton_call arguments"),
    "backend_options_unhashable_value": Case(lambda x, y: call(x, y, backend_options={"maxnreg": [64]}), TypeError,
                                             r"backend_options\['maxnreg'\] must be hashable, got list"),
    "backend_options_not_a_mapping": Case(lambda x, y: call(x, y, backend_options=[("maxnreg", 64)]), TypeError,
                                          r"backend_options must be a mapping, got list"),
    "backend_options_holds_a_call_argument": Case(
        lambda x, y: call(x, y, backend_options={"compute_capability": 80}), ValueError,
        r"backend_options\['compute_capability'\] is an argument of triton_call"),
    "backend_options_unknown_option": Case(lambda x, y: call(x, y, backend_options={"warp_count": 2}), ValueError,
                                           rf"{UNKNOWN_OPTION} \['warp_count'\]", UNKNOWN_OPTION_STAGE),
    # autotune
    "autotune_config_with_pre_hook": Case(lambda x, y: call(x, y, kernel=pre_hook_kernel, BLOCK=OMIT),
                                          NotImplementedError,
                                          r"autotune config pre_hook _pre_hook .* of kernel 'pre_hook_kernel' "
                                          r"reads 'x_ptr'\.item"),
    "autotune_no_config_matches": Case(lambda x, y: call(x, y, kernel=autotuned_kernel, BLOCK=32), ValueError,
                                       r"'autotuned_kernel': no autotune configuration is compatible .*'BLOCK': 32"),
    # the kernel's source, seen by Triton's front end
    "kernel_undefined_name": Case(
        lambda x, y: tritonplug.triton_call(x, kernel=undefined_name_kernel, out_shape=SPEC, grid=1, BLOCK=N),
        tritonplug.KernelSourceError,
        rf"""kernel 'undefined_name_kernel' \(File "{re.escape(str(HERE))}", line """
        rf"""{_source_line("+ not_defined_anywhere)")}\):(.|\n)*tl\.load\(x_ptr \+ offs\) \+ not_defined_anywhere"""
        r"(.|\n)*not_defined_anywhere is not defined", BOTH),
    "kernel_bad_op": Case(
        lambda x, y: tritonplug.triton_call(x, kernel=bad_op_kernel, out_shape=SPEC, grid=1, BLOCK=N),
        tritonplug.KernelSourceError,
        rf"""kernel 'bad_op_kernel' \(File "{re.escape(str(HERE))}", line {_source_line("tl.arange(0, 3)")}\)"""
        r"(.|\n)*offs = tl\.arange\(0, 3\)(.|\n)*arange's range must be a power of 2", BOTH),
    # the rest of triton_call's arguments
    "name_not_a_string": Case(lambda x, y: call(x, y, name=3), TypeError, r"name must be a str"),
    "serialized_metadata_a_string": Case(lambda x, y: call(x, y, serialized_metadata="meta"), TypeError,
                                         r"serialized_metadata must be bytes, got str"),
    "cost_estimate_a_list": Case(lambda x, y: call(x, y, cost_estimate=[1.0]), TypeError,
                                 r"cost_estimate must be a mapping"),
    "has_side_effect_a_string": Case(lambda x, y: call(x, y, has_side_effect="no"), TypeError,
                                     r"has_side_effect must be a bool"),
}

pytestmark = skip_without_backends


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_state):
    return use_fresh_cache(tmp_path / "kernel-cache", monkeypatch, fresh_state)


def test_there_are_at_least_forty_distinct_cases() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(("name", "stage", "platform"), params(CASES))
def test_malformed_call_is_refused_early_and_caches_nothing(name: str, stage: str, platform: str,
                                                            fresh_cache: Path) -> None:
    check_refused(CASES[name], stage, platform, fresh_cache)


def test_eager_calls_are_refused_the_same_way(fresh_cache: Path) -> None:
    x = jnp.ones(N, jnp.float32)
    with pytest.raises(ValueError, match=r"input_output_aliases: input index 5 is out of range"):
        call(x, x, input_output_aliases={5: 0})
    with pytest.raises(TypeError, match=r"argument 'y_ptr' .*got str"):
        call(x, "y")
    assert cache_files(fresh_cache) == []


def test_every_refusal_is_a_documented_error_type() -> None:
    allowed = (TypeError, ValueError, NotImplementedError, tritonplug.TritonplugError)
    assert all(issubclass(case.error, allowed) for case in CASES.values())
