"""Persisted autotuning: ``tritonplug.tune``, the records in the cache directory, tuning files, and the
lowerings they change (the CPU interpreter for real; the ``cuda`` lowering on a machine without a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from helpers import ROOT, for_backend, requires_backend
from tuning_kernels import BLOCKS, FRESH_PROCESS, tagged_copy, tagged_copy_kernel

import tritonplug
from tritonplug.adapters import triton_compat
from tritonplug.inspection import kernel_calls
from tritonplug.tuning.records import FILE_FORMAT, decode_file

cuda = for_backend("cuda")
interpret = requires_backend("interpret")
SPEC = jax.ShapeDtypeStruct((192, 192), jnp.float16)


def record(kernel, config: dict, *, backend="cuda", target=None, args=None, dtypes=None, constexprs=None) -> dict:
    """A tuning record written by hand, as a user shipping tuned configurations would."""
    return {"kernel": kernel.fn.__name__, "source": triton_compat.source_key(kernel.fn), "backend": backend,
            "target": target or {"platform": "cuda", "arch": "90", "warp_size": 32},
            "key": {"args": args or {}, "dtypes": dtypes or [], "constexprs": constexprs or {}}, "config": config}


def tuning_file(path: Path, *records: dict) -> Path:
    path.write_text(json.dumps({"format": FILE_FORMAT, "version": 1, "records": list(records)}))
    return path


def matmul_record(kernel, block_m=64, block_n=128, block_k=32, stages=4, warps=4) -> dict:
    config = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8, "num_warps": warps,
              "num_stages": stages, "num_ctas": 1}
    return record(kernel, config, args={"M": 192, "N": 192, "K": 192}, dtypes=["float16"] * 3)


def lower_matmul_for_cuda(matmul) -> list[dict]:
    text = jax.jit(lambda a, b: matmul(a, b)).trace(SPEC, SPEC).lower(lowering_platforms=("cuda",)).as_text()
    return kernel_calls(text)


def on_the_cpu(x):
    """``x`` on the CPU, where the interpret backend runs, whatever JAX's default device is."""
    return jax.device_put(x, jax.devices("cpu")[0])


def fresh_process(cache: Path, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TRITONPLUG_TUNING")}
    environment.update(JAX_PLATFORMS="cpu", TRITONPLUG_CACHE_DIR=str(cache), **env)
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS.format(tests=str(ROOT / "tests"))], env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@interpret
def test_tune_on_the_cpu_records_the_fastest_and_a_new_process_uses_it(private_cache: Path):
    x = on_the_cpu(jnp.arange(1000, dtype=jnp.float32))
    report = tritonplug.tune(tagged_copy, x)
    (tuned,) = report.calls
    assert tuned.kernel == "tagged_copy_kernel" and tuned.backend == "interpret"
    assert sorted(t.config["BLOCK"] for t in tuned.timings) == list(BLOCKS)
    assert all(t.median_us is not None and t.median_us > 0 for t in tuned.timings)
    fastest = min(tuned.timings, key=lambda t: t.median_us)
    assert tuned.winner == fastest.description and tuned.persisted
    assert "tagged_copy_kernel" in str(report)
    # This process lowers the winner now; so does a new one, from the cache directory alone.
    _, block = jax.jit(tagged_copy)(x)
    assert int(block[0]) == fastest.config["BLOCK"]
    child = fresh_process(private_cache)
    assert child["block"] == fastest.config["BLOCK"] and child["stats"]["tuned_hits"] == 1


@interpret
def test_a_record_makes_the_cpu_lowering_use_its_configuration_not_the_first(private_cache: Path, tmp_path: Path):
    cpu_target = {"platform": "cpu", "arch": 90, "warp_size": 32}  # the interpret backend's front-end target
    chosen = record(tagged_copy_kernel, {"BLOCK": 128, "num_warps": 1, "num_stages": 3, "num_ctas": 1},
                    backend="interpret", target=cpu_target, args={"n": 1000},
                    dtypes=["float32", "float32", "int32"])
    assert fresh_process(private_cache)["block"] == BLOCKS[0]  # no record: the first configuration
    child = fresh_process(private_cache, TRITONPLUG_TUNING_FILE=str(tuning_file(tmp_path / "t.json", chosen)))
    assert child["block"] == 128 and child["stats"]["tuned_hits"] == 1


