"""The rest of jax-triton 0.4's surface: tuples, Refs, options, side effects, export, TensorDescriptor.

Numeric tests run on every execution platform (``device``); checks of the payload a GPU
would get lower for CUDA without a GPU.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
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
from helpers import requires_backend
from kernels import accumulate_kernel, add_kernel

import tritonplug
from tritonplug import jaxlib_compat
from tritonplug.inspection import kernel_calls

cuda = requires_backend("cuda")
interpret = requires_backend("interpret")
RNG = np.random.default_rng(11)


def normal(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def put(device, *arrays):
    return [jax.device_put(a, device) for a in arrays]


def add(x, y, **kw):
    return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_type=jax.typeof(x),
                                  grid=(triton.cdiv(x.size, 32),), BLOCK=32, **kw)


def cuda_payload(fn, *specs):
    text = jax.jit(fn).trace(*specs).lower(lowering_platforms=("cuda",)).as_text()
    return text, kernel_calls(text)


SPEC8 = jax.ShapeDtypeStruct((8,), jnp.float32)


# --------------------------------------------------------------------------- tuple operands

@triton.jit
def nested_tuple_kernel(x_ptr, ab_c, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ab = ab_c[0]
    total = tl.load(x_ptr + offs) + tl.load(ab[0] + offs) * tl.load(ab[1] + offs) - tl.load(ab_c[1] + offs)
    tl.store(out_ptr + offs, total)


@triton.jit
def scale_add_kernel(scale, xy, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, scale * (tl.load(xy[0] + offs) + tl.load(xy[1] + offs).to(tl.float32)))


def test_nested_tuple_operand(device):
    x, a, b, c = put(device, *(normal(16) for _ in range(4)))
    out = jax.jit(lambda x, a, b, c: tritonplug.triton_call(x, ((a, b), c), kernel=nested_tuple_kernel,
                                                            out_type=jax.typeof(x), grid=1, BLOCK=16))(x, a, b, c)
    want = np.asarray(x) + np.asarray(a) * np.asarray(b) - np.asarray(c)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)


@pytest.mark.parametrize("second_dtype", [np.float32, np.float16])
def test_scalar_before_a_tuple_of_mixed_dtypes(device, second_dtype):
    x, y = put(device, normal(16), normal(16, dtype=second_dtype))

    def f(x, y):
        return tritonplug.triton_call(3.0, (x, y), kernel=scale_add_kernel, out_type=jax.typeof(x), grid=(1,),
                                      BLOCK=16)

    for out in (f(x, y), jax.jit(f)(x, y)):
        want = 3.0 * (np.asarray(x) + np.asarray(y).astype(np.float32))
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)


# --------------------------------------------------------------------------- Refs

@triton.jit
def acc_tuple_kernel(x_ptr, acc_and_bias, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.load(acc_and_bias[0] + offs) + tl.load(x_ptr + offs)
    tl.store(acc_and_bias[0] + offs, acc)
    tl.store(out_ptr + offs, acc + tl.load(acc_and_bias[1] + offs))


@triton.jit
def scale_in_place_kernel(scale, x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * scale)


def test_ref_inside_a_tuple_with_an_allocated_output(device):
    x, acc, bias = put(device, normal(16), normal(16), normal(16))

    def f(x, acc, bias):
        ref = jax.new_ref(acc)
        out = tritonplug.triton_call(x, (ref, bias), kernel=acc_tuple_kernel, out_type=jax.typeof(x), grid=1,
                                     BLOCK=16)
        return out, ref[...]

    for out, updated in (f(x, acc, bias), jax.jit(f)(x, acc, bias)):
        np.testing.assert_allclose(np.asarray(updated), np.asarray(acc) + np.asarray(x), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(out), np.asarray(updated) + np.asarray(bias), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(acc), np.asarray(put(device, acc)[0]))  # acc itself unchanged


def test_scalar_before_a_ref_and_empty_out_type(device):
    (x,) = put(device, normal(16))
    ref = jax.new_ref(x)
    assert tritonplug.triton_call(2.5, ref, kernel=scale_in_place_kernel, out_type=(), grid=1, BLOCK=16) == ()
    np.testing.assert_allclose(np.asarray(ref[...]), 2.5 * np.asarray(x), rtol=1e-6)

    def jitted(x):
        r = jax.new_ref(x)
        assert tritonplug.triton_call(-2.0, r, kernel=scale_in_place_kernel, out_type=(), grid=1, BLOCK=16) == ()
        return r[...]

    np.testing.assert_allclose(np.asarray(jax.jit(jitted)(x)), -2.0 * np.asarray(x), rtol=1e-6)


def test_refs_cannot_be_combined_with_input_output_aliases():
    x = jnp.ones(8, jnp.float32)
    with pytest.raises(ValueError, match="cannot be combined with Ref"):
        tritonplug.triton_call(x, jax.new_ref(x), 8, kernel=accumulate_kernel, out_type=jax.typeof(x), grid=1,
                               input_output_aliases={0: 0}, BLOCK=8)


# --------------------------------------------------------------------------- autotune and heuristics

@triton.jit
def add_in_place_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def inc_pair_kernel(pair, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(pair[0] + offs, tl.load(pair[0] + offs, mask=mask) + 1, mask=mask)
    tl.store(pair[1] + offs, tl.load(pair[1] + offs, mask=mask) + 2, mask=mask)


def _configs():
    return [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=1)]


def test_autotuned_aliased_call_applies_its_effect_once(device):
    kernel = triton.autotune(_configs(), key=["n"])(add_in_place_kernel)
    x, y = put(device, normal(256), normal(256))
    out = tritonplug.triton_call(x, y, 256, kernel=kernel, out_type=jax.typeof(x),
                                 grid=lambda m: (triton.cdiv(256, m["BLOCK"]),), input_output_aliases={0: 0})
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) + np.asarray(y))


def test_autotuned_call_on_a_tuple_of_refs_applies_its_effect_once(device):
    kernel = triton.autotune(_configs(), key=["n"])(inc_pair_kernel)
    a, b = put(device, normal(128), normal(128))
    a_ref, b_ref = jax.new_ref(a), jax.new_ref(b)
    assert tritonplug.triton_call((a_ref, b_ref), 128, kernel=kernel, out_type=(),
                                  grid=lambda m: (triton.cdiv(128, m["BLOCK"]),)) == ()
    np.testing.assert_array_equal(np.asarray(a_ref[...]), np.asarray(a) + 1)
    np.testing.assert_array_equal(np.asarray(b_ref[...]), np.asarray(b) + 2)


@interpret
def test_heuristics_run_once_per_config_in_order_and_leave_configs_alone():
    seen = []

    def even(args):
        seen.append((args["BLOCK"], args["n"]))
        return args["n"] % args["BLOCK"] == 0

    @triton.jit
    def kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    configs = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 16})]
    tuned = triton.autotune(configs, key=["n"])(triton.heuristics({"EVEN": even})(kernel))
    x = jnp.ones(96, jnp.float32)
    call = jax.jit(lambda x: tritonplug.triton_call(x, x, x.size, kernel=tuned, out_type=jax.typeof(x),
                                                    grid=lambda m: (triton.cdiv(96, m["BLOCK"]),)))
    call.lower(x)
    assert seen == [(64, 96), (32, 96), (16, 96)]
    assert [c.kwargs for c in configs] == [{"BLOCK": 64}, {"BLOCK": 32}, {"BLOCK": 16}]
    np.testing.assert_array_equal(np.asarray(call(x)), 2 * np.ones(96, np.float32))


# --------------------------------------------------------------------------- scalars and output types

@triton.jit
def add_scalar_kernel(x_ptr, y, out_ptr):
    tl.store(out_ptr, tl.load(x_ptr) + y)


@triton.jit
def scaled_copy_kernel(scale, x_ptr, out_ptr):
    i = tl.program_id(0)
    tl.store(out_ptr + i, scale * tl.load(x_ptr + i))


@pytest.mark.parametrize("value", [42.0, np.float32(42.0), 1e-30, float("inf"), -float("inf")])
def test_float_scalar_into_a_zero_dimensional_output(device, value):
    (x,) = put(device, np.array([1.0], np.float32))
    out = tritonplug.triton_call(x, value, kernel=add_scalar_kernel, out_type=jax.ShapeDtypeStruct((), x.dtype),
                                 grid=1)
    assert out.shape == ()
    np.testing.assert_array_equal(np.asarray(out), np.float32(1.0) + np.float32(value))


def test_int_one_in_first_position(device):
    (x,) = put(device, np.arange(8, dtype=np.float32) + 1)
    out = tritonplug.triton_call(1, x, kernel=scaled_copy_kernel, out_type=jax.typeof(x), grid=(x.size,))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x))
    out = tritonplug.triton_call(3, x, kernel=scaled_copy_kernel, out_type=jax.typeof(x), grid=(x.size,))
    np.testing.assert_array_equal(np.asarray(out), 3 * np.asarray(x))


@cuda
def test_int_one_is_specialised_unless_do_not_specialize():
    dns_kernel = triton.jit(do_not_specialize=["scale"])(scaled_copy_kernel.fn)

    def f(kernel):
        return lambda x: tritonplug.triton_call(1, x, kernel=kernel, out_type=jax.typeof(x), grid=(8,),
                                                compute_capability=90, debug=True)  # debug: TTIR in the payload

    (call,) = cuda_payload(f(scaled_copy_kernel), SPEC8)[1]
    assert call["kernel_call"]["parameters"] == [{"array": {"ptr_divisibility": 16}}] * 2
    (call,) = cuda_payload(f(dns_kernel), SPEC8)[1]
    assert call["kernel_call"]["parameters"][0] == {"i32": 1}
    assert "%scale: i32" in call["kernel_call"]["kernel"]["ttir"]


def test_out_type_from_jax_typeof_and_do_not_specialize(device):
    kernel = triton.jit(do_not_specialize=["n"])(add_kernel.fn)
    x, y = put(device, normal(40), normal(40))
    out = tritonplug.triton_call(x, y, x.size, kernel=kernel, out_type=jax.typeof(x), grid=(2,), BLOCK=32)
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) + np.asarray(y))


# --------------------------------------------------------------------------- @triton.jit constexprs

@triton.jit
def add_fn(a, b):
    return a + b


@triton.jit
def mul_fn(a, b):
    return a * b


@triton.jit
def dispatch_kernel(x_ptr, y_ptr, out_ptr, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, FN(tl.load(x_ptr + offs), tl.load(y_ptr + offs)))


def dispatch(x, y, fn, **kw):
    return tritonplug.triton_call(x, y, kernel=dispatch_kernel, out_type=jax.typeof(x), grid=(1,), FN=fn, BLOCK=8,
                                  **kw)


def test_jit_function_as_constexpr_selects_the_code(device):
    x, y = put(device, normal(8), normal(8))
    before = tritonplug.compile_stats()
    np.testing.assert_array_equal(np.asarray(dispatch(x, y, add_fn)), np.asarray(x) + np.asarray(y))
    middle = tritonplug.compile_stats()
    np.testing.assert_array_equal(np.asarray(dispatch(x, y, mul_fn)), np.asarray(x) * np.asarray(y))
    after = tritonplug.compile_stats()
    # mul_fn gives a cache key of its own: found compiled nowhere in memory, so compiled or read from disk
    assert after["memory_hits"] == middle["memory_hits"]
    assert after["compiled"] + after["disk_hits"] == middle["compiled"] + middle["disk_hits"] + 1
    assert middle["compiled"] + middle["disk_hits"] <= before["compiled"] + before["disk_hits"] + 1


@cuda
def test_jit_function_constexpr_reaches_the_ttir():
    ttirs = [cuda_payload(lambda x, y, fn=fn: dispatch(x, y, fn, compute_capability=90, debug=True), SPEC8, SPEC8)[1][0]
             ["kernel_call"]["kernel"]["ttir"] for fn in (add_fn, mul_fn)]
    assert "arith.addf" in ttirs[0] and "arith.mulf" not in ttirs[0]
    assert "arith.mulf" in ttirs[1]


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
    """On the interpreter path (the XLA path's export runs anywhere: tests/test_xla_path.py)."""
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


# --------------------------------------------------------------------------- TensorDescriptor

def test_tensor_descriptor_record():
    base = jnp.arange(24.0, dtype=jnp.float32).reshape(4, 6)
    desc = tritonplug.TensorDescriptor.from_array(base, block_shape=[2, 3])
    assert (desc.shape, desc.strides, desc.block_shape) == ((4, 6), (6, 1), (2, 3))
    assert (desc.layout, desc.padding, desc.round_f32_to_tf32) == (None, "zero", False)
    leaves, tree = jax.tree_util.tree_flatten(desc)
    assert len(leaves) == 1 and leaves[0] is base
    doubled = jax.tree_util.tree_map(lambda a: a * 2, desc)
    assert doubled.block_shape == (2, 3) and float(doubled.base[1, 1]) == 14.0
    assert jax.jit(lambda d: d.base.sum() + d.shape[0])(desc) == base.sum() + 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        desc.padding = "nan"
    with pytest.raises(ValueError, match="padding must be 'zero' or 'nan', got 'inf'"):
        tritonplug.TensorDescriptor.from_array(base, [2, 3], padding="inf")
    with pytest.raises(ValueError, match="same length"):
        tritonplug.TensorDescriptor(base, (4, 6), (6, 1), (2,))

