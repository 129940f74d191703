"""The interpret backend's hooks that need no kernel run: backend info, target detection, option
parsing; and the rules its distribution keeps. (Compile and make_kernel: test_interpret_runner_launch.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin_test_support import assert_plugin_imports, distribution_metadata
from plugin_test_support import tomllib as _tomllib
from tritonplug_interpret import compat, plugin

from tritonplug.records import Options, Target

PLUGIN_ROOT = Path(__file__).resolve().parents[1]


def test_backend_info_and_target():
    info = plugin.tritonplug_backend_info()
    assert info.name == "interpret" and info.platforms == ("cpu", ) and info.version
    assert info.version.endswith(f"+triton{compat.TRITON_VERSION}")
    target = plugin.tritonplug_detect_target("cpu", None, {})
    # Triton's front end runs for the CPU as for sm_90, so source and argument errors match a GPU's
    assert target == Target(backend="interpret", platform="cpu", arch=90, warp_size=32, triton_backend="cuda")
    assert plugin.tritonplug_detect_target("cuda", None, {}) is None
    assert (info.ir_stages, info.cache_binaries, info.compile_in_worker, info.autotune) == (
        ("ttir",), True, False, "first")
    assert info.max_grid == (2**31 - 1, 65535, 65535)
    assert {"num_warps", "maxnreg", "waves_per_eu"} <= set(info.option_names)


def test_parse_options_validates_like_a_gpu_backend():
    target = plugin.tritonplug_detect_target("cpu", None, {})
    parse = plugin.tritonplug_parse_options
    options = parse(target, {"num_warps": 8, "num_stages": 0, "num_ctas": 1, "enable_fp_fusion": False,
                             "debug": None, "maxnreg": 128, "waves_per_eu": None})
    assert options == Options.from_mapping({"num_warps": 8, "num_stages": 0, "num_ctas": 1,
                                            "enable_fp_fusion": False, "maxnreg": 128})
    assert parse(target, {"num_warps": None}) == Options()
    assert parse(target, {"num_warps": 32, "num_ctas": 8}).get("num_ctas") == 8  # sm_90's largest
    for bad, error in [({"num_warps": 3}, ValueError), ({"num_warps": 0}, ValueError),
                       ({"num_warps": True}, ValueError), ({"num_warps": 64}, ValueError),
                       ({"num_stages": -1}, ValueError),
                       ({"num_stages": 1.5}, ValueError), ({"num_ctas": 0}, ValueError),
                       ({"num_ctas": 16}, ValueError), ({"num_ctas": 3}, ValueError),
                       ({"enable_fp_fusion": 1}, TypeError), ({"debug": "yes"}, TypeError),
                       ({"maxnreg": [1, 2]}, TypeError), ({"some_option": 1}, ValueError)]:
        name = next(iter(bad))
        with pytest.raises(error, match=name):
            parse(target, bad)


@pytest.mark.parametrize(("bad", "message"), [
    ({"num_warps": 3}, r"num_warps must be a power of two between 1 and 32, got 3"),
    ({"num_stages": -1}, r"num_stages must be a non-negative int, got -1"),
    ({"num_ctas": 0}, r"num_ctas must be one of \(1, 2, 4, 8\) .*got 0"),
    ({"maxnreg": [1, 2]}, r"option maxnreg must be hashable, got list \[1, 2\]"),
    ({"some_option": 1}, r"unknown interpret backend option\(s\) \['some_option'\] in backend_options; Triton's "
                         r"GPU backends \(CUDAOptions, HIPOptions\) has"),
])
def test_parse_options_errors_say_what_was_expected(bad, message):
    target = plugin.tritonplug_detect_target("cpu", None, {})
    with pytest.raises((ValueError, TypeError), match=message):
        plugin.tritonplug_parse_options(target, bad)


def test_plugin_imports_only_what_it_may():
    assert_plugin_imports(PLUGIN_ROOT / "tritonplug_interpret", third_party={"triton", "numpy", "ml_dtypes", "jax"})


@pytest.mark.skipif(_tomllib is None, reason="needs tomllib (Python 3.11+)")
def test_distribution_metadata():
    meta = distribution_metadata(PLUGIN_ROOT)
    project = meta["project"]
    assert project["name"] == "tritonplug-interpret"
    assert set(project["dependencies"]) == {"tritonplug", "triton>=3.6.0", "numpy", "ml_dtypes", "jax>=0.10.2"}
    assert project["entry-points"]["tritonplug.backends"] == {"interpret": "tritonplug_interpret.plugin"}
    assert meta["build-system"]["build-backend"] == "setuptools.build_meta"
    assert meta["tool"]["setuptools"]["packages"] == ["tritonplug_interpret", "tritonplug_interpret.xla"]
