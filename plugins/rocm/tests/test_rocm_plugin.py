"""The ROCm backend's hooks, called directly with hand-made records: target detection, option
parsing, a real compile for gfx942 (no GPU needed) and the HSACO file jaxlib's runtime reads."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_test_support import SCALE_KERNEL_BLOCK, assert_plugin_imports, distribution_metadata, scale_kernel_ttir
from plugin_test_support import tomllib as _tomllib
from tritonplug_rocm import compat, hsaco_files, plugin

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
GFX942 = Target("rocm", "rocm", "gfx942", 64, "hip", 65536)


# ----------------------------------------------------------------------------- backend info and target

def test_backend_info_names_rocm_and_the_triton_version():
    info = plugin.tritonplug_backend_info()
    assert info.name == "rocm" and info.platforms == ("rocm",)
    assert info.version.endswith(f"+triton{compat.TRITON_VERSION}")


def test_detect_target_serves_only_rocm(monkeypatch):
    monkeypatch.setenv(plugin.ARCH_VARIABLE, "gfx942")
    assert plugin.tritonplug_detect_target("cuda", None, {}) is None
    assert plugin.tritonplug_detect_target("cpu", None, {}) is None


@pytest.mark.parametrize(("variable", "target"), [
    ("gfx942", GFX942),
    ("GFX942:sramecc+:xnack-", GFX942),  # the feature suffix ROCm tools print
    ("gfx90a", Target("rocm", "rocm", "gfx90a", 64, "hip", 65536)),
    ("gfx950", Target("rocm", "rocm", "gfx950", 64, "hip", 163840)),  # 160 KiB of LDS
    ("gfx1100", Target("rocm", "rocm", "gfx1100", 32, "hip")),  # RDNA: 32-wide wavefronts; no limit in the table
])
def test_detect_target_reads_the_arch_variable(monkeypatch, variable, target):
    monkeypatch.setenv(plugin.ARCH_VARIABLE, variable)
    assert plugin.tritonplug_detect_target("rocm", None, {}) == target


def test_detect_target_without_a_device_or_an_arch_names_the_variable(monkeypatch):
    monkeypatch.delenv(plugin.ARCH_VARIABLE, raising=False)
    with pytest.raises(ValueError, match=rf"set {plugin.ARCH_VARIABLE}=gfx942"):
        plugin.tritonplug_detect_target("rocm", None, {})


@pytest.mark.parametrize("variable", ["mi300", "gfx94", "sm_90"])
def test_a_bad_arch_variable_is_named(monkeypatch, variable):
    monkeypatch.setenv(plugin.ARCH_VARIABLE, variable)
    with pytest.raises(ValueError, match=rf"{plugin.ARCH_VARIABLE} must be an AMD GPU architecture such as gfx942"):
        plugin.tritonplug_detect_target("rocm", None, {})


# ----------------------------------------------------------------------------- options

def test_parse_options_fills_triton_defaults_and_drops_unset_ones():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    options = plugin.tritonplug_parse_options(GFX942, {"num_warps": None, "num_stages": None, "num_ctas": None,
                                                       "debug": None, "enable_fp_fusion": None})
    fusion = make_backend(GPUTarget("hip", "gfx942", 64)).parse_options({}).enable_fp_fusion  # Triton's own default
    assert options == Options.from_mapping({"num_warps": 4, "num_stages": 2, "enable_fp_fusion": fusion})


def test_parse_options_keeps_rocm_options_triton_knows():
    options = plugin.tritonplug_parse_options(GFX942, {"num_warps": 16, "num_stages": 0, "num_ctas": 1,
                                                       "waves_per_eu": 2, "debug": True, "enable_fp_fusion": False})
    assert options.as_dict() == {"num_warps": 16, "num_stages": 0, "num_ctas": 1, "waves_per_eu": 2, "debug": True,
                                 "enable_fp_fusion": False}


@pytest.mark.parametrize(("bad", "error", "message"), [
    ({"num_warps": 3}, ValueError, r"num_warps must be a power of two between 1 and 16, got 3"),
    ({"num_warps": 32}, ValueError, r"num_warps must be a power of two between 1 and 16, got 32"),
    ({"num_warps": False}, ValueError, r"num_warps must be a power of two"),
    ({"num_stages": -1}, ValueError, r"num_stages must be a non-negative int, got -1"),
    ({"num_ctas": 2}, ValueError, r"num_ctas must be 1 on ROCm, got 2"),
    ({"enable_fp_fusion": "no"}, TypeError, r"enable_fp_fusion must be a bool, got 'no'"),
    ({"debug": 0}, TypeError, r"debug must be a bool, got 0"),
    ({"maxnreg": 128}, ValueError, r"unknown ROCm backend option\(s\) \['maxnreg'\] in backend_options; "
                                   r"Triton's HIPOptions has \[.*'waves_per_eu'"),  # a CUDA option
])
def test_parse_options_refuses_bad_values_naming_the_option(bad, error, message):
    with pytest.raises(error, match=message):
        plugin.tritonplug_parse_options(GFX942, bad)


# ----------------------------------------------------------------------------- compile and kernel object

@pytest.fixture(scope="module")
def gfx942_binary() -> Binary:
    options = plugin.tritonplug_parse_options(GFX942, {"num_warps": 4})
    job = CompileJob("rocm", "scale_kernel", GFX942, options, scale_kernel_ttir("hip", "gfx942", 64))
    return plugin.tritonplug_compile(job)


def test_compile_makes_an_hsaco_for_gfx942(gfx942_binary):
    assert gfx942_binary.kernel_name == "scale_kernel" and gfx942_binary.format == "rocm"
    assert set(gfx942_binary.images) == {"hsaco", "amdgcn", "ttir"}
    assert gfx942_binary.images["hsaco"][:4] == b"\x7fELF"
    amdgcn = gfx942_binary.images["amdgcn"].decode()
    assert "gfx942" in amdgcn and "scale_kernel" in amdgcn
    meta = gfx942_binary.metadata
    assert meta["name"] == "scale_kernel" and meta["num_warps"] == 4
    assert meta["triton_version"] == compat.TRITON_VERSION
    assert json.loads(json.dumps(meta)) == meta, "the disk cache stores metadata as JSON"


def _launch() -> Launch:
    spec = BufferSpec((1000,), "float32")
    return Launch("scale_kernel", (8, 1, 1), (ArrayParam(0), ArrayParam(1), ScalarParam(1000, "i32"),
                                              ConstexprParam(SCALE_KERNEL_BLOCK)),
                  ("x_ptr", "out_ptr", "n", "BLOCK"), (spec,), (spec,))


def test_make_kernel_names_the_hsaco_by_content_and_recreates_it(gfx942_binary):
    """jaxlib's ROCm runtime reads the HSACO from the path in ``image`` and deletes the file: the path names
    the content (so it is the same in every process) and each lowering re-creates a file that is gone."""
    launch = _launch()
    first = plugin.tritonplug_make_kernel(GFX942, gfx942_binary, launch)
    assert isinstance(first, GpuKernel) and first.launch is launch
    assert (first.kernel_name, first.num_warps, first.num_ctas, first.compute_capability) == \
        ("scale_kernel", 4, 1, 0)
    assert first.module_image is None and first.ttir == gfx942_binary.images["ttir"].decode()
    digest = hashlib.sha256(gfx942_binary.images["hsaco"]).hexdigest()
    assert first.image == f"/proc/self/fd/{hsaco_files.FD}/{digest}.hsaco"
    assert Path(first.image).read_bytes() == gfx942_binary.images["hsaco"]
    Path(first.image).unlink()  # what jaxlib does after reading it
    second = plugin.tritonplug_make_kernel(GFX942, gfx942_binary, launch)
    assert second.image == first.image and Path(second.image).read_bytes() == gfx942_binary.images["hsaco"]


_HOLDER = """
import sys
from tritonplug_rocm import hsaco_files
path = hsaco_files.hsaco_path(sys.stdin.buffer.readline().strip())
print(path, flush=True)
sys.stdin.readline()  # the parent has deleted its own file by now
print(open(path, "rb").read().decode(), flush=True)
"""


def test_the_same_hsaco_path_in_another_process_is_another_file():
    """A file one process's runtime deletes is never one another process still needs."""
    content = b"not really an hsaco " + os.urandom(8).hex().encode()
    child = subprocess.Popen([sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=False)
    try:
        child.stdin.write(content + b"\n")
        child.stdin.flush()
        their_path = child.stdout.readline().decode().strip()
        mine = hsaco_files.hsaco_path(content)
        assert mine == their_path
        os.unlink(mine)
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == content
    finally:
        child.kill()
        child.wait()


# ----------------------------------------------------------------------------- distribution

def test_plugin_imports_only_what_it_may():
    assert_plugin_imports(PLUGIN_ROOT / "tritonplug_rocm", third_party={"triton"})


@pytest.mark.skipif(_tomllib is None, reason="needs tomllib (Python 3.11+)")
def test_distribution_metadata():
    meta = distribution_metadata(PLUGIN_ROOT)
    assert meta["project"]["name"] == "tritonplug-rocm"
    assert set(meta["project"]["dependencies"]) == {"tritonplug", "triton>=3.6.0"}
    assert meta["project"]["entry-points"]["tritonplug.backends"] == {"rocm": "tritonplug_rocm.plugin"}
    assert meta["tool"]["setuptools"]["packages"] == ["tritonplug_rocm"]
