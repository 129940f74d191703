"""Property tests of argument binding: random signatures (inputs, outputs, in-place buffers, scalars,
``None`` and constexprs in any order), passed by position or keyword in any order, in place as
``jax.new_ref`` or through ``input_output_aliases``, eagerly or under ``jit``.

On the CPU the results are checked against NumPy. Without a GPU, the CUDA lowering is checked the way
jaxlib's runtime reads it: the k-th pointer parameter of the compiled kernel gets the k-th buffer of the
custom call (operands, then results), so the buffer lengths, read from the lowered module, must be those
of the arguments the compiled kernel's parameters are named after (read from its TTIR), and each scalar
must carry its own argument's value. On a GPU the same calls are compared with Triton's own launcher.
"""

from __future__ import annotations

import re
import warnings

import jax
import numpy as np
import pytest
import triton
from helpers import for_backend, requires_backend, requires_cuda_device
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from signature_cases import (
    BLOCK,
    Case,
    call,
    cases,
    inputs,
    kernel_for,
    kernel_from_source,
    reference,
    repeatable_cases,
)

from tritonplug.inspection import kernel_calls

_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Calls of each drawn case, each on new arrays: the first binds, the second is found by its quick signature, the
#: third runs through its kernel's runner where the call can be recorded (``eager.runners``; every
#: ``repeatable_cases`` case but those with a float by position, a new float object on each call).
REPEATS = 3
#: The cases of the tests that call: any case, or one whose repeats are recorded.
CALLED_CASES = st.one_of(cases(), repeatable_cases())


def _function(case: Case, names: list[int], **options):
    def f(*xs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            found = call(case, dict(zip(names, xs, strict=True)), **options)
        return [found[i] for i in sorted(found)]
    return jax.jit(f) if case.jit else f


@requires_backend("interpret")
@_SETTINGS
@given(CALLED_CASES)
def test_random_signatures_on_the_cpu(case: Case):
    function, cpu = _function(case, sorted(inputs(case))), jax.devices("cpu")[0]
    for call_number in range(REPEATS):  # a new call binds; its repeats take the memo's paths (eager.runners)
        arrays = inputs(case, call_number)
        got = function(*(jax.device_put(arrays[i], cpu) for i in sorted(arrays)))
        expected = reference(case, arrays)
        for i, value in zip(sorted(expected), got, strict=True):
            # a wrong binding is off by whole values; XLA may contract a*b+c into one FMA (a last-bit difference,
            # relative to the operands' scale, not the result's: near zero it exceeds any rtol)
            scale = 1.0 + float(np.max(np.abs(expected[i]), initial=0.0))
            np.testing.assert_allclose(np.asarray(value), expected[i], rtol=1e-6, atol=1e-6 * scale,
                                       err_msg=f"{case} parameter {i}, call {call_number + 1}")


_TENSOR = re.compile(r"tensor<(\d+)xf32>")


def _buffers_and_call(text: str) -> tuple[list[int], dict]:
    """The lengths of the custom call's buffers, operands then results, and its decoded payload."""
    (line,) = [line for line in text.splitlines() if "triton_kernel_call" in line and "custom_call" in line]
    operands, results = line.rsplit(":", 1)[1].split("->")
    lengths = [int(n) for n in _TENSOR.findall(operands)] + [int(n) for n in _TENSOR.findall(results)]
    (decoded,) = kernel_calls(text)
    return lengths, decoded["kernel_call"]


def _entry_arguments(ttir: str) -> list[str]:
    header = re.search(r"tt\.func public @kernel\((.*)\) attributes", ttir).group(1)
    return re.findall(r"%(\w+): ", header)


def _check_lowering(case: Case, platform: str) -> None:
    arrays = inputs(case)
    names = sorted(arrays)
    f = _function(case, names, compute_capability=90, debug=True)
    f = f if case.jit else jax.jit(f)
    text = f.trace(*(arrays[i] for i in names)).lower(lowering_platforms=(platform,)).as_text()
    lengths, kernel_call = _buffers_and_call(text)
    arguments = _entry_arguments(kernel_call["kernel"]["ttir"])
    assert len(arguments) == len(kernel_call["parameters"]), (arguments, kernel_call["parameters"])
    assert not any(n.startswith(("none", "const")) for n in arguments)  # constexprs are compiled in
    buffers = iter(lengths)
    for name, parameter in zip(arguments, kernel_call["parameters"], strict=True):
        i = case.names.index(name)
        if "array" in parameter:  # jaxlib hands each pointer parameter the next buffer
            assert next(buffers) == case.length(i), f"{case}: parameter {name} would get another argument's buffer"
        else:
            (value,) = parameter.values()
            assert value == pytest.approx(case.scalar(i)), f"{case}: scalar {name} carries {value}"


@for_backend("cuda")
@_SETTINGS
@given(cases())
def test_random_signatures_lower_for_cuda_in_the_order_jaxlib_reads(case: Case):
    _check_lowering(case, "cuda")


@for_backend("rocm")
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_signatures_lower_for_rocm_in_the_order_jaxlib_reads(case: Case):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITONPLUG_ROCM_ARCH", "gfx942")
        _check_lowering(case, "rocm")


@pytest.mark.cuda
@requires_backend("cuda")
@requires_cuda_device
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CALLED_CASES)
def test_random_signatures_on_the_gpu_match_tritons_launcher(case: Case):
    torch = pytest.importorskip("torch", reason="Triton's own launcher is compared on torch tensors")
    function = _function(case, sorted(inputs(case)))
    for call_number in range(REPEATS):  # a new call binds; its repeats take the memo's paths (eager.runners)
        _compare_with_tritons_launcher(case, function, inputs(case, call_number), torch)


