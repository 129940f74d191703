"""Backends declare what they are: a plugin for platforms the host never names, driven by its BackendInfo.

The accelerator example (``tests/plugins/accelerator_backend``, pip-installed in ``tox -e plugins``)
serves ``oneapi`` and ``tpu``, asks for TTIR, compiles in workers, caches on disk, and promises a
specialisation policy of its own. Everything is checked by lowering for those platforms on the CPU.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from helpers import requires_backend
from kernels import add_kernel

import tritonplug
from tritonplug.compile.backends import Host, capability_problem
from tritonplug.errors import PluginError
from tritonplug.hookspecs import hookimpl
from tritonplug.process.state import state
from tritonplug.records import BackendInfo


def add(x, y, n=None):
    return tritonplug.triton_call(x, y, x.size if n is None else n, kernel=add_kernel,
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,), BLOCK=64)


def _ttir_of_last_compile(before: set[str]) -> str:
    new = [b for k, b in state.compiler._memory.items() if k not in before]
    assert len(new) == 1, f"expected one new binary, got {len(new)}"
    return new[0].images["ttir"].decode()


@pytest.mark.plugins
@requires_backend("accelerator")
@pytest.mark.parametrize("platform", ["tpu", "oneapi"])
def test_lowering_for_a_platform_the_host_never_names(platform: str) -> None:
    x = jnp.arange(128, dtype=jnp.float32)
    before = set(state.compiler._memory)
    compiled = state.compiler.stats["compiled"]
    lowered = jax.jit(add).trace(x, x).lower(lowering_platforms=(platform,))
    assert "tritonplug_host_kernel" in lowered.as_text()  # the accelerator's host kernel, emitted for `platform`
    ttir = _ttir_of_last_compile(before)
    assert "tt.func" in ttir and "add_kernel" in ttir  # the host ran Triton's front end for it
    assert state.compiler.stats["compiled"] == compiled + 1
    assert tritonplug.backend_for(platform).name == "accelerator"


@pytest.mark.plugins
@requires_backend("accelerator")
def test_the_backends_specialisation_policy_reaches_the_ttir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRITONPLUG_CACHE_DIR", str(tmp_path / "cache"))
    state.reset()
    x = jnp.arange(128, dtype=jnp.float32)
    before = set(state.compiler._memory)
    jax.jit(lambda a, b: add(a, b, n=1)).trace(x, x).lower(lowering_platforms=("tpu",))
    ttir = _ttir_of_last_compile(before)
    # pointer_divisibility=8 (not Triton's 16), integer_divisibility=0 and specialize_ones=False:
    # n=1 stays an i32 parameter instead of becoming a constant.
    assert "tt.divisibility = 8" in ttir and "tt.divisibility = 16" not in ttir
    assert ttir.count("!tt.ptr<f32>") >= 3 and ": i32" in ttir
    state.reset()


@pytest.mark.plugins
@requires_backend("accelerator")
def test_a_new_process_takes_the_accelerator_binary_from_the_disk_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRITONPLUG_CACHE_DIR", str(tmp_path / "cache"))
    state.reset()
    x = jnp.arange(256, dtype=jnp.float32)
    jax.jit(lambda a, b: add(a, b)).trace(x, x).lower(lowering_platforms=("oneapi",))
    assert state.compiler.stats["compiled"] >= 1
    hits = state.compiler.stats["disk_hits"]
    state.reset()  # forget the in-memory binaries, as a new process would
    jax.jit(lambda a, b: add(a, b)).trace(x, x).lower(lowering_platforms=("oneapi",))
    assert state.compiler.stats["disk_hits"] == hits + 1
    state.reset()


@pytest.mark.parametrize(("change", "words"), [
    ({"ir_stages": ("llvm",)}, "ir_stages"),
    ({"ir_stages": "ttir"}, "ir_stages"),
    ({"autotune": "fastest"}, "autotune"),
    ({"cache_binaries": "yes"}, "cache_binaries"),
    ({"pointer_divisibility": 12}, "pointer_divisibility"),
    ({"integer_divisibility": -16}, "integer_divisibility"),
])
def test_a_malformed_capability_record_is_refused_by_name(change: dict, words: str) -> None:
    info = dataclasses.replace(BackendInfo("odd", ("cpu",), "0"), **change)
    assert words in capability_problem(info)

    class Plugin:
        @hookimpl
        def tritonplug_backend_info(self):
            return info

        @hookimpl
        def tritonplug_detect_target(self, platform, device, requested):
            return None

        @hookimpl
        def tritonplug_parse_options(self, target, call_options):
            return None

        @hookimpl
        def tritonplug_compile(self, job):
            return None

        @hookimpl
        def tritonplug_make_kernel(self, target, binary, launch):
            return None

    with pytest.raises(PluginError, match=f"plugin 'odd_plugin': its BackendInfo declares {words}"):
        Host().register(Plugin(), name="odd_plugin")


def test_the_default_capabilities_describe_a_gpu_like_backend() -> None:
    info = BackendInfo("gpu", ("cuda",), "1")
    assert capability_problem(info) is None
    assert (info.ir_stages, info.cache_binaries, info.compile_in_worker, info.autotune) == (
        ("ttir",), True, True, "runtime")
    assert (info.pointer_divisibility, info.integer_divisibility, info.specialize_ones) == (16, 16, True)


def test_a_platform_jax_does_not_know_is_reported_and_the_others_still_lower(monkeypatch) -> None:
    from tritonplug.lowering.primitive import ensure_lowering_rules

    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "interpret")  # the host kernel's custom call marks the lowering
    with pytest.warns(RuntimeWarning, match="declares the platform 'metal', which JAX cannot lower for"):
        ensure_lowering_rules({"metal", "tpu"})
    x = jnp.arange(128, dtype=jnp.float32)
    assert "tritonplug_host_kernel" in jax.jit(lambda a, b: add(a, b)).trace(x, x).lower(
        lowering_platforms=("cpu",)).as_text()
