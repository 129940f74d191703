"""Settings declared by their owner: a backend or a remote-cache plugin declares its own ``TRITONPLUG_*`` variables
through ``tritonplug_declare_settings``; the host's ``settings.py`` names none of them; ``tritonplug info``, the
typo check and the first-use check gather the loaded plugins' settings; two owners of one name are refused, naming
both. The example backend's own variable, installed by pip: ``test_plugins_example.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from helpers import requires_backend
from settings_support import ROOT, bundled_plugin_settings
from test_plugins_register import Hooks

from tritonplug import cache_hookspecs, settings
from tritonplug.cache.plugins import CachePlugins
from tritonplug.cache_records import RemoteCacheInfo
from tritonplug.cli import settings_table
from tritonplug.compile.backends import Host
from tritonplug.errors import PluginError
from tritonplug.hookspecs import hookimpl


class Declares(Hooks):
    """A valid backend object that declares the settings it is made with."""

    def __init__(self, name: str, *specs: settings.Setting) -> None:
        self.name, self.specs = name, specs

    @hookimpl
    def tritonplug_declare_settings(self):
        return self.specs


def flag(name: str, owner: str = settings.HOST_OWNER) -> settings.Setting[bool]:
    return settings.boolean(name, "a test plugin's switch", False, owner=owner)


@pytest.fixture
def host() -> Host:
    """A plugin host of its own, the installed backends loaded through their entry points; the settings of the
    test's plugins withdrawn afterwards."""
    loaded = Host()
    loaded.load_entry_points()
    yield loaded
    for name in ("owner_a", "owner_b", "cache_owner"):
        settings.withdraw(name)


def test_the_host_settings_module_names_no_backend() -> None:
    text = (ROOT / "tritonplug" / "settings.py").read_text(encoding="utf-8")
    owned = [s.name for s in bundled_plugin_settings()]
    assert owned and not [name for name in owned if name in text], "a plugin's variable is named by the host"
    for backend in ("cuda", "rocm", "interpret", "CPU_PATH", "gfx", "compute capability"):
        assert backend not in text.lower().replace("cpu_path", "CPU_PATH"), backend
    assert all(s.owner == settings.HOST_OWNER for s in settings.ALL)
    assert {s.owner for s in bundled_plugin_settings()} == {"cuda", "rocm", "interpret"}


