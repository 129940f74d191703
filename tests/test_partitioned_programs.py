"""Whole partitioned programs: one exported with its shardings and reloaded in a new process;
examples/partitioned.py, which the README and docs/partitioned.md point to.

Under explicit mesh axes a partitioned launcher is a ``jax.shard_map`` (nothing is left to a Python callback),
so ``jax.export`` serialises the program with the operands' shardings in their types; a second process
deserialises it and runs it on its own 8 CPU devices, and its result is compared with NumPy. Under automatic
axes JAX cannot export a ``custom_partitioning`` op (a Python callback partitions it), which docs/partitioned.md says.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT, cpu_devices_env, requires_backend

pytestmark = requires_backend("interpret")

EXPORT = textwrap.dedent('''
    import sys
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import tritonplug, sharding_kernels as sk
    mesh = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) / 100
    split, whole = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
    f = jax.jit(sk.rms_norm, in_shardings=(split, whole), out_shardings=(split, split))
    with jax.set_mesh(mesh):  # explicit axes: the operands' types carry their shardings while tracing
        args = jax.device_put(x, split), jax.device_put(x[0], whole)
        exported = jax.export.export(f, platforms=["cpu"], disabled_checks=tritonplug.export_disabled_checks())(*args)
    assert exported.nr_devices == 8, exported.nr_devices
    open(sys.argv[1], "wb").write(exported.serialize())
    print("EXPORTED", exported.in_avals)
''')

RELOAD = textwrap.dedent('''
    import sys
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    exported = jax.export.deserialize(open(sys.argv[1], "rb").read())
    mesh = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) / 100
    with jax.set_mesh(mesh):
        y, rstd = exported.call(jax.device_put(x, NamedSharding(mesh, P("x"))), x[0])
    want = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6) * x[0]
    assert np.allclose(y, want, rtol=1e-5, atol=1e-5), np.abs(np.asarray(y) - want).max()
    assert y.sharding.spec[0] == "x", y.sharding
    print("RELOADED", y.sharding.spec)
''')


def _child(source: str, *args: str, tmp_path) -> str:
    script = tmp_path / f"child_{abs(hash(source))}.py"
    script.write_text(source)
    env = cpu_devices_env(8, TRITONPLUG_INTERPRET_CHECK="0")
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


def test_an_exported_partitioned_program_reloads_in_a_new_process(tmp_path):
    blob = tmp_path / "program.bin"
    assert "EXPORTED" in _child(EXPORT, str(blob), tmp_path=tmp_path)
    assert blob.stat().st_size > 0
    assert "RELOADED" in _child(RELOAD, str(blob), tmp_path=tmp_path)


def test_the_readme_example_runs_on_eight_cpu_devices():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TRITONPLUG_INTERPRET_CHECK": "0"}
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "partitioned.py")], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "8 cpu devices" in done.stdout and "matches jnp" in done.stdout
    assert "collectives in the program: none" in done.stdout


def test_a_rule_function_picks_each_calls_rule_and_a_wrong_answer_is_refused():
    import jax
    import numpy as np
    import sharding_kernels as sk

    import tritonplug

    seen = []

    def rule(x, y, scale=2.0):  # called with the function's arguments, defaults filled in
        seen.append((x.shape, scale))
        return tritonplug.sharding_rule("r c, r c -> r c", need_replication=("c",))

    @tritonplug.partitioned(rule)
    def add_scaled(x, y, scale=2.0):
        return sk.add_rows.fn(x, y * scale)

    x = np.ones((4, 16), np.float32)
    np.testing.assert_allclose(jax.jit(add_scaled)(x, x), 3 * x)
    assert seen and seen[-1] == ((4, 16), 2.0)
    bad = tritonplug.partitioned(lambda x, y: 7)(sk.add_rows.fn)
    with pytest.raises(TypeError, match=r"returned 7 \(int\); it returns a rule string"):
        bad(x, x)
    with pytest.raises(TypeError, match="give the keywords to the"):
        tritonplug.partitioned(rule, need_replication=("c",))


def test_two_processes_run_a_partitioned_program_and_compile_each_kernel_once(tmp_path):
    """``jax.distributed`` with two CPU processes (gloo collectives), each with a cache directory of its own: both
    get their rows right, and the coordination service's cache lets one process compile for both."""
    import json

    out = tmp_path / "processes.json"
    env = {**os.environ, "TRITONPLUG_INTERPRET_CHECK": "0"}
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "partitioned_multiprocess.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    reports = json.loads(out.read_text())["reports"]
    assert len(reports) == 2
    for report in reports:
        assert report["add_rows_ok"] and report["rms_norm_ok"] and report["grad_x_ok"] and report["grad_w_ok"], report
    # each process got every kernel, compiled or fetched; in the whole job each was compiled once (which process
    # compiled which depends on who claimed it first)
    stats = [r["compile_stats"] for r in reports]
    got = {s["compiled"] + s["remote_hits"] for s in stats}
    assert len(got) == 1 and min(got) >= 2, stats
    assert sum(s["compiled"] for s in stats) == min(got), stats


