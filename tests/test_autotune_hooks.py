"""Autotune hooks (``calls.autotune_hooks``): run once at the call against stand-ins; what they zero starts zeroed,
on the CPU (interpret backend, real Triton front end) against NumPy, and in a CUDA lowering's payload; everything
else a hook does is refused at the call, naming the hook and what it did."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import for_backend
from hook_kernels import (
    SliceZeroer,
    binned,
    init_to_zero,
    keyed,
    partial_zero,
    positional_star,
    reference,
    two_hooks,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import tritonplug
from tritonplug.calls import autotune_hooks
from tritonplug.calls.autotune_hooks import HookRefused
from tritonplug.inspection import kernel_calls
from tritonplug.records import BufferSpec

N = 1000
START = np.array([100.0, -7.0, 3.5, 42.0], np.float32)  # a hook that does not zero leaves these in the result


def x_values() -> np.ndarray:
    return np.linspace(-1.0, 2.0, N, dtype=np.float32)


def run_in_ref(kernel, x, start):
    """The kernel on a ``jax.new_ref`` of ``start``, as a jitted program; the ref's final value."""
    @jax.jit
    def f(x, start):
        ref = jax.new_ref(start)
        tritonplug.triton_call(x, ref, x.size, kernel=kernel, out_type=(),
                               grid=lambda m: (tritonplug.cdiv(N, m["BLOCK"]),))
        return ref[...]
    return np.asarray(f(jnp.asarray(x), jnp.asarray(start)))


ZEROING = {
    "config_init_to_zero": lambda: binned(init_to_zero(["bins_ptr"])),
    "reset_to_zero": lambda: binned(reset_to_zero=["bins_ptr"]),
    "reset_to_zero_and_restore_value": lambda: binned(reset_to_zero=["bins_ptr"], restore_value=["x_ptr"]),
    "autotuner_pre_hook": lambda: binned(pre_hook=keyed),
    "fill_zero_star_args": lambda: binned(positional_star),
    "slice_assign_callable_object": lambda: binned(SliceZeroer()),
    "functools_partial": lambda: binned(partial_zero),
}


@pytest.mark.parametrize("cpu_path", ["xla", "interpret"])
@pytest.mark.parametrize("make", ZEROING.values(), ids=ZEROING.keys())
def test_a_zeroing_hook_zeroes_the_buffer_before_the_launch(make, cpu_path, monkeypatch):
    """On both CPU paths: the kernel translated to XLA ops and Triton's interpreter."""
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", cpu_path)
    x = x_values()
    got = run_in_ref(make(), x, START)
    np.testing.assert_allclose(got, reference(x, np.zeros(4)), rtol=1e-5, atol=1e-4)


def test_without_a_hook_the_buffer_keeps_its_values():
    """The control: the same kernel with no hook adds into ``START`` (so the tests above can fail)."""
    x = x_values()
    np.testing.assert_allclose(run_in_ref(binned(), x, START), reference(x, START), rtol=1e-5, atol=1e-4)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # input_output_aliases warns, as in jax-triton 0.4
def test_an_aliased_input_is_zeroed_eagerly_and_the_input_array_is_unchanged():
    x, start = jnp.asarray(x_values()), jnp.asarray(START)
    out = tritonplug.triton_call(x, start, N, kernel=binned(init_to_zero(["bins_ptr"])),
                                 out_type=jax.ShapeDtypeStruct((4,), jnp.float32), input_output_aliases={1: 0},
                                 grid=lambda m: (tritonplug.cdiv(N, m["BLOCK"]),))
    np.testing.assert_allclose(np.asarray(out), reference(np.asarray(x), np.zeros(4)), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(start), START)


def test_the_hook_runs_once_at_the_call_not_per_launch():
    calls = []

    def counting(nargs):
        calls.append(1)
        nargs["bins_ptr"].zero_()

    kernel, x = binned(counting), x_values()
    f = jax.jit(lambda x, s: _ref_call(kernel, x, s))
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(jnp.asarray(x), jnp.asarray(START))), reference(x, np.zeros(4)),
                                   rtol=1e-5, atol=1e-4)
    assert len(calls) == 1


def _ref_call(kernel, x, start):
    ref = jax.new_ref(start)
    tritonplug.triton_call(x, ref, x.size, kernel=kernel, out_type=(), grid=lambda m: (tritonplug.cdiv(N, m["BLOCK"]),))
    return ref[...]


def _numpy_function(nargs):
    np.copyto(nargs["bins_ptr"], 0.0)


def _set_block(nargs):
    nargs["BLOCK"] = 128


