"""Kernels no backend can compile are refused by every backend alike, naming the kernel's file and line.

A kernel returning a tensor, or adding fp8 values, passes Triton's front end but fails in the NVIDIA and AMD
back ends with ``PassManager::run failed``; the CPU backend would have run it. Every backend now refuses it
right after the front end with one message (``ir_rules.check``), on the CPU, for sm_90 and for gfx942.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import triton
import triton.language as tl
from bad_input_support import BOTH, SPEC, Case, N, check_refused, params, skip_without_backends, use_fresh_cache
from helpers import for_backend, requires_backend

import tritonplug
from tritonplug.compile import ir_rules

HERE = Path(__file__).resolve()
FP8 = jax.ShapeDtypeStruct((N,), jnp.float8_e4m3fn)


@triton.jit
def returning_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    value = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, value)
    return value


@triton.jit
def returning_two_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    value = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, value)
    return value, value


@triton.jit
def fp8_add_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    value = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, value + value)


@triton.jit
def fp8_sort_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.sort(tl.load(x_ptr + offs)))


@triton.jit
def fp8_maximum_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs), tl.load(x_ptr + BLOCK - 1 - offs)))


@triton.jit
def int_fma_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    value = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.fma(value, value, value))


@triton.jit
def fp8_widened_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    value = tl.load(x_ptr + offs).to(tl.float32)
    tl.store(out_ptr + offs, (value + value).to(tl.float8e4nv))


def _at(text: str) -> str:
    line = next(i for i, ln in enumerate(HERE.read_text().splitlines(), 1) if text in ln)
    return rf'\(File "{HERE}", line {line}\)'


def returning(x, y):
    return tritonplug.triton_call(x, kernel=returning_kernel, out_type=SPEC, grid=(1,), BLOCK=N)


def fp8_add(x, y):
    return tritonplug.triton_call(x.astype(jnp.float8_e4m3fn), kernel=fp8_add_kernel, out_type=FP8, grid=(1,),
                                  BLOCK=N)


def fp8_call(kernel):
    def f(x, y):
        return tritonplug.triton_call(x.astype(jnp.float8_e4m3fn), kernel=kernel, out_type=FP8, grid=(1,), BLOCK=N)
    return f


def int_fma(x, y):
    return tritonplug.triton_call(x.astype(jnp.int32), kernel=int_fma_kernel,
                                  out_type=jax.ShapeDtypeStruct((N,), jnp.int32), grid=(1,), BLOCK=N)


RETURNS = rf"kernel 'returning_kernel' {_at('    return value')}: the kernel returns a value \(tensor<256xf32>\)"
FP8_ADD = (rf"kernel 'fp8_add_kernel' {_at('value + value)')}: fp8 arithmetic \(arith\.addf on f8E4M3FN\) is "
           r"not supported by Triton's GPU back ends")
CASES = {
    "kernel_returns_a_value": Case(returning, tritonplug.KernelSourceError, RETURNS, BOTH),
    "fp8_add": Case(fp8_add, tritonplug.KernelSourceError, FP8_ADD, BOTH),
    "kernel_returns_two_values": Case(
        lambda x, y: tritonplug.triton_call(x, kernel=returning_two_kernel, out_type=SPEC, grid=(1,), BLOCK=N),
        tritonplug.KernelSourceError, rf"kernel 'returning_two_kernel' {_at('    return value, value')}: the kernel "
                                      r"returns a value \(\(tensor<256xf32>, tensor<256xf32>\)\)", BOTH),
    "fp8_sort": Case(fp8_call(fp8_sort_kernel), tritonplug.KernelSourceError,
                     r"kernel 'fp8_sort_kernel' \(File .*\): fp8 arithmetic \(arith\.cmpf on f8E4M3FN\)", BOTH),
    "fp8_maximum": Case(fp8_call(fp8_maximum_kernel), tritonplug.KernelSourceError,
                        rf"kernel 'fp8_maximum_kernel' {_at('tl.maximum(tl.load')}: fp8 arithmetic \(arith\.max", BOTH),
    "integer_fma_fails_verification": Case(
        int_fma, tritonplug.KernelSourceError,
        rf"kernel 'int_fma_kernel' {_at('tl.fma(value, value, value)')}: 'math\.fma' op operand #0 must be "
        r"floating-point-like.*fails verification", BOTH),
}

@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_state):
    return use_fresh_cache(tmp_path / "kernel-cache", monkeypatch, fresh_state)


@skip_without_backends
@pytest.mark.parametrize(("name", "stage", "platform"), params(CASES))
def test_a_kernel_no_backend_compiles_is_refused_by_every_backend(name: str, stage: str, platform: str,
                                                                  fresh_cache: Path) -> None:
    check_refused(CASES[name], stage, platform, fresh_cache)


@for_backend("rocm")  # tox -e rocm selects it by its marker
@pytest.mark.parametrize("name", list(CASES))
def test_rocm_refuses_them_with_the_same_message(name: str, fresh_cache: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRITONPLUG_ROCM_ARCH", "gfx942")
    case = CASES[name]
    with pytest.raises(case.error, match=case.match):
        jax.jit(case.fn).trace(SPEC, SPEC).lower(lowering_platforms=("rocm",))


@requires_backend("cuda")
def test_fp8_widened_to_float32_still_compiles_for_sm_90(fresh_cache: Path) -> None:
    def f(x, y):
        return tritonplug.triton_call(x.astype(jnp.float8_e4m3fn), kernel=fp8_widened_kernel, out_type=FP8,
                                      grid=(1,), BLOCK=N)
    text = jax.jit(f).trace(SPEC, SPEC).lower(lowering_platforms=("cuda",)).as_text()
    (launch,) = tritonplug.inspection.kernel_calls(text)
    assert ".target sm_90" in launch["kernel_call"]["kernel"]["ptx"]


def test_a_compiler_diagnostic_names_the_kernel_line() -> None:
    """The first specific ``file:line:col: error:`` of what a back end printed (Triton 3.9 for sm_90, shortened),
    at the first place of its ``called from`` chain outside Triton's own library."""
    printed = ('  #blocked = ...\n/k/kernels.py:65:30: error: \'llvm.fadd\' op operand #0 must be floating point\n'
               '/k/kernels.py:62:1: note: Pipeline failed while executing\n')
    assert ir_rules.first_diagnostic(printed) == (' (File "/k/kernels.py", line 65): \'llvm.fadd\' op operand #0 '
                                                  'must be floating point')
    sort = ('/v/site-packages/triton/language/standard.py:403:23: error: \'llvm.fcmp\' op operand #0 must be float\n'
            '/v/site-packages/triton/language/standard.py:425:13: note: called from\n'
            '/k/sort.py:7:30: note: called from\n[...]\n'
            '/k/sort.py:5:1: error: Failures have been detected while processing an MLIR pass pipeline\n')
    assert ir_rules.first_diagnostic(sort) == ' (File "/k/sort.py", line 7): \'llvm.fcmp\' op operand #0 must be float'
    assert ir_rules.first_diagnostic("no diagnostic here") == ""