CHECKED = textwrap.dedent('''
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import tritonplug, sharding_kernels as sk
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    for kind in ("Auto", "Explicit"):
        mesh = jax.make_mesh((8,), ("x",), axis_types=(getattr(jax.sharding.AxisType, kind),))
        xs = jax.device_put(x, NamedSharding(mesh, P("x")))
        try:
            print(kind, "right" if np.allclose(jax.jit(sk.add_rows)(xs, xs), 2 * x) else "WRONG", flush=True)
        except Exception as exc:
            print(kind, "refused:", str(exc).replace(chr(10), " | "), flush=True)

    @tritonplug.partitioned("r c -> r c")
    def noisy(a):
        jax.debug.callback(lambda v: None, a.sum())
        return sk.add_rows.fn(a, a)

    mesh = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    try:
        jax.jit(noisy)(jax.device_put(x, NamedSharding(mesh, P("x"))))
        print("callback ran")
    except Exception as exc:
        print("callback refused:", str(exc).replace(chr(10), " | "), flush=True)
''')


def test_on_xla_cpu_a_callback_in_a_custom_partitioned_body_is_refused_not_a_crash(tmp_path):
    """XLA:CPU crashes on a host callback inside a custom-partitioned body: the CPU backend's checked mode and a
    ``jax.debug.callback`` in the function are refused, naming the fix; under explicit axes (shard_map) it runs."""
    script = tmp_path / "checked.py"
    script.write_text(CHECKED)
    env = cpu_devices_env(8, TRITONPLUG_INTERPRET_CHECK="1")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-4000:]  # a crash would be a negative return code
    lines = done.stdout.splitlines()
    assert any(line.startswith("Auto refused:") and "checked mode (TRITONPLUG_INTERPRET_CHECK=1)" in line
               and "explicit mesh axes" in line for line in lines), lines
    assert "Explicit right" in lines, lines
    assert any(line.startswith("callback refused:") and "debug_callback" in line for line in lines), lines


def test_collectives_are_read_in_the_async_forms_gpu_programs_use():
    """GPU programs write ``%x = (operand, result) all-gather-start(...)``: a tuple type, with spaces; the
    result (the last array) is what is counted. A fusion that merely calls a computation named after one is not."""
    from tritonplug.inspection import collectives

    text = ("  %all-gather-start = (f32[8,12]{1,0}, f32[8,48]{1,0}) all-gather-start(f32[8,12]{1,0} %p), "
            "channel_id=1\n  %ar = f32[48]{0} all-reduce(f32[48]{0} %x), to_apply=%add\n"
            "  ROOT %cp = bf16[4]{0} collective-permute-start(bf16[4]{0} %y)\n"
            "  %f = f32[2]{0} fusion(f32[2]{0} %z), calls=%all-gather.comp\n")
    assert collectives(text) == [
        {"op": "all-gather", "shape": (8, 48), "dtype": "f32", "bytes": 8 * 48 * 4},
        {"op": "all-reduce", "shape": (48,), "dtype": "f32", "bytes": 48 * 4},
        {"op": "collective-permute", "shape": (4,), "dtype": "bf16", "bytes": 8}]