def test_a_plugin_declares_its_settings_and_they_leave_the_typo_list(host: Host,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONPLUG_OWNER_A_SWITCH", "yes")
    assert "TRITONPLUG_OWNER_A_SWITCH" in settings.undeclared()
    backend = host.register(Declares("owner_a", flag("TRITONPLUG_OWNER_A_SWITCH")))
    assert backend is not None
    (declared,) = settings.declared(["owner_a"])
    assert declared.owner == "owner_a" and declared.get() is True and settings.lookup(declared.name) == declared
    assert "TRITONPLUG_OWNER_A_SWITCH" not in settings.undeclared()
    assert settings_table.in_effect()["TRITONPLUG_OWNER_A_SWITCH"] == "on (set)"
    monkeypatch.setenv("TRITONPLUG_OWNER_A_SWITCH", "maybe")
    assert settings.invalid(["owner_a"]) == [
        "TRITONPLUG_OWNER_A_SWITCH must be on or off: one of 1, true, yes, on, 0, false, no, off (any case), "
        "got 'maybe'"]


@requires_backend("interpret")
def test_two_plugins_declaring_one_variable_are_refused_naming_both(host: Host) -> None:
    with pytest.raises(PluginError, match=r"plugin 'owner_b'.*TRITONPLUG_CPU_PATH, which plugin 'interpret' "
                                          r"declares already"):
        host.register(Declares("owner_b", flag("TRITONPLUG_CPU_PATH")), name="owner_b")
    assert "owner_b" not in host.backends and settings.lookup("TRITONPLUG_CPU_PATH").owner == "interpret"
    assert host.register(Declares("owner_a", flag("TRITONPLUG_OWNER_SHARED")), name="owner_a") is not None
    host.register(Declares("owner_b", flag("TRITONPLUG_OWNER_SHARED")), name="owner_b", strict=False)  # reported
    assert any("plugin 'owner_b' (owner_b) declares TRITONPLUG_OWNER_SHARED, which plugin 'owner_a' declares"
               in p for p in host.problems)
    assert settings.declared(["owner_b"]) == ()


@pytest.mark.parametrize(("specs", "message"), [
    ((flag("TRITONPLUG_CACHE"),), "declares TRITONPLUG_CACHE, a setting of the host (tritonplug)"),
    (("TRITONPLUG_X",), "declares 'TRITONPLUG_X', not a tritonplug.settings.Setting record"),
    ((flag("tritonplug_lower"),), "declares a setting named 'tritonplug_lower'"),
    ((flag("TRITONPLUG_OWNER_A_X", owner="cuda"),), "declares TRITONPLUG_OWNER_A_X as owned by 'cuda'"),
    ((flag("TRITONPLUG_OWNER_A_X"), flag("TRITONPLUG_OWNER_A_X")), "declares TRITONPLUG_OWNER_A_X twice"),
])
def test_a_malformed_declaration_fails_the_plugin_by_name(host: Host, specs: tuple, message: str) -> None:
    with pytest.raises(PluginError, match=r"^plugin 'owner_a' \(owner_a\) ") as caught:
        host.register(Declares("owner_a", *specs), name="owner_a")
    assert message in str(caught.value) and "owner_a" not in host.backends


def test_a_cache_plugin_declares_its_settings_and_a_clash_is_reported() -> None:
    plugin = types.ModuleType("cache_owner_plugin")

    @cache_hookspecs.hookimpl
    def tritonplug_cache_info() -> RemoteCacheInfo:
        return RemoteCacheInfo("cache_owner", ("testcache",), "0")

    @cache_hookspecs.hookimpl
    def tritonplug_cache_open(url: str) -> None:
        return None

    @cache_hookspecs.hookimpl
    def tritonplug_declare_settings() -> tuple:
        return (settings.seconds("TRITONPLUG_CACHE_OWNER_TIMEOUT_S", "a test store's timeout", 1.0),)

    plugin.tritonplug_cache_info, plugin.tritonplug_cache_open = tritonplug_cache_info, tritonplug_cache_open
    plugin.tritonplug_declare_settings = tritonplug_declare_settings
    caches = CachePlugins()
    try:
        assert caches.register(plugin, "cache_owner", "test") is not None
        assert settings.lookup("TRITONPLUG_CACHE_OWNER_TIMEOUT_S").owner == "cache_owner"
        again = types.ModuleType("other_plugin")
        again.tritonplug_cache_open = tritonplug_cache_open
        again.tritonplug_declare_settings = tritonplug_declare_settings
        again.tritonplug_cache_info = cache_hookspecs.hookimpl(lambda: RemoteCacheInfo("other", ("x",), "0"))
        with pytest.warns(RuntimeWarning, match="cache plugin 'other' \\(other\\) declares "
                                                "TRITONPLUG_CACHE_OWNER_TIMEOUT_S, which plugin 'cache_owner'"):
            assert caches.register(again, "other", "test") is None
    finally:
        settings.withdraw("cache_owner")


def run_info(**environment: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(settings.PREFIX)}
    done = subprocess.run([sys.executable, "-m", "tritonplug", "--json", "info"], capture_output=True, text=True,
                          timeout=240, env={**env, "JAX_PLATFORMS": "cpu", **environment}, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@requires_backend("interpret")
def test_info_lists_a_backends_settings_and_its_invalid_values_under_problems(tmp_path: Path) -> None:
    report = run_info(TRITONPLUG_CACHE_DIR=str(tmp_path), TRITONPLUG_CPU_PATH="gpu", TRITONPLUG_INTERPRET_CHECK="1",
                      TRITONPLUG_NOT_A_SETTING="1")
    assert report["settings"]["TRITONPLUG_INTERPRET_CHECK"] == "on (set)"
    assert report["settings"]["TRITONPLUG_CPU_PATH"].startswith("invalid (TRITONPLUG_CPU_PATH must be one of xla")
    assert set(report["setting owners"]["interpret"].split(", ")) == {"TRITONPLUG_CPU_PATH",
                                                                      "TRITONPLUG_INTERPRET_CHECK"}
    assert any(p.startswith("TRITONPLUG_CPU_PATH must be one of xla, interpret") for p in report["problems"])
    assert report["undeclared variables"] == "TRITONPLUG_NOT_A_SETTING"