@cuda
def test_a_hand_written_tuning_file_makes_the_cuda_lowering_carry_one_configuration(private_cache, tmp_path,
                                                                                     monkeypatch):
    from matmul import CONFIGS, matmul, matmul_kernel

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    (call,) = lower_matmul_for_cuda(matmul)
    assert len(call["autotuned_kernel_call"]["configs"]) == len(CONFIGS)  # no record: every configuration
    before = tritonplug.compile_stats()
    path = tuning_file(tmp_path / "tuned.json", matmul_record(matmul_kernel))
    monkeypatch.setenv("TRITONPLUG_TUNING_FILE", str(path))
    (call,) = lower_matmul_for_cuda(matmul)
    assert "autotuned_kernel_call" not in call
    assert call["kernel_call"]["grid_0"] == 3 * 2  # BLOCK_M=64, BLOCK_N=128 over 192x192
    after = tritonplug.compile_stats()
    assert after["tuned_hits"] == before["tuned_hits"] + 1
    assert after["runtime_autotuned"] == before["runtime_autotuned"]


def matmul_autotune_first(a, b):
    """``examples/matmul.py``'s call, asking for ``autotune="first"``."""
    from matmul import matmul_kernel

    (m, k), (_, n) = a.shape, b.shape
    return tritonplug.triton_call(
        a, b, m, n, k, k, 1, n, 1, n, 1, kernel=matmul_kernel, out_type=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=lambda meta: (tritonplug.cdiv(m, meta["BLOCK_M"]) * tritonplug.cdiv(n, meta["BLOCK_N"]),),
        autotune="first")


