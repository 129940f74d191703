"""Autotune configurations whose compiled kernel needs more shared memory than the target allows are skipped, as
Triton's autotuner skips them (``OutOfResources``): lowered for sm_90 and sm_80 on this CPU-only machine with the
real Triton compiler, read back from the lowered payloads and ``tritonplug.inspection.paths``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import triton
from fits_kernels import config, matmul_kernel
from helpers import for_backend, requires_cuda_device
from hypothesis import given
from hypothesis import strategies as st

import tritonplug
from tritonplug.compile.backends import Host
from tritonplug.errors import OutOfResourcesError, PluginError
from tritonplug.hookspecs import hookimpl
from tritonplug.inspection import kernel_calls
from tritonplug.lowering import fitting
from tritonplug.process.state import state
from tritonplug.records import Binary, HostKernel, Options, Target
from tritonplug.tuner import ConfigTiming, TunedCall, TuningReport

SIZE = 1024
#: Shared memory each needs, measured with Triton 3.9 (sm_90 / sm_80); the limits are 232448 / 166912 B.
BIG = config(256, 256, 64, 4)  # 262144 / 196608: fits neither
MID = config(128, 128, 64, 7)  # 229376 / 196608: fits sm_90 only
SMALL = config(64, 64, 32, 2)  # 16384 / 8192: fits both
SPEC = jax.ShapeDtypeStruct((SIZE, SIZE), jnp.float16)


def matmul(configs, **options):
    kernel = triton.autotune(configs, key=["M"])(matmul_kernel)

    def f(a, b):
        return tritonplug.triton_call(a, b, kernel=kernel, out_type=SPEC, M=SIZE, N=SIZE, K=SIZE, **options,
                                      grid=lambda m: (SIZE // m["BLOCK_M"], SIZE // m["BLOCK_N"]))
    return f


def lowered_kernels(configs, capability, autotune):
    """The kernels (name, shared memory, num_warps) a lowering for ``sm_<capability>`` carries, and its path."""
    fn = matmul(configs, compute_capability=capability, autotune=autotune)
    text = jax.jit(fn).trace(SPEC, SPEC).lower(lowering_platforms=("cuda",)).as_text()
    (call,) = kernel_calls(text)
    calls = [c["kernel_call"] for c in call["autotuned_kernel_call"]["configs"]] \
        if "autotuned_kernel_call" in call else [call["kernel_call"]]
    return [c["kernel"]["shared_mem_bytes"] for c in calls], tritonplug.inspection.paths()[-1]


@for_backend("cuda")
def test_first_picks_the_first_configuration_that_fits_sm_90():
    shared, path = lowered_kernels([BIG, MID, SMALL], 90, "first")
    assert shared == [229376]
    assert len(path.skipped) == 1 and path.skipped[0].startswith("[BLOCK_M=256, BLOCK_N=256, BLOCK_K=64")
    assert "needs 262144 B of shared memory, more than the 232448 B" in path.skipped[0]


@for_backend("cuda")
def test_first_on_sm_80_skips_the_configuration_between_the_limits():
    shared, path = lowered_kernels([BIG, MID, SMALL], 80, "first")
    assert shared == [8192]
    assert [s.split("]")[0] for s in path.skipped] == ["[BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, num_warps=8, "
                                                       "num_stages=4, num_ctas=1",
                                                       "[BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, "
                                                       "num_stages=7, num_ctas=1"]
    assert all("more than the 166912 B a block may use on cuda:80" in s for s in path.skipped)


@for_backend("cuda")
def test_first_compiles_no_configuration_after_the_one_that_fits():
    def resolved():
        return sum(state.compiler.stats[k] for k in ("compiled", "disk_hits", "memory_hits"))

    before = resolved()
    shared, path = lowered_kernels([SMALL, BIG], 90, "first")
    assert shared == [16384] and path.skipped == ()
    assert resolved() - before == 1


@for_backend("cuda")
@pytest.mark.parametrize(("capability", "kept"), [(90, [229376, 16384]), (80, [8192])])
def test_runtime_hands_jaxlib_only_the_configurations_that_fit(capability, kept):
    shared, path = lowered_kernels([BIG, MID, SMALL], capability, "runtime")
    assert shared == kept
    assert len(path.skipped) == 3 - len(kept)


@for_backend("cuda")
@pytest.mark.parametrize("autotune", ["first", "runtime"])
def test_no_configuration_fits_is_a_clear_error_and_records_nothing(autotune):
    paths, plans = len(tritonplug.inspection.paths()), len(state.plans.entries)
    with pytest.raises(OutOfResourcesError) as info:
        lowered_kernels([BIG, MID], 80, autotune)
    message = str(info.value)
    assert "kernel 'matmul_kernel': no configuration fits cuda:80 (166912 B of shared memory per block)" in message
    assert "[BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4, num_ctas=1] needs 196608 B" in message
    assert "[BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=7, num_ctas=1] needs 196608 B" in message
    assert len(tritonplug.inspection.paths()) == paths and len(state.plans.entries) <= plans


@for_backend("cuda")
@requires_cuda_device
def test_tune_reports_a_configuration_that_does_not_fit_as_not_run(private_cache):
    device = jax.devices("cuda")[0]
    if device.compute_capability != "9.0":
        pytest.skip(f"the shared memory figures here are sm_90's, the device is {device.compute_capability}")
    a = jax.device_put(jnp.ones((SIZE, SIZE), jnp.float16), device)
    report = tritonplug.tune(matmul([BIG, SMALL]), a, a)
    (call,) = report.calls
    big, small = call.timings
    assert big.median_us is None and big.error.startswith("not run: [BLOCK_M=256, BLOCK_N=256, BLOCK_K=64")
    assert "needs 262144 B of shared memory" in big.error and small.median_us is not None
    assert call.winner == small.description and "not run: [BLOCK_M=256" in str(report)


def test_a_tuning_report_shows_a_configuration_not_run_as_such():
    timings = (ConfigTiming("big", {}, None, "not run: [big] needs 262144 B of shared memory"),
               ConfigTiming("small", {}, 12.5), ConfigTiming("odd", {}, None, "RuntimeError: launch failed"))
    text = str(TuningReport((TunedCall("k", "cuda", "cuda:90", {"args": ()}, "small", timings, True, "id"),)))
    assert "      not run: [big] needs 262144 B" in text and "failed: not run" not in text
    assert "failed: RuntimeError: launch failed" in text


@for_backend("interpret")
def test_the_interpreter_has_no_limit():
    a = jnp.ones((SIZE, SIZE), jnp.float16)
    jax.jit(matmul([BIG], autotune="first")).lower(a, a)
    path = tritonplug.inspection.paths()[-1]
    assert path.platform == "cpu" and path.skipped == ()


@for_backend("cuda")
def test_the_cuda_plugin_declares_each_architecture_s_limit():
    backend = state.host().backend_for("cuda")
    limits = {cc: backend.detect_target("cuda", None, {"compute_capability": cc}).max_shared_mem
              for cc in (70, 75, 80, 86, 89, 90, 100, 120, 61)}
    assert limits == {70: 98304, 75: 65536, 80: 166912, 86: 101376, 89: 101376, 90: 232448, 100: 232448,
                      120: 101376, 61: None}


class BadLimit:
    @hookimpl
    def tritonplug_backend_info(self):
        return tritonplug.records.BackendInfo("bad_limit", ("cpu",), "0", ir_stages=())

    @hookimpl
    def tritonplug_detect_target(self, platform, device, requested):
        return Target("bad_limit", "cpu", "host", 1, None, requested.get("limit"))

    @hookimpl
    def tritonplug_parse_options(self, target, call_options):
        return Options()

    @hookimpl
    def tritonplug_compile(self, job):
        return Binary(job.kernel_name, "bad_limit")

    @hookimpl
    def tritonplug_make_kernel(self, target, binary, launch):
        return HostKernel(launch.kernel_name, lambda operands, results: None, launch)


@pytest.mark.parametrize("limit", [0, -1, 1.5, "64k", True])
def test_a_target_with_a_malformed_limit_is_a_plugin_error(limit):
    backend = Host().register(BadLimit(), name="bad_limit")
    assert backend is not None
    assert backend.detect_target("cpu", None, {"limit": 65536}).max_shared_mem == 65536
    with pytest.raises(PluginError, match=r"max_shared_mem .* not a positive int of bytes or None"):
        backend.detect_target("cpu", None, {"limit": limit})


@given(need=st.integers(0, 1 << 20), limit=st.none() | st.integers(1, 1 << 20))
def test_misfit_exactly_when_the_need_exceeds_a_known_limit(need, limit):
    target = Target("cuda", "cuda", 90, 32, "cuda", limit)
    why = fitting.misfit(target, Binary("k", "cuda", {}, {"shared": need}))
    assert (why is not None) == (limit is not None and need > limit)
    if why is not None:
        assert f"needs {need} B" in why and f"the {limit} B" in why