REFUSED = {
    "item": (lambda nargs: nargs["bins_ptr"].item(), r"reads 'bins_ptr'\.item"),
    "sum": (lambda nargs: nargs["x_ptr"].sum(), r"reads 'x_ptr'\.sum"),
    "data_ptr": (lambda nargs: nargs["x_ptr"].data_ptr() + 16, r"reads 'x_ptr'\.data_ptr"),
    "comparison": (lambda nargs: nargs["x_ptr"] > 0, r"compares 'x_ptr'"),
    "truth": (lambda nargs: bool(nargs["x_ptr"]), r"reads the value of 'x_ptr'"),
    "indexing": (lambda nargs: nargs["x_ptr"][0], r"indexes 'x_ptr'"),
    "partial_write": (lambda nargs: nargs["bins_ptr"].__setitem__(0, 0.0), r"writes part of 'bins_ptr'"),
    "resize": (lambda nargs: nargs["bins_ptr"].resize_(8), r"reads 'bins_ptr'\.resize_"),
    "constant_fill": (lambda nargs: nargs["bins_ptr"].fill_(1.5), r"fills 'bins_ptr' with 1\.5: only zero-fills"),
    "negative_zero": (lambda nargs: nargs["bins_ptr"].fill_(-0.0), r"fills 'bins_ptr' with -0\.0"),
    "print": (lambda nargs: print("tuning", nargs["n"]), r"prints 'tuning 1000\\n'"),
    "array_function": (_numpy_function, r"_numpy_function .* raises TypeError: copyto\(\) argument 1"),
    "changes_nargs": (_set_block, r"_set_block .* changes nargs\['BLOCK'\]"),
    "missing_name": (init_to_zero(["dbins_ptr"]), r"raises KeyError: 'dbins_ptr'"),
    "zeroes_a_plain_input": (init_to_zero(["x_ptr"]), r"zeroes 'x_ptr', an input the call does not update in place"),
}


@pytest.mark.parametrize("hook, message", REFUSED.values(), ids=REFUSED.keys())
def test_any_other_effect_is_refused_at_the_call_naming_the_hook(hook, message):
    kernel, x = binned(hook), jnp.asarray(x_values())
    with pytest.raises(HookRefused, match=message) as raised:
        _ref_call(kernel, x, jnp.asarray(START))
    assert "autotune config pre_hook" in str(raised.value) and "of kernel 'binned_sum'" in str(raised.value)


def test_a_post_hook_that_zeroes_is_refused_and_one_that_does_nothing_runs():
    x, start = jnp.asarray(x_values()), jnp.asarray(START)
    with pytest.raises(HookRefused, match=r"triton\.autotune post_hook <lambda> .* zeroes 'bins_ptr' after"):
        _ref_call(binned(post_hook=lambda nargs, exception: nargs["bins_ptr"].zero_()), x, start)
    seen = []
    got = _ref_call(binned(post_hook=lambda nargs, exception: seen.append(exception)), x, start)
    np.testing.assert_allclose(np.asarray(got), reference(np.asarray(x), START), rtol=1e-5, atol=1e-4)
    assert seen == [None]


def test_stand_ins_show_shape_dtype_and_scalars_as_triton_passes_them():
    seen = {}

    def look(nargs):
        bins = nargs["bins_ptr"]
        seen.update(shape=bins.shape, ndim=bins.ndim, numel=bins.numel(), dtype=bins.dtype, n=nargs["n"],
                    block=nargs["BLOCK"], warps=nargs["num_warps"], itemsize=bins.element_size(),
                    stride=bins.stride(), size0=bins.size(0))

    _ref_call(binned(look), jnp.asarray(x_values()), jnp.asarray(START))
    assert seen == {"shape": (4,), "ndim": 1, "numel": 4, "dtype": np.dtype("float32"), "n": N, "block": 64,
                    "warps": 4, "itemsize": 4, "stride": (1,), "size0": 4}


@given(st.one_of(st.floats(allow_nan=True), st.integers(-2**31, 2**31 - 1), st.booleans()))
@settings(max_examples=200, deadline=None)
def test_a_fill_is_accepted_exactly_when_its_bytes_are_zero(value):
    def hook(nargs):
        nargs["b"].fill_(value)

    with np.errstate(over="ignore"):
        zero_bytes = not np.array(value).astype(np.float32).tobytes().strip(b"\0")  # 1e-50 rounds to 0.0
    try:
        fills = autotune_hooks.record("pre_hook", hook, "k", {"b": BufferSpec((4,), "float32")})
    except HookRefused:
        assert not zero_bytes
    else:
        assert zero_bytes and list(fills) == ["b"]


