"""tritonplug.plugin_kit: the checks' errors, Triton's private cache, compiling TTIR, and that the
kit stays importable by a plugin (JAX-free, nothing of the host but records and settings); the one
Triton-options parser the GPU backends share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_test_support import imported_modules, scale_kernel_ttir
from triton.backends.nvidia.compiler import CUDAOptions

from tritonplug import plugin_kit
from tritonplug.records import Binary, BufferSpec, Launch

KIT = Path(plugin_kit.__file__)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: plugin_kit.power_of_two("num_warps", 3, 32), r"num_warps must be a power of two between 1 and 32, got 3"),
    (lambda: plugin_kit.power_of_two("num_warps", 64, 32), r"between 1 and 32, got 64"),
    (lambda: plugin_kit.power_of_two("num_warps", True), r"num_warps must be a positive power of two, got True"),
    (lambda: plugin_kit.power_of_two("num_warps", 0), r"positive power of two, got 0"),
    (lambda: plugin_kit.int_in_range("num_stages", -1, 0), r"num_stages must be a non-negative int, got -1"),
    (lambda: plugin_kit.int_in_range("num_stages", 2.0, 0), r"non-negative int, got 2.0"),
    (lambda: plugin_kit.int_in_range("num_ctas", 0, 1), r"num_ctas must be an int >= 1, got 0"),
    (lambda: plugin_kit.int_in_range("num_ctas", 17, 1, 16), r"num_ctas must be an int between 1 and 16, got 17"),
    (lambda: plugin_kit.int_in_range("num_ctas", False, 0, 16), r"an int between 0 and 16, got False"),
])
def test_number_checks_name_the_option_and_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_number_checks_return_good_values():
    assert plugin_kit.power_of_two("num_warps", 32, 32) == 32 and plugin_kit.power_of_two("num_warps", 1) == 1
    assert plugin_kit.int_in_range("num_stages", 0, 0) == 0 and plugin_kit.int_in_range("num_ctas", 16, 1, 16) == 16


def test_bool_hashable_and_name_checks():
    plugin_kit.check_bools({"debug": True, "enable_fp_fusion": False, "num_warps": 4})
    with pytest.raises(TypeError, match=r"debug must be a bool, got 1"):
        plugin_kit.check_bools({"debug": 1})
    with pytest.raises(TypeError, match=r"flag must be a bool, got 'on'"):
        plugin_kit.check_bools({"flag": "on"}, names=("flag",))
    plugin_kit.check_hashable({"a": (1, 2), "b": None})
    with pytest.raises(TypeError, match=r"option extern_libs must be hashable, got dict \{\}"):
        plugin_kit.check_hashable({"a": 1, "extern_libs": {}})
    assert {"num_warps", "maxnreg"} <= plugin_kit.option_names(CUDAOptions)
    plugin_kit.check_known_options({"num_warps": 4, "maxnreg": 64}, CUDAOptions, "CUDA")
    with pytest.raises(ValueError, match=r"unknown CUDA backend option\(s\) \['a', 'b'\] in backend_options; "
                                         r"Triton's CUDAOptions has \[.*'maxnreg'"):
        plugin_kit.check_known_options({"b": 1, "num_warps": 4, "a": 2}, CUDAOptions, "CUDA")


@pytest.mark.parametrize("before", [None, "/somewhere/else"])
def test_private_triton_cache_is_removed_and_the_variable_restored(monkeypatch, before):
    if before is None:
        monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("TRITON_CACHE_DIR", before)
    with plugin_kit.private_triton_cache():
        scratch = Path(os.environ["TRITON_CACHE_DIR"])
        assert scratch.is_dir() and scratch.name.startswith("tritonplug-triton-")
    assert not scratch.exists()
    assert os.environ.get("TRITON_CACHE_DIR") == before
    with pytest.raises(KeyError), plugin_kit.private_triton_cache():
        raise KeyError("a failed compile")
    assert os.environ.get("TRITON_CACHE_DIR") == before


def test_compile_ttir_and_the_kernel_object_for_sm90():
    compiled = plugin_kit.compile_ttir(scale_kernel_ttir("cuda", 90, 32), "scale_kernel", "cuda", 90, 32,
                                       {"num_warps": 2})
    assert ".target sm_90" in compiled.asm["ptx"] and compiled.metadata["num_warps"] == 2
    kept = compiled.binary_metadata(("name", "num_warps", "no_such_field"))
    assert kept == {"name": "scale_kernel", "num_warps": 2, "triton_version": plugin_kit.TRITON_VERSION}
    binary = Binary("scale_kernel", "cuda", {"ptx": compiled.asm["ptx"].encode(), "ttir": b"module {}"}, kept)
    launch = Launch("scale_kernel", (1, 1, 1), (), (), (BufferSpec((4,), "float32"),), ())
    kernel = plugin_kit.gpu_kernel(binary, launch, "the image", 90)
    assert (kernel.kernel_name, kernel.num_warps, kernel.num_ctas, kernel.shared_mem_bytes) == ("scale_kernel", 2, 1, 0)
    assert (kernel.image, kernel.ttir, kernel.compute_capability, kernel.module_image) == \
        ("the image", "module {}", 90, None)
    assert (kernel.global_scratch_size, kernel.global_scratch_align) == (0, 1) and kernel.launch is launch


def test_the_kit_imports_nothing_of_the_host_but_records_and_settings():
    names = {name for _, name in imported_modules(KIT)}
    assert {name for name in names if name.split(".")[0] == "tritonplug"} == {"tritonplug.records",
                                                                               "tritonplug.settings"}
    assert not {name.split(".")[0] for name in names} & {"jax", "jaxlib", "torch"}
    assert "triton" in {name.split(".")[0] for name in names}, "the check read nothing"


def test_importing_the_kit_imports_no_jax():
    code = ("import sys, tritonplug.plugin_kit; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_triton_options_leaves_a_gpu_backend_only_what_differs(monkeypatch):
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")

    def one_cta(ctas):
        if ctas != 1:
            raise ValueError(f"num_ctas must be 1 here, got {ctas!r}")
        return ctas

    parsed = plugin_kit.triton_options({"num_warps": None, "debug": False}, CUDAOptions, "CUDA", 16, one_cta)
    assert parsed.as_dict() == {"num_warps": CUDAOptions.num_warps, "num_stages": CUDAOptions.num_stages,
                                "debug": False, "enable_fp_fusion": True}
    for options, error in [({"num_warps": 32}, "num_warps must be a power of two between 1 and 16, got 32"),
                           ({"num_stages": -1}, "num_stages must be a non-negative int"),
                           ({"num_ctas": 2}, "num_ctas must be 1 here, got 2"),
                           ({"debug": 1}, "debug must be a bool"),
                           ({"maxnreg_typo": 1}, "unknown CUDA backend option(s) ['maxnreg_typo']")]:
        with pytest.raises((ValueError, TypeError)) as caught:
            plugin_kit.triton_options(options, CUDAOptions, "CUDA", 16, one_cta)
        assert error in str(caught.value)
