"""Kernel calls on several devices: placement, shard_map, pmap, and sharded arrays refused.

Four CPU devices exist only if XLA_FLAGS is set before JAX initialises, so the checks run
in a child process (``SCRIPT``) that prints one JSON report; each test asserts on its
part. The child routes the ``cpu`` platform to a small backend that delegates to the
interpreter and records the device each lowering's target was detected for.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from helpers import cpu_devices_env, requires_backend

pytestmark = requires_backend("interpret")

SCRIPT = textwrap.dedent('''
    import json, sys, traceback
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import tritonplug
    from tritonplug.hookspecs import hookimpl
    from tritonplug.records import BackendInfo
    from tritonplug_interpret import plugin as interpret
    from kernels import add_kernel

    SEEN = []

    class Recorder:
        @hookimpl
        def tritonplug_backend_info(self):
            return BackendInfo("recorder", ("cpu",), "0", "interpret, recording detected devices", ir_stages=(),
                               cache_binaries=False, compile_in_worker=False, autotune="first")

        @hookimpl
        def tritonplug_detect_target(self, platform, device, requested):
            SEEN.append(None if device is None else device.id)
            return interpret.tritonplug_detect_target(platform=platform, device=device, requested=requested)

        @hookimpl
        def tritonplug_parse_options(self, target, call_options):
            return interpret.tritonplug_parse_options(target=target, call_options=call_options)

        @hookimpl
        def tritonplug_compile(self, job):
            return interpret.tritonplug_compile(job=job)

        @hookimpl
        def tritonplug_make_kernel(self, target, binary, launch):
            return interpret.tritonplug_make_kernel(target=target, binary=binary, launch=launch)

    tritonplug.register_plugin(Recorder(), name="recorder")

    def add(x, y):
        return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_type=jax.typeof(x),
                                      grid=(-(-x.size // 16),), BLOCK=16)

    devs = jax.devices()
    x, y = np.arange(64, dtype=np.float32), np.full(64, 0.5, np.float32)
    report = {"devices": len(devs)}

    def check(name, fn, expected=None):
        SEEN.clear()
        try:
            out = fn()
            entry = {"ok": True, "seen": list(SEEN)}
            if expected is not None:
                entry["correct"] = bool(np.array_equal(np.asarray(out), expected))
            if hasattr(out, "sharding"):
                entry["out_devices"] = sorted(d.id for d in out.sharding.device_set)
        except Exception as exc:
            entry = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "seen": list(SEEN)}
        report[name] = entry

    on2 = [jax.device_put(a, devs[2]) for a in (x, y)]
    check("eager_on_device_2", lambda: add(*on2), x + y)
    on3 = [jax.device_put(a, devs[3]) for a in (x, y)]
    check("jit_on_device_3", lambda: jax.jit(add)(*on3), x + y)
    check("jit_on_default_device", lambda: jax.jit(add)(x, y), x + y)

    def under_default_device_1():
        with jax.default_device(devs[1]):
            return jax.jit(add)(x, y)

    check("jit_under_default_device_1", under_default_device_1, x + y)

    mesh = jax.sharding.Mesh(np.array(devs[::-1]), ("i",))  # device 3 first
    sharded = [jax.device_put(a, NamedSharding(mesh, P("i"))) for a in (x, y)]
    check("shard_map", lambda: jax.jit(jax.shard_map(add, mesh=mesh, in_specs=(P("i"), P("i")),
                                                     out_specs=P("i")))(*sharded), x + y)
    check("vmap_inside_shard_map", lambda: jax.jit(jax.shard_map(
        jax.vmap(add), mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P("i")))(
        *[a.reshape(8, 8) for a in sharded]), (x + y).reshape(8, 8))
    check("pmap", lambda: jax.pmap(add)(x.reshape(4, 16), y.reshape(4, 16)), (x + y).reshape(4, 16))
    check("pmap_on_devices_1_2", lambda: jax.pmap(add, devices=devs[1:3])(x.reshape(2, 32), y.reshape(2, 32)),
          (x + y).reshape(2, 32))

    check("sharded_eager", lambda: add(*sharded))
    check("sharded_jit", lambda: jax.jit(add)(*sharded))
    replicated = NamedSharding(mesh, P())
    check("replicated_jit_on_4_devices", lambda: jax.jit(add, in_shardings=(replicated, replicated))(x, y))
    mesh2 = jax.make_mesh((2, 2), ("a", "b"))
    partial = [jax.device_put(a, NamedSharding(mesh2, P("a"))) for a in (x, y)]
    check("shard_map_with_an_automatic_axis", lambda: jax.jit(jax.shard_map(
        add, mesh=mesh2, in_specs=(P("a"), P("a")), out_specs=P("a"), axis_names={"a"}))(*partial))
    print("REPORT " + json.dumps(report))
''')


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    script = tmp_path_factory.mktemp("multidevice") / "four_devices.py"
    script.write_text(SCRIPT)
    env = cpu_devices_env(4, TRITONPLUG_BACKENDS="cpu:recorder")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    result = json.loads(lines[-1].removeprefix("REPORT "))
    assert result["devices"] == 4
    return result


def ran(entry):
    assert entry["ok"], entry.get("error")
    assert entry["correct"]
    return entry


def test_target_is_detected_for_the_device_the_call_runs_on(report):
    assert ran(report["eager_on_device_2"])["seen"] == [2]
    assert report["eager_on_device_2"]["out_devices"] == [2]
    assert ran(report["jit_on_device_3"])["seen"] == [3]
    assert report["jit_on_device_3"]["out_devices"] == [3]
    assert ran(report["jit_on_default_device"])["seen"] == [0]
    assert ran(report["jit_under_default_device_1"])["seen"] == [1]
    assert report["jit_under_default_device_1"]["out_devices"] == [1]


def test_shard_map_runs_the_kernel_on_each_shard(report):
    entry = ran(report["shard_map"])
    assert entry["seen"] == [3]  # the mesh's first device, not device 0
    assert entry["out_devices"] == [0, 1, 2, 3]
    assert ran(report["vmap_inside_shard_map"])["out_devices"] == [0, 1, 2, 3]


def test_pmap(report):
    assert ran(report["pmap"])["out_devices"] == [0, 1, 2, 3]
    entry = ran(report["pmap_on_devices_1_2"])
    assert entry["seen"] == [1] and entry["out_devices"] == [1, 2]


@pytest.mark.parametrize("case", ["sharded_eager", "sharded_jit", "replicated_jit_on_4_devices",
                                  "shard_map_with_an_automatic_axis"])
def test_calls_partitioned_by_xla_are_refused(report, case):
    entry = report[case]
    assert not entry["ok"]
    assert entry["error"].startswith("ValueError") and "jax.shard_map" in entry["error"]
    assert "partitioned over" in entry["error"] and entry["seen"] == []
