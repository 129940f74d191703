"""The CUDA backend's hooks, called directly with hand-made records: target detection, option
parsing, a real compile for sm_90 (no GPU needed) and the kernel object jaxlib launches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plugin_test_support import SCALE_KERNEL_BLOCK, assert_plugin_imports, distribution_metadata, scale_kernel_ttir
from plugin_test_support import tomllib as _tomllib
from tritonplug_cuda import compat, plugin

from tritonplug.records import (
    ArrayParam,
    Binary,
    BufferSpec,
    CompileJob,
    ConstexprParam,
    GpuKernel,
    Launch,
    Options,
    ScalarParam,
    Target,
)

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
SM90 = Target("cuda", "cuda", 90, 32, "cuda", 232448)


@pytest.fixture
def no_arch_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(plugin.ARCH_VARIABLE, raising=False)


# ----------------------------------------------------------------------------- backend info and target

def test_backend_info_names_cuda_and_the_triton_version():
    info = plugin.tritonplug_backend_info()
    assert info.name == "cuda" and info.platforms == ("cuda",)
    assert info.version.endswith(f"+triton{compat.TRITON_VERSION}")


def test_detect_target_serves_only_cuda(no_arch_variable):
    assert plugin.tritonplug_detect_target("rocm", None, {"compute_capability": 90}) is None
    assert plugin.tritonplug_detect_target("cpu", None, {}) is None


@pytest.mark.parametrize("asked", [90, "90", "9.0", "sm_90", "sm_90a", " SM_90 "])
def test_detect_target_reads_the_compute_capability_in_its_spellings(no_arch_variable, asked):
    assert plugin.tritonplug_detect_target("cuda", None, {"compute_capability": asked}) == SM90


def test_detect_target_falls_back_to_the_environment(monkeypatch):
    monkeypatch.setenv(plugin.ARCH_VARIABLE, "8.0")
    assert plugin.tritonplug_detect_target("cuda", None, {}) == Target("cuda", "cuda", 80, 32, "cuda", 166912)
    # what the call asks for wins over the environment
    assert plugin.tritonplug_detect_target("cuda", None, {"compute_capability": 90}) == SM90


def test_detect_target_without_a_device_or_a_capability_names_both_knobs(no_arch_variable):
    with pytest.raises(ValueError, match=rf"compute_capability=90 .*{plugin.ARCH_VARIABLE}=90"):
        plugin.tritonplug_detect_target("cuda", None, {})


@pytest.mark.parametrize(("asked", "message"), [("hopper", "must be a compute capability such as 90"),
                                                (30, "compute capability 30 is outside the range"),
                                                (250, "compute capability 250 is outside the range")])
def test_detect_target_refuses_a_bad_capability(no_arch_variable, asked, message):
    with pytest.raises(ValueError, match=f"compute_capability.*{message}"):
        plugin.tritonplug_detect_target("cuda", None, {"compute_capability": asked})


def test_a_bad_arch_variable_is_named(monkeypatch):
    monkeypatch.setenv(plugin.ARCH_VARIABLE, "sm_x")
    with pytest.raises(ValueError, match=plugin.ARCH_VARIABLE):
        plugin.tritonplug_detect_target("cuda", None, {})


# ----------------------------------------------------------------------------- options

def test_parse_options_fills_triton_defaults_and_drops_unset_ones():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    options = plugin.tritonplug_parse_options(SM90, {"num_warps": None, "num_stages": None, "num_ctas": None,
                                                     "debug": None, "enable_fp_fusion": None})
    fusion = make_backend(GPUTarget("cuda", 90, 32)).parse_options({}).enable_fp_fusion  # Triton's own default
    assert options == Options.from_mapping({"num_warps": 4, "num_stages": 3, "enable_fp_fusion": fusion})


def test_parse_options_keeps_cuda_options_triton_knows():
    options = plugin.tritonplug_parse_options(SM90, {"num_warps": 8, "num_stages": 0, "num_ctas": 2,
                                                     "enable_fp_fusion": False, "maxnreg": 128})
    assert options.as_dict() == {"num_warps": 8, "num_stages": 0, "num_ctas": 2, "enable_fp_fusion": False,
                                 "maxnreg": 128}


@pytest.mark.parametrize(("bad", "error", "message"), [
    ({"num_warps": 3}, ValueError, r"num_warps must be a power of two between 1 and 32, got 3"),
    ({"num_warps": 64}, ValueError, r"num_warps must be a power of two between 1 and 32, got 64"),
    ({"num_warps": True}, ValueError, r"num_warps must be a power of two"),
    ({"num_stages": -1}, ValueError, r"num_stages must be a non-negative int, got -1"),
    ({"num_stages": 2.0}, ValueError, r"num_stages must be a non-negative int, got 2.0"),
    ({"num_ctas": 0}, ValueError, r"num_ctas must be one of \(1, 2, 4, 8\) on sm_90 .*got 0"),
    ({"num_ctas": 16}, ValueError, r"num_ctas must be one of \(1, 2, 4, 8\) on sm_90 .*got 16"),
    ({"num_ctas": 3}, ValueError, r"num_ctas must be one of \(1, 2, 4, 8\) on sm_90 .*got 3"),
    ({"enable_fp_fusion": 1}, TypeError, r"enable_fp_fusion must be a bool, got 1"),
    ({"debug": "yes"}, TypeError, r"debug must be a bool, got 'yes'"),
    ({"warp_count": 2}, ValueError, r"unknown CUDA backend option\(s\) \['warp_count'\] in backend_options; "
                                    r"Triton's CUDAOptions has \[.*'num_warps'"),
    ({"waves_per_eu": 2}, ValueError, r"unknown CUDA backend option\(s\) \['waves_per_eu'\]"),  # a ROCm option
])
def test_parse_options_refuses_bad_values_naming_the_option(bad, error, message):
    with pytest.raises(error, match=message):
        plugin.tritonplug_parse_options(SM90, bad)


def test_clusters_need_hopper():
    sm80 = Target("cuda", "cuda", 80, 32, "cuda")
    assert plugin.tritonplug_parse_options(sm80, {"num_ctas": 1}).get("num_ctas") == 1
    with pytest.raises(ValueError, match=r"num_ctas=2 needs thread-block clusters .*the target is sm_80"):
        plugin.tritonplug_parse_options(sm80, {"num_ctas": 2})
    assert plugin.tritonplug_parse_options(SM90, {"num_ctas": 8}).get("num_ctas") == 8
    info = plugin.tritonplug_backend_info()
    assert info.max_grid == (2**31 - 1, 65535, 65535) and "maxnreg" in info.option_names


# ----------------------------------------------------------------------------- compile and kernel object

@pytest.fixture(scope="module")
def sm90_binary() -> Binary:
    options = plugin.tritonplug_parse_options(SM90, {"num_warps": 4})
    job = CompileJob("cuda", "scale_kernel", SM90, options, scale_kernel_ttir("cuda", 90, 32))
    return plugin.tritonplug_compile(job)


def test_compile_makes_ptx_and_a_cubin_for_sm90(sm90_binary):
    assert sm90_binary.kernel_name == "scale_kernel" and sm90_binary.format == "cuda"
    assert set(sm90_binary.images) == {"ptx", "cubin", "ttir"}
    ptx = sm90_binary.images["ptx"].decode()
    assert ".target sm_90" in ptx and ".entry scale_kernel" in ptx
    assert sm90_binary.images["cubin"][:4] == b"\x7fELF"
    assert "tt.func public @scale_kernel" in sm90_binary.images["ttir"].decode()
    meta = sm90_binary.metadata
    assert meta["name"] == "scale_kernel" and meta["num_warps"] == 4 and meta["num_ctas"] == 1
    assert meta["triton_version"] == compat.TRITON_VERSION
    assert json.loads(json.dumps(meta)) == meta, "the disk cache stores metadata as JSON"


def test_compile_leaves_tritons_cache_variable_as_it_was(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    options = plugin.tritonplug_parse_options(SM90, {"num_warps": 2})
    plugin.tritonplug_compile(CompileJob("cuda", "scale_kernel", SM90, options, scale_kernel_ttir("cuda", 90, 32)))
    assert list(tmp_path.iterdir()) == [], "Triton wrote into the user's cache"


def _launch() -> Launch:
    spec = BufferSpec((1000,), "float32")
    return Launch("scale_kernel", (8, 1, 1), (ArrayParam(0), ArrayParam(1), ScalarParam(1000, "i32"),
                                              ConstexprParam(SCALE_KERNEL_BLOCK)),
                  ("x_ptr", "out_ptr", "n", "BLOCK"), (spec,), (spec,))


def test_make_kernel_carries_the_ptx_the_cubin_and_the_launch(sm90_binary, monkeypatch):
    monkeypatch.delenv(plugin.MODULE_IMAGE_VARIABLE, raising=False)
    launch = _launch()
    kernel = plugin.tritonplug_make_kernel(SM90, sm90_binary, launch)
    assert isinstance(kernel, GpuKernel) and kernel.launch is launch
    assert (kernel.kernel_name, kernel.num_warps, kernel.num_ctas, kernel.compute_capability) == \
        ("scale_kernel", 4, 1, 90)
    assert kernel.image == sm90_binary.images["ptx"].decode()
    assert kernel.module_image == sm90_binary.images["cubin"]
    assert kernel.ttir == sm90_binary.images["ttir"].decode()
    assert kernel.shared_mem_bytes == sm90_binary.metadata.get("shared", 0)
    monkeypatch.setenv(plugin.MODULE_IMAGE_VARIABLE, "0")
    assert plugin.tritonplug_make_kernel(SM90, sm90_binary, launch).module_image is None


# ----------------------------------------------------------------------------- distribution

def test_plugin_imports_only_what_it_may():
    assert_plugin_imports(PLUGIN_ROOT / "tritonplug_cuda", third_party={"triton"})


@pytest.mark.skipif(_tomllib is None, reason="needs tomllib (Python 3.11+)")
def test_distribution_metadata():
    meta = distribution_metadata(PLUGIN_ROOT)
    assert meta["project"]["name"] == "tritonplug-cuda"
    assert set(meta["project"]["dependencies"]) == {"tritonplug", "triton>=3.6.0"}
    assert meta["project"]["entry-points"]["tritonplug.backends"] == {"cuda": "tritonplug_cuda.plugin"}
    assert meta["tool"]["setuptools"]["packages"] == ["tritonplug_cuda"]
