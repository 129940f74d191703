"""The rest of jax-triton 0.4's surface, how a call runs: worker threads, backend options, side
effects, cost estimates, jax.export.

Numeric tests run on every execution platform (``device``); checks of the payload a GPU
would get lower for CUDA without a GPU. Arguments and their types: ``test_surface_arguments.py``.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from surface_support import SPEC8, add, cuda, cuda_payload, interpret, normal, put

import tritonplug
from tritonplug.adapters import jaxlib_compat
from tritonplug.inspection import kernel_calls

# --------------------------------------------------------------------------- threads, options, side effects

def test_call_from_a_worker_thread(device):
    x, y = put(device, normal(64), normal(64))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        out = pool.submit(add, x, y).result()
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) + np.asarray(y))


def test_backend_options(device):
    x, y = put(device, normal(64), normal(64))
    np.testing.assert_array_equal(np.asarray(add(x, y, backend_options={"num_warps": 2})),
                                  np.asarray(x) + np.asarray(y))
    with pytest.raises(ValueError, match="backend_options"):
        add(x, y, num_warps=4, backend_options={"num_warps": 2})
    with pytest.raises(TypeError, match=r"backend_options\['extern_libs'\] must be hashable"):
        add(x, y, backend_options={"extern_libs": {"libdevice": "/path"}})


@triton.jit
def announce_kernel(x_ptr, out_ptr):
    value = tl.load(x_ptr)
    tl.device_print("tritonplug-side-effect ", value)
    tl.store(out_ptr, value)


def unused_call(has_side_effect):
    def f(x):
        tritonplug.triton_call(x, kernel=announce_kernel, out_type=jax.typeof(x), grid=1,
                               has_side_effect=has_side_effect)
        return x + 1
    return f


@interpret
@pytest.mark.parametrize("has_side_effect", [False, True])
def test_has_side_effect_keeps_an_unused_call(has_side_effect, capfd):
    """JAX never drops a call (jax-triton 0.4); has_side_effect also keeps XLA from removing an unused one.
    announce_kernel prints, which only the interpreter path does: the XLA path hands it over."""
    x = jax.device_put(jnp.full((1,), 7.0, jnp.float32), jax.devices("cpu")[0])  # the CPU's host kernel
    text = jax.jit(unused_call(has_side_effect)).lower(x).as_text()
    assert "tritonplug_host_kernel" in text
    capfd.readouterr()
    np.testing.assert_array_equal(np.asarray(jax.jit(unused_call(has_side_effect))(x)), [8.0])
    assert ("tritonplug-side-effect" in capfd.readouterr().out) == has_side_effect


@cuda
@pytest.mark.parametrize("has_side_effect", [False, True])
def test_has_side_effect_reaches_the_gpu_custom_call(has_side_effect):
    text, _ = cuda_payload(lambda x: tritonplug.triton_call(x, kernel=announce_kernel, out_type=jax.typeof(x), grid=1,
                                                            has_side_effect=has_side_effect, compute_capability=90),
                           SPEC8)
    line = next(s for s in text.splitlines() if "custom_call @triton_kernel_call_ffi" in s)
    assert ("has_side_effect = true" in line) == has_side_effect


# --------------------------------------------------------------------------- cost estimates

COST = {"flops": 123, "bytes_accessed": 456}


@interpret
def test_cost_estimate_reaches_the_cpu_custom_call(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "interpret")  # the XLA path has no custom call to annotate
    x = jnp.ones(8, jnp.float32)
    hlo = jax.jit(lambda x, y: add(x, y, cost_estimate=COST)).lower(x, x).compiler_ir("hlo").as_hlo_text()
    assert re.search(r"cost_estimate_json\s*=\s*.*flops\\22\s*:\s*123", hlo)
    assert re.search(r"cost_estimate_json\s*=\s*.*bytes_accessed\\22\s*:\s*456", hlo)


@cuda
def test_cost_estimate_on_cuda_depends_on_what_jaxlib_reads():
    text, _ = cuda_payload(lambda x, y: add(x, y, cost_estimate=COST, compute_capability=90), SPEC8, SPEC8)
    line = next(s for s in text.splitlines() if "custom_call @triton_kernel_call_ffi" in s)
    # jaxlib <= 0.11.0 rejects attributes it does not know, so the estimate travels as frontend attributes
    assert ("cost_estimate_json" in line) == jaxlib_compat.accepts_cost_estimate()
    assert 'tritonplug_flops = "123"' in line and 'tritonplug_bytes_accessed = "456"' in line


# --------------------------------------------------------------------------- jax.export

def export(fn, platforms, *specs, **kw):
    exported = jax.export.export(jax.jit(fn), platforms=platforms, **kw)(*specs)
    return jax.export.deserialize(exported.serialize())


SPEC300 = jax.ShapeDtypeStruct((300,), jnp.float32)


@interpret
def test_export_needs_the_disabled_checks(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "interpret")  # the XLA path exports with no custom call
    with pytest.raises(ValueError, match="tritonplug_host_kernel|triton_kernel_call"):
        jax.export.export(jax.jit(lambda x, y: add(x, y)), platforms=["cpu"])(SPEC300, SPEC300)


@cuda
@interpret
def test_multi_platform_export_carries_both_kernels_and_runs_here(monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")  # the payload then carries the PTX on every jaxlib
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")  # checked mode reports through a host callback
    restored = export(lambda x, y: add(x, y, compute_capability=90), ["cuda", "cpu"], SPEC300, SPEC300,
                      disabled_checks=tritonplug.export_disabled_checks())
    assert restored.platforms == ("cuda", "cpu")
    module = restored.mlir_module()
    (call,) = kernel_calls(module)
    kernel = call["kernel_call"]["kernel"]
    assert kernel["kernel_name"] == "add_kernel" and ".target sm_90" in kernel["ptx"]
    assert "custom_call @tritonplug_host_kernel" not in module  # the CPU kernel is compiled by XLA
    x, y = normal(300), normal(300)
    np.testing.assert_array_equal(np.asarray(restored.call(x, y)), x + y)


@interpret
def test_cpu_export_runs_in_this_process_only(tmp_path, monkeypatch):
    """On the interpreter path (the XLA path's export runs anywhere: plugins/interpret/tests/test_xla_path.py)."""
    monkeypatch.setenv("TRITONPLUG_CPU_PATH", "interpret")
    restored = export(lambda x, y: add(x, y), ["cpu"], SPEC300, SPEC300,
                      disabled_checks=tritonplug.export_disabled_checks())
    x, y = (jax.device_put(a, jax.devices("cpu")[0]) for a in (normal(300), normal(300)))
    np.testing.assert_array_equal(np.asarray(restored.call(x, y)), x + y)

    blob = tmp_path / "add.jax_exported"
    blob.write_bytes(restored.serialize())
    script = tmp_path / "run_elsewhere.py"
    script.write_text(
        "import sys, jax, jax.numpy as jnp\n"
        "import tritonplug\n"
        f"restored = jax.export.deserialize(bytearray(open({str(blob)!r}, 'rb').read()))\n"
        "x = jnp.ones(300, jnp.float32)\n"
        "print(restored.call(x, x))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode != 0
    assert "tritonplug_host_kernel" in done.stderr


EXPORT_ADD = """
import sys, jax, jax.numpy as jnp, tritonplug
from kernels import add_kernel
spec = jax.ShapeDtypeStruct((300,), jnp.float32)
add = lambda x, y: tritonplug.triton_call(x, y, 300, kernel=add_kernel, out_type=spec, grid=(3,), BLOCK=128)
exported = jax.export.export(jax.jit(add), platforms=["cpu"], disabled_checks=tritonplug.export_disabled_checks())
open(sys.argv[1], "wb").write(exported(spec, spec).serialize())
"""

RUN_AFTER_OWN_KERNEL = """
import sys, jax, jax.numpy as jnp, numpy as np, tritonplug
from kernels import accumulate_kernel
x = jnp.ones(300, jnp.float32)
own = lambda x, a: tritonplug.triton_call(x, a, 300, kernel=accumulate_kernel, out_type=jax.typeof(a), grid=(3,),
                                          input_output_aliases={1: 0}, BLOCK=128)
jax.jit(own).lower(x, x).compile()  # this process registers a host function of its own
restored = jax.export.deserialize(bytearray(open(sys.argv[1], "rb").read()))
print("RESULT", np.asarray(restored.call(x, x))[:3])
"""


@interpret
def test_cpu_export_never_runs_another_processes_kernel(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TRITONPLUG_CPU_PATH": "interpret",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    blob = tmp_path / "add.jax_exported"
    for name, source in (("export_add.py", EXPORT_ADD), ("run_elsewhere.py", RUN_AFTER_OWN_KERNEL)):
        (tmp_path / name).write_text(source)
    subprocess.run([sys.executable, str(tmp_path / "export_add.py"), str(blob)], check=True, capture_output=True,
                   timeout=120, env=env)
    done = subprocess.run([sys.executable, str(tmp_path / "run_elsewhere.py"), str(blob)], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode != 0, f"ran another kernel: {done.stdout.strip()}"
    assert "no host function is registered" in done.stderr