@given(st.integers(-2**64, 2**64))
@settings(max_examples=100, deadline=None)
def test_an_integer_fill_is_accepted_exactly_when_it_is_zero(value):
    """Not when it wraps around to zero in the buffer's dtype (torch refuses an out-of-range fill)."""
    def hook(nargs):
        nargs["b"].fill_(value)

    try:
        autotune_hooks.record("pre_hook", hook, "k", {"b": BufferSpec((4,), "int32")})
    except HookRefused:
        assert value != 0
    else:
        assert value == 0


cuda = for_backend("cuda")


@cuda
def test_each_config_zeroes_what_its_own_hook_zeroes_in_the_cuda_payload(monkeypatch):
    """``two_hooks``'s first config zeroes ``bins_ptr`` (an output here), its second does not: the lowering for
    sm_90 on this CPU-only machine carries bytes_to_zero on the first config's buffer only."""
    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")

    def f(x):
        return tritonplug.triton_call(x, n=N, kernel=two_hooks, out_type=jax.ShapeDtypeStruct((4,), jnp.float32),
                                      grid=lambda m: (tritonplug.cdiv(N, m["BLOCK"]),))

    text = jax.jit(f).trace(jax.ShapeDtypeStruct((N,), jnp.float32)).lower(lowering_platforms=("cuda",)).as_text()
    (call,) = kernel_calls(text)
    first, second = (c["kernel_call"]["parameters"][1] for c in call["autotuned_kernel_call"]["configs"])
    assert first == {"array": {"bytes_to_zero": 16, "ptr_divisibility": 16}}
    assert "bytes_to_zero" not in second["array"]


def test_an_empty_grid_with_hooks_is_refused_rather_than_returning_an_unzeroed_buffer():
    """Triton runs the hook, then launches nothing: the buffer ends zeroed. An empty grid skips the launch here,
    and with it the zeroing, so it is refused (an unzeroed ``START`` would be a silent wrong result)."""
    ref = jax.new_ref(jnp.asarray(START))
    with pytest.raises(NotImplementedError, match=r"'binned_sum': the grid \(0,\) is empty .*reset_to_zero"):
        tritonplug.triton_call(jnp.asarray(x_values()), ref, N, kernel=binned(reset_to_zero=["bins_ptr"]),
                               out_type=(), grid=(0,))


def test_a_users_autotuner_pre_hook_replaces_reset_to_zero_as_in_triton():
    """Triton installs its reset_to_zero hook only when ``triton.autotune`` is given no ``pre_hook``."""
    x = x_values()
    kernel = binned(pre_hook=lambda nargs: None, reset_to_zero=["bins_ptr"])
    np.testing.assert_allclose(run_in_ref(kernel, x, START), reference(x, START), rtol=1e-5, atol=1e-4)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_under_vmap_each_batch_elements_buffer_is_zeroed():
    kernel = binned(init_to_zero(["bins_ptr"]))

    def f(x, start):
        return tritonplug.triton_call(x, start, N, kernel=kernel, out_type=jax.ShapeDtypeStruct((4,), jnp.float32),
                                      input_output_aliases={1: 0}, grid=lambda m: (tritonplug.cdiv(N, m["BLOCK"]),))

    x = np.stack([x_values(), x_values()[::-1] * 3])
    got = np.asarray(jax.jit(jax.vmap(f))(jnp.asarray(x), jnp.asarray(np.stack([START, START[::-1]]))))
    for i in range(2):
        np.testing.assert_allclose(got[i], reference(x[i], np.zeros(4)), rtol=1e-5, atol=1e-4)


@cuda
def test_a_refs_zeroing_reaches_the_cuda_payload_on_its_own_parameter(monkeypatch):
    """A Ref is updated in place through its operand's parameter: that parameter carries bytes_to_zero (jaxlib's
    runtime clears the buffer before the launch, as the hook zeroes the tensor in place)."""
    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    spec = jax.ShapeDtypeStruct
    text = jax.jit(lambda x, s: _ref_call(binned(init_to_zero(["bins_ptr"])), x, s)).trace(
        spec((N,), jnp.float32), spec((4,), jnp.float32)).lower(lowering_platforms=("cuda",)).as_text()
    (call,) = kernel_calls(text)
    params = call["kernel_call"]["parameters"]
    assert params[1] == {"array": {"bytes_to_zero": 16, "ptr_divisibility": 16}}
    assert "bytes_to_zero" not in params[0]["array"]