@cuda
def test_autotune_first_lowers_the_first_configuration_untuned_and_the_record_s_once_tuned(private_cache, tmp_path,
                                                                                             monkeypatch):
    from matmul import CONFIGS, matmul_kernel

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    (call,) = lower_matmul_for_cuda(matmul_autotune_first)
    assert "autotuned_kernel_call" not in call  # no timing on the device
    first = CONFIGS[0].kwargs
    assert call["kernel_call"]["grid_0"] == -(-192 // first["BLOCK_M"]) * -(-192 // first["BLOCK_N"])
    path = tuning_file(tmp_path / "tuned.json", matmul_record(matmul_kernel, block_m=64, block_n=128))
    monkeypatch.setenv("TRITONPLUG_TUNING_FILE", str(path))
    assert (first["BLOCK_M"], first["BLOCK_N"]) != (64, 128)  # else the record could not be told from the first
    (call,) = lower_matmul_for_cuda(matmul_autotune_first)
    assert call["kernel_call"]["grid_0"] == 3 * 2


def test_autotune_refuses_an_unknown_mode_at_the_call():
    x = jnp.zeros((4,), jnp.float32)
    with pytest.raises(ValueError, match=r"autotune must be one of \['runtime', 'first'\].*'fastest'"):
        tritonplug.triton_call(x, kernel=tagged_copy_kernel, out_type=x, grid=(1,), autotune="fastest")


STALE_KERNEL = '''
import triton, triton.language as tl
from matmul import CONFIGS

@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, c_ptr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    rm = (pid % tl.cdiv(M, BLOCK_M)) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid // tl.cdiv(M, BLOCK_M)) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k * BLOCK_K + rk)[None, :] * stride_ak)
        b = tl.load(b_ptr + (k * BLOCK_K + rk)[:, None] * stride_bk + rn[None, :] * stride_bn)
        acc += tl.dot(a, b){edit}
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(tl.float16))
'''


@cuda
def test_a_record_for_an_edited_kernel_is_never_used(private_cache, tmp_path, monkeypatch):
    import importlib.util

    from matmul import CONFIGS

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")

    def load(name: str, edit: str):
        (tmp_path / f"{name}.py").write_text(STALE_KERNEL.format(edit=edit))
        spec = importlib.util.spec_from_file_location(name, tmp_path / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.matmul_kernel

    def matmul_with(kernel):
        def matmul(a, b):
            return tritonplug.triton_call(a, b, 192, 192, 192, 192, 1, 192, 1, 192, 1, kernel=kernel,
                                          out_shape=SPEC, grid=lambda meta: (36,))
        return matmul

    original = load("stale_v1", "")
    monkeypatch.setenv("TRITONPLUG_TUNING_FILE", str(tuning_file(tmp_path / "t.json", matmul_record(original))))
    (call,) = lower_matmul_for_cuda(matmul_with(original))
    assert "kernel_call" in call  # the record applies to the kernel it was made for
    edited = load("stale_v2", "\n        acc = acc * 1.0")
    assert triton_compat.source_key(edited.fn) != triton_compat.source_key(original.fn)
    (call,) = lower_matmul_for_cuda(matmul_with(edited))
    assert len(call["autotuned_kernel_call"]["configs"]) == len(CONFIGS)


@cuda
@pytest.mark.parametrize("content", [b"{not json", b'{"format": "something-else"}',
                                     b'{"format": "tritonplug-tuning", "version": 1, "records": [], "sha256": "00"}',
                                     b'{"format": "tritonplug-tuning", "version": 1, "records": [{"source": 1}]}'])
def test_a_corrupt_tuning_file_is_a_warning_never_a_failure(private_cache, tmp_path, monkeypatch, content):
    from matmul import CONFIGS, matmul

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    path = tmp_path / "corrupt.json"
    path.write_bytes(content)
    monkeypatch.setenv("TRITONPLUG_TUNING_FILE", str(path))
    with pytest.warns(RuntimeWarning, match="ignoring the tuning file.*corrupt.json"):
        (call,) = lower_matmul_for_cuda(matmul)
    assert len(call["autotuned_kernel_call"]["configs"]) == len(CONFIGS)


@cuda
def test_a_missing_tuning_file_is_a_warning(private_cache, tmp_path, monkeypatch):
    from matmul import matmul

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    monkeypatch.setenv("TRITONPLUG_TUNING_FILE", str(tmp_path / "absent.json"))
    with pytest.warns(RuntimeWarning, match="absent.json"):
        lower_matmul_for_cuda(matmul)


def cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TRITONPLUG_")}
    environment.update(JAX_PLATFORMS="cpu", TRITONPLUG_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "tritonplug", *args], env=environment, capture_output=True,
                          text=True, timeout=120)


@interpret
def test_export_and_import_move_records_between_cache_directories(private_cache: Path, tmp_path: Path):
    tritonplug.tune(tagged_copy, on_the_cpu(jnp.arange(1000, dtype=jnp.float32)))
    exported = tmp_path / "tuned.json"
    assert cli("tune", "export", str(exported), cache=private_cache).returncode == 0
    (moved,) = decode_file(exported.read_bytes())
    assert moved.kernel == "tagged_copy_kernel" and moved.backend == "interpret"
    other = tmp_path / "other-cache"
    done = cli("tune", "import", str(exported), cache=other)
    assert done.returncode == 0 and "imported_records: 1" in done.stdout
    listed = json.loads(cli("--json", "tune", "list", cache=other).stdout)["records"]
    assert [r["config"] for r in listed] == [dict(moved.config)]
    assert fresh_process(other)["block"] == moved.config["BLOCK"]


def test_import_of_a_damaged_file_changes_nothing(tmp_path: Path):
    good = record(tagged_copy_kernel, {"BLOCK": 64}, backend="interpret",
                  target={"platform": "cpu", "arch": 90, "warp_size": 32})
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps({"format": FILE_FORMAT, "version": 1, "records": [good, {"backend": "x"}]}))
    done = cli("tune", "import", str(damaged), cache=tmp_path / "cache")
    assert done.returncode == 1 and "tritonplug: error: nothing imported" in done.stderr and "record 1" in done.stderr
    assert json.loads(cli("--json", "tune", "list", cache=tmp_path / "cache").stdout)["records"] == []


def test_tune_refuses_bad_settings_and_non_callables():
    with pytest.raises(TypeError, match="callable"):
        tritonplug.tune(42)
    from tritonplug.tuner import Tuner

    with pytest.raises(ValueError, match="runs"):
        Tuner(runs=0)


@interpret
def test_tune_without_autotuned_calls_reports_nothing(private_cache):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = tritonplug.tune(lambda x: x + 1, jnp.ones(4))
    assert report.calls == () and "no autotuned triton_call" in str(report)
