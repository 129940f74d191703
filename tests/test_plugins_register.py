"""``tritonplug.register_plugin`` with plugin objects, valid and invalid, in this process and in a
fresh one. Plugins installed by pip: ``test_plugins_broken.py`` and ``test_plugins_example.py``.
"""

from __future__ import annotations

import pytest
from outside_plugins_support import run_python

import tritonplug
from tritonplug.compile.backends import Host
from tritonplug.errors import PluginError
from tritonplug.hookspecs import hookimpl
from tritonplug.process.state import state
from tritonplug.records import BackendInfo, Binary, HostKernel, Options, Target

# --------------------------------------------------------------------------- register_plugin

#: Capabilities of a backend that compiles no IR and runs kernels on the host: no front end, nothing
#: to cache, compiled in this process, first autotune configuration only.
HOST_ONLY = dict(ir_stages=(), cache_binaries=False, compile_in_worker=False, autotune="first")

class Hooks:
    """A complete, valid plugin object; the invalid ones below change one thing each."""

    name = "runtime_fill"

    @hookimpl
    def tritonplug_backend_info(self):
        return BackendInfo(self.name, ("cpu",), "0.0.1", "test plugin object", **HOST_ONLY)

    @hookimpl
    def tritonplug_detect_target(self, platform, device, requested):
        return Target(self.name, "cpu", "host", 1, None) if platform == "cpu" else None

    @hookimpl
    def tritonplug_parse_options(self, target, call_options):
        return Options()

    @hookimpl
    def tritonplug_compile(self, job):
        return Binary(job.kernel_name, self.name)

    @hookimpl
    def tritonplug_make_kernel(self, target, binary, launch):
        return HostKernel(launch.kernel_name, lambda operands, results: None, launch)


class NoHooks:
    def tritonplug_compile(self, job):  # not marked with hookimpl: pluggy does not see it
        return None


class WrongSignature(Hooks):
    @hookimpl
    def tritonplug_compile(self, job, extra):
        return None


class InfoRaises(Hooks):
    @hookimpl
    def tritonplug_backend_info(self):
        raise OSError("cannot read the device list")


class InfoWrongType(Hooks):
    @hookimpl
    def tritonplug_backend_info(self):
        return {"name": "dict_is_not_info"}


class NoPlatforms(Hooks):
    @hookimpl
    def tritonplug_backend_info(self):
        return BackendInfo("no_platforms", "cpu", "0")  # a str, not a tuple of platforms


class UnknownHook(Hooks):
    @hookimpl
    def tritonplug_compile_fast(self, job):
        return None


@pytest.mark.parametrize(("plugin", "match"), [
    (NoHooks(), r"plugin 'NoHooks' .*lacks hooks \['tritonplug_backend_info', .*hookimpl"),
    (WrongSignature(), r"plugin 'WrongSignature' does not match the tritonplug hook specs: .*extra"),
    (InfoRaises(), r"plugin 'InfoRaises' raised in tritonplug_backend_info: OSError: cannot read the device list"),
    (InfoWrongType(), r"plugin 'InfoWrongType': tritonplug_backend_info returned .*not a BackendInfo"),
    (NoPlatforms(), r"plugin 'NoPlatforms': its BackendInfo needs a name and a tuple of platform names"),
    (UnknownHook(), r"plugin 'UnknownHook' implements unknown hooks \['tritonplug_compile_fast'\]"),
], ids=["no_hooks", "wrong_signature", "info_raises", "info_wrong_type", "no_platforms", "unknown_hook"])
def test_register_plugin_rejects_a_broken_object_and_leaves_the_host_unchanged(plugin: object, match: str) -> None:
    host = state.host()
    before = (list(tritonplug.backends()), list(host.manager.get_plugins()))
    with pytest.raises(PluginError, match=match):
        tritonplug.register_plugin(plugin, name=type(plugin).__name__)
    assert (list(tritonplug.backends()), list(host.manager.get_plugins())) == before


def test_register_plugin_rejects_a_second_backend_of_the_same_name() -> None:
    if not tritonplug.backends():
        pytest.skip("no backend is installed to collide with")
    taken = tritonplug.backends()[0].name
    plugin = type("Clash", (Hooks,), {"name": taken})()
    before = list(state.host().manager.get_plugins())
    with pytest.raises(PluginError, match=f"a backend named '{taken}' is already loaded"):
        tritonplug.register_plugin(plugin)
    assert list(state.host().manager.get_plugins()) == before


def test_fresh_host_accepts_a_valid_plugin_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONPLUG_BACKENDS", raising=False)
    host = Host()
    backend = host.register(Hooks(), name="fill")
    assert backend is not None and backend.name == "runtime_fill" and host.backend_for("cpu") is backend
    assert backend.detect_target("cuda", None, {}) is None
    with pytest.raises(PluginError, match="'fill' is already registered"):
        host.register(backend.plugin, name="fill")


REGISTER = r"""
import json, os
import numpy as np
import jax
import jax.numpy as jnp
import tritonplug
from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, HostKernel, Options, Target
from kernels import add_kernel

def add(x):
    return tritonplug.triton_call(x, x, x.size, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=1, BLOCK=tritonplug.next_power_of_2(x.size))

class Fill:
    def __init__(self, name, value):
        self.name, self.value, self.runs = name, value, 0

    @hookimpl
    def tritonplug_backend_info(self):
        return BackendInfo(self.name, ("cpu",), "1.0", ir_stages=(), cache_binaries=False, compile_in_worker=False,
                           autotune="first")

    @hookimpl
    def tritonplug_detect_target(self, platform, device, requested):
        return Target(self.name, platform, "host", 1, None)

    @hookimpl
    def tritonplug_parse_options(self, target, call_options):
        return Options.from_mapping({k: v for k, v in call_options.items() if v is not None})

    @hookimpl
    def tritonplug_compile(self, job):
        return Binary(job.kernel_name, "fill")

    @hookimpl
    def tritonplug_make_kernel(self, target, binary, launch):
        def run(operands, results):
            self.runs += 1
            results[0][...] = self.value
        return HostKernel(launch.kernel_name, run, launch)

report = {}
plugin = Fill("runtime_fill", 3.0)
report["info"] = tritonplug.register_plugin(plugin).name
report["listed"] = [b.name for b in tritonplug.backends()]
os.environ["TRITONPLUG_BACKENDS"] = "cpu:runtime_fill"
report["result"] = np.asarray(add(jnp.ones(8, jnp.float32))).tolist()
report["runs"] = plugin.runs
for again in (plugin, Fill("runtime_fill", 4.0)):
    try:
        tritonplug.register_plugin(again)
    except tritonplug.PluginError as exc:
        report.setdefault("errors", []).append(str(exc))
print("REPORT " + json.dumps(report))
"""


def test_register_plugin_at_run_time_serves_a_call() -> None:
    report = run_python(REGISTER, env={"TRITONPLUG_DISABLE_PLUGINS": "example"})
    assert report["info"] == "runtime_fill" and "runtime_fill" in report["listed"]
    assert report["result"] == [3.0] * 8 and report["runs"] == 1
    already, clash = report["errors"]
    assert "is already registered" in already
    assert "a backend named 'runtime_fill' is already loaded (register_plugin)" in clash