def _compare_with_tritons_launcher(case: Case, function, arrays: dict, torch) -> None:
    names = sorted(arrays)
    got = function(*(jax.device_put(arrays[i], jax.devices("cuda")[0]) for i in names))
    tensors = {i: torch.tensor(a, device="cuda") for i, a in arrays.items()}
    args = []
    for i, kind in enumerate(case.kinds):
        if kind in ("in", "inout"):
            args.append(tensors[i])
        elif kind == "out":
            tensors[i] = torch.zeros(case.length(i), device="cuda")
            args.append(tensors[i])
        elif kind == "none":
            args.append(None)
        else:
            args.append(case.const(i) if kind == "const" else case.scalar(i))
    kernel_for(case.kinds)[(1,)](*args, BLOCK=BLOCK)
    written = sorted(i for i, k in enumerate(case.kinds) if k in ("out", "inout"))
    for i, value in zip(written, got, strict=True):
        native = tensors[i].cpu().numpy()
        native = native[:BLOCK] if case.kinds[i] == "out" else native
        np.testing.assert_array_equal(np.asarray(value), native, err_msg=f"{case} parameter {i}")


@requires_backend("interpret")
def test_a_parameter_left_out_takes_its_default_not_an_output():
    """As Triton's launcher does: ``eps`` keeps its default and the one output goes to ``out_ptr``."""
    arrays = {0: np.arange(BLOCK, dtype=np.float32)}
    out = jax.ShapeDtypeStruct((BLOCK,), np.float32)
    kernel = _with_default_kernel()
    got = kernel_call_with_default(kernel, jax.device_put(arrays[0], jax.devices("cpu")[0]), out)
    np.testing.assert_array_equal(np.asarray(got), arrays[0] + 0.5)
    got = kernel_call_with_default(kernel, jax.device_put(arrays[0], jax.devices("cpu")[0]), out, eps=2.0)
    np.testing.assert_array_equal(np.asarray(got), arrays[0] + 2.0)


def kernel_call_with_default(kernel, x, out, **extra):
    import tritonplug

    return tritonplug.triton_call(x, n=BLOCK, kernel=kernel, out_type=out, grid=(1,), **extra)


def _with_default_kernel():
    return kernel_from_source(
        "@triton.jit\n"
        "def kernel(x_ptr, out_ptr, n, eps=0.5, BLOCK: tl.constexpr = 16):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + eps, mask=offs < n)\n")


@requires_backend("interpret")
def test_a_grid_callable_sees_constexpr_defaults_and_arguments_as_triton_passes_them():
    """FlagGems' ``grid = lambda meta: (cdiv(M, meta["BLOCK_M"]),)`` over a kernel whose ``BLOCK_M`` has a default."""
    import tritonplug

    kernel = kernel_from_source(
        "@triton.jit\n"
        "def kernel(x_ptr, out_ptr, n, BLOCK_M: tl.constexpr = 16):\n"
        "    offs = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)\n"
        "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)\n")
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (triton.cdiv(meta["n"], meta["BLOCK_M"]),)

    x = np.arange(40, dtype=np.float32)
    got = tritonplug.triton_call(jax.device_put(x, jax.devices("cpu")[0]), n=40, kernel=kernel,
                                 out_type=jax.ShapeDtypeStruct((40,), np.float32), grid=grid)
    np.testing.assert_array_equal(np.asarray(got), x * 3)  # 3 programs of 16: every element written
    assert seen and all(m["BLOCK_M"] == 16 and m["n"] == 40 for m in seen)


@for_backend("cuda")
def test_an_annotated_scalar_is_passed_with_its_annotation():
    """``eps: tl.float64`` given ``1e-5`` and ``n: tl.int64`` given ``40``: fp64 and i64, as Triton compiles them."""
    import tritonplug

    kernel = kernel_from_source(
        "@triton.jit\n"
        "def kernel(x_ptr, out_ptr, n: tl.int64, eps: tl.float64, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + eps, mask=offs < n)\n")
    f = jax.jit(lambda x: tritonplug.triton_call(x, n=40, eps=1e-5, kernel=kernel, grid=(1,), BLOCK=64,
                                                 out_type=jax.ShapeDtypeStruct((64,), np.float32),
                                                 compute_capability=90))
    text = f.trace(jax.ShapeDtypeStruct((64,), np.float32)).lower(lowering_platforms=("cuda",)).as_text()
    (decoded,) = kernel_calls(text)
    scalars = [p for p in decoded["kernel_call"]["parameters"] if "array" not in p]
    assert [list(p) for p in scalars] == [["i64"], ["f64"]], scalars


@requires_backend("interpret")
def test_one_ref_for_two_parameters_is_refused_naming_both():
    import tritonplug

    kernel = kernel_for(("inout", "inout"))
    ref = jax.new_ref(jax.device_put(np.zeros(BLOCK * 2, np.float32), jax.devices("cpu")[0]))
    with pytest.raises(ValueError, match=r"same Ref .* parameters 'inout0' and 'inout1'"):
        tritonplug.triton_call(ref, ref, kernel=kernel, out_type=(), grid=(1,), BLOCK=BLOCK)
