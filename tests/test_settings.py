"""``tritonplug/settings.py`` and the bundled plugins' settings modules: every ``TRITONPLUG_*`` variable typed,
validated when read, one on/off vocabulary, defaults as they were, and docs/configuration.md's settings table
generated from the declarations. Declaring by owner (the plugin hook, conflicts): ``test_settings_owners.py``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from settings_support import by_name, every_setting

import tritonplug
from tritonplug import settings
from tritonplug.cache import disk as cache
from tritonplug.cache import remote as remote_cache
from tritonplug.cli import settings_table
from tritonplug.cli import tune as tuning_cli
from tritonplug.settings import OFF_WORDS, ON_WORDS, SettingError

ROOT = Path(__file__).resolve().parents[1]

#: Every setting's default, as the modules that read the variables had them before the settings module.
DEFAULTS = {
    "TRITONPLUG_CACHE_MAX_BYTES": 1 << 30, "TRITONPLUG_CACHE": True, "TRITONPLUG_CHECK_RULES": False,
    "TRITONPLUG_COMPILE_WORKERS": min(os.cpu_count() or 1, 8), "TRITONPLUG_COMPILE_TIMEOUT": 600.0,
    "TRITONPLUG_LOG": None, "TRITONPLUG_CUDA_ARCH": None, "TRITONPLUG_ROCM_ARCH": None,
    "TRITONPLUG_DISABLE_PLUGINS": frozenset(), "TRITONPLUG_BACKENDS": {}, "TRITONPLUG_INTERPRET_CHECK": False,
    "TRITONPLUG_EARLY_COMPILE": True, "TRITONPLUG_TUNING_FILE": None, "TRITONPLUG_CUDA_MODULE_IMAGE": True,
    "TRITONPLUG_CPU_PATH": "xla", "TRITONPLUG_REMOTE_CACHE": None, "TRITONPLUG_REMOTE_CLAIM_S": 30.0,
    "TRITONPLUG_REMOTE_WAIT_S": 180.0, "TRITONPLUG_INLINE": False, "TRITONPLUG_FLEET_KEY": None,
    "TRITONPLUG_FLEET_KEY_PREVIOUS": None,
}
#: Who declares each setting that is not the host's.
OWNERS = {"TRITONPLUG_CUDA_ARCH": "cuda", "TRITONPLUG_CUDA_MODULE_IMAGE": "cuda", "TRITONPLUG_ROCM_ARCH": "rocm",
          "TRITONPLUG_INTERPRET_CHECK": "interpret", "TRITONPLUG_CPU_PATH": "interpret"}
#: The settings that never change what a kernel does, left out of a host kernel's identity (as before).
HOST_ONLY = {"TRITONPLUG_CACHE", "TRITONPLUG_CACHE_DIR", "TRITONPLUG_CACHE_MAX_BYTES", "TRITONPLUG_COMPILE_WORKERS",
             "TRITONPLUG_COMPILE_TIMEOUT", "TRITONPLUG_LOG", "TRITONPLUG_TUNING_FILE", "TRITONPLUG_DISABLE_PLUGINS",
             "TRITONPLUG_INLINE", "TRITONPLUG_CHECK_RULES",
             "TRITONPLUG_FLEET_KEY", "TRITONPLUG_FLEET_KEY_PREVIOUS"}  # the fleet key signs entries, keys nothing


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No TRITONPLUG_* variable set, and a home of this test's own."""
    for name in [k for k in os.environ if k.startswith(settings.PREFIX)] + ["XDG_CACHE_HOME"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_every_default_is_unchanged(clean: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert {s.name for s in every_setting()} == {*DEFAULTS, "TRITONPLUG_CACHE_DIR"}, "a new setting: pin its default"
    assert {s.name: s.owner for s in every_setting() if s.owner != settings.HOST_OWNER} == OWNERS
    assert {s.name: s.get() for s in every_setting() if s.name in DEFAULTS} == DEFAULTS
    assert settings.CACHE_DIR.get() == tmp_path / "home" / ".cache" / "tritonplug"
    clean.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert settings.CACHE_DIR.get() == tmp_path / "home" / ".cache" / "tritonplug"
    clean.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert settings.CACHE_DIR.get() == tmp_path / "xdg" / "tritonplug"
    for setting in every_setting():  # a blank value is the default, never an error
        clean.setenv(setting.name, "  ")
        assert not setting.is_set()
    assert {s.name: s.get() for s in every_setting() if s.name in DEFAULTS} == DEFAULTS
    assert {s.name for s in every_setting() if s.host_only} == HOST_ONLY


def test_settings_are_read_when_asked_not_at_import(clean: pytest.MonkeyPatch) -> None:
    assert settings.COMPILE_WORKERS.get() == DEFAULTS["TRITONPLUG_COMPILE_WORKERS"]
    clean.setenv("TRITONPLUG_COMPILE_WORKERS", "3")
    assert settings.COMPILE_WORKERS.get() == 3
    os.environ["TRITONPLUG_COMPILE_WORKERS"] = "5"  # as a user's program does before its first call
    assert settings.COMPILE_WORKERS.get() == 5 and settings.COMPILE_WORKERS.is_set()


BOOLEANS = {"TRITONPLUG_CACHE", "TRITONPLUG_INTERPRET_CHECK", "TRITONPLUG_EARLY_COMPILE",
            "TRITONPLUG_CUDA_MODULE_IMAGE", "TRITONPLUG_CHECK_RULES"}


@pytest.mark.parametrize("name", sorted(BOOLEANS))
def test_every_on_off_setting_takes_the_same_words(clean: pytest.MonkeyPatch, name: str) -> None:
    setting = by_name()[name]
    assert setting.kind == "on/off"
    for word in (*ON_WORDS, *(w.upper() for w in ON_WORDS), " On "):
        clean.setenv(name, word)
        assert setting.get() is True, word
    for word in (*OFF_WORDS, *(w.upper() for w in OFF_WORDS)):
        clean.setenv(name, word)
        assert setting.get() is False, word
    for word in ("maybe", "2", "none", "enabled"):
        clean.setenv(name, word)
        with pytest.raises(SettingError, match=rf"^{name} must be on or off: one of 1, true, yes, on, 0, false, "
                                               rf"no, off \(any case\), got '{word}'$"):
            setting.get()


def test_the_booleans_are_exactly_the_on_off_settings() -> None:
    assert {s.name for s in every_setting() if s.kind == "on/off"} == BOOLEANS
    assert {s.name for s in every_setting() if s.parse is settings.on_off} == BOOLEANS


def test_the_off_words_turn_the_cache_and_the_remote_tier_off(clean: pytest.MonkeyPatch) -> None:
    """What the consumers make of the one vocabulary: before, the remote tier alone took ``none``, and the
    CUDA module image only ``0``."""
    for word in OFF_WORDS:
        clean.setenv("TRITONPLUG_CACHE", word.upper())
        assert cache.cache_from_env() is None
    for word in (*OFF_WORDS, "none", "NONE"):
        clean.setenv("TRITONPLUG_REMOTE_CACHE", word)
        assert settings.REMOTE_CACHE.get() == settings.OFF and remote_cache.configured_url() is None
    clean.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "false")
    assert by_name()["TRITONPLUG_CUDA_MODULE_IMAGE"].get() is False


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("TRITONPLUG_CACHE_MAX_BYTES", "lots", "a non-negative integer"),
    ("TRITONPLUG_CACHE_MAX_BYTES", "1.5e9", "a non-negative integer"),
    ("TRITONPLUG_CACHE_MAX_BYTES", "-1", "a non-negative integer"),
    ("TRITONPLUG_COMPILE_WORKERS", "2.5", "a non-negative integer (0 compiles in-process)"),
    ("TRITONPLUG_COMPILE_TIMEOUT", "soon", "a positive number of seconds"),
    ("TRITONPLUG_COMPILE_TIMEOUT", "nan", "a positive number of seconds"),
    ("TRITONPLUG_REMOTE_WAIT_S", "inf", "a positive number of seconds"),
    ("TRITONPLUG_REMOTE_CLAIM_S", "0", "a positive number of seconds"),
    ("TRITONPLUG_CPU_PATH", "gpu", "one of xla, interpret"),
    ("TRITONPLUG_LOG", "loud", "one of debug, info, warning, error"),
    ("TRITONPLUG_REMOTE_CACHE", "localhost:6379", "a URL such as redis://host:6379/0 or jax://, or one of 0, false"),
    ("TRITONPLUG_REMOTE_CACHE", "redis://host 1", "a URL such as"),
    ("TRITONPLUG_CUDA_ARCH", "hopper", "a compute capability such as 90 or 9.0"),
    ("TRITONPLUG_CUDA_ARCH", "30", "(50 to 199, the range Triton supports)"),
    ("TRITONPLUG_ROCM_ARCH", "mi300", "an AMD GPU architecture such as gfx942"),
])
def test_a_bad_value_names_the_variable_the_value_and_what_was_expected(clean: pytest.MonkeyPatch, name: str,
                                                                         value: str, expected: str) -> None:
    clean.setenv(name, value)
    with pytest.raises(SettingError) as caught:
        by_name()[name].get()
    message = str(caught.value)
    assert message.startswith(f"{name} must be ") and expected in message and message.endswith(f", got {value!r}")
    assert isinstance(caught.value, ValueError)  # what callers caught before


@pytest.mark.parametrize(("value", "message"), [
    ("cpu=interpret", "TRITONPLUG_BACKENDS entries must look like platform:backend, got 'cpu=interpret'"),
    ("cpu:a, cpu:b", "TRITONPLUG_BACKENDS names two backends for platform 'cpu': 'a' and 'b'"),
])
def test_a_bad_list_entry_is_named(clean: pytest.MonkeyPatch, value: str, message: str) -> None:
    clean.setenv("TRITONPLUG_BACKENDS", value)
    with pytest.raises(SettingError, match=f"^{re.escape(message)}$"):
        settings.BACKENDS.get()


@pytest.mark.parametrize(("name", "value", "parsed"), [
    ("TRITONPLUG_CUDA_ARCH", "sm_90a", 90), ("TRITONPLUG_CUDA_ARCH", "8.9", 89),
    ("TRITONPLUG_ROCM_ARCH", "GFX942:sramecc+:xnack-", "gfx942"),
    ("TRITONPLUG_DISABLE_PLUGINS", " a , b,,", frozenset({"a", "b"})),
    ("TRITONPLUG_BACKENDS", "cpu:interpret, cuda : cuda", {"cpu": "interpret", "cuda": "cuda"}),
    ("TRITONPLUG_TUNING_FILE", " tuned.json ", "tuned.json"), ("TRITONPLUG_LOG", "INFO", "info"),
    ("TRITONPLUG_CPU_PATH", "Interpret", "interpret"), ("TRITONPLUG_COMPILE_TIMEOUT", "12.5", 12.5),
    ("TRITONPLUG_REMOTE_CACHE", "redis://u:pw@host:6379/0?mode=read", "redis://u:pw@host:6379/0?mode=read"),
])
def test_values_are_parsed_to_their_type(clean: pytest.MonkeyPatch, name: str, value: str, parsed: object) -> None:
    clean.setenv(name, value)
    assert by_name()[name].get() == parsed


def test_a_remote_cache_that_is_no_url_warns_once_and_compiles_locally(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("TRITONPLUG_REMOTE_CACHE", "localhost:6379")
    caches = remote_cache.RemoteCaches()
    with pytest.warns(RuntimeWarning, match="no remote kernel cache: TRITONPLUG_REMOTE_CACHE must be a URL"):
        assert caches.current() is None
    assert "TRITONPLUG_REMOTE_CACHE must be a URL" in str(caches.status())


def test_a_bad_cache_setting_is_an_error_of_the_tune_command_not_a_traceback(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("TRITONPLUG_CACHE", "sometimes")
    report, status = tuning_cli.run("list", None)
    assert status == 1 and "TRITONPLUG_CACHE must be on or off" in report["error"]


def test_overridden_sets_the_variable_for_the_duration(clean: pytest.MonkeyPatch) -> None:
    with settings.CACHE.overridden("0"):
        assert os.environ["TRITONPLUG_CACHE"] == "0" and settings.CACHE.get() is False
    assert "TRITONPLUG_CACHE" not in os.environ
    clean.setenv("TRITONPLUG_LOG", "info")
    with pytest.raises(RuntimeError), settings.LOG.overridden(None):
        assert settings.LOG.get() is None
        raise RuntimeError
    assert os.environ["TRITONPLUG_LOG"] == "info"
    with settings.overridden("TRITONPLUG_SOME_PLUGINS_OWN", "1"):  # a variable the caller does not own
        assert os.environ["TRITONPLUG_SOME_PLUGINS_OWN"] == "1"
    assert "TRITONPLUG_SOME_PLUGINS_OWN" not in os.environ


def test_kernel_environment_undeclared_and_in_effect(clean: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tritonplug.process.state import state

    state.host()  # the interpret backend, loaded, declares TRITONPLUG_INTERPRET_CHECK
    clean.setenv("TRITONPLUG_CACHE_DIR", str(tmp_path))
    clean.setenv("TRITONPLUG_INTERPRET_CHECK", "1")
    clean.setenv("TRITONPLUG_THIRD_PARTY_MODE", "x")  # a third-party plugin's, or a typo
    clean.setenv("TRITONPLUG_COMPILE_TIMEOUT", "soon")
    assert settings.kernel_environment() == [("TRITONPLUG_INTERPRET_CHECK", "1"), ("TRITONPLUG_THIRD_PARTY_MODE", "x")]
    assert settings.undeclared() == ["TRITONPLUG_THIRD_PARTY_MODE"]
    shown = settings_table.in_effect()
    assert list(shown) == [s.name for s in settings.declared()]
    assert settings.lookup("TRITONPLUG_INTERPRET_CHECK").owner == "interpret"
    assert shown["TRITONPLUG_CACHE_DIR"] == f"{tmp_path} (set)"
    assert shown["TRITONPLUG_INTERPRET_CHECK"] == "on (set)" and shown["TRITONPLUG_EARLY_COMPILE"] == "on (default)"
    assert shown["TRITONPLUG_REMOTE_WAIT_S"] == "180 (default)"
    assert shown["TRITONPLUG_LOG"] == "off (default)" and shown["TRITONPLUG_TUNING_FILE"] == "none (default)"
    assert shown["TRITONPLUG_COMPILE_TIMEOUT"].startswith("invalid (TRITONPLUG_COMPILE_TIMEOUT must be a positive")


TABLE_DOC = ROOT / "docs" / "configuration.md"


def documented_table() -> str:
    text = TABLE_DOC.read_text(encoding="utf-8")
    found = re.search(r"<!-- settings table:[^\n]*-->\n(.*?)\n<!-- end of settings table -->", text, re.S)
    assert found, "docs/configuration.md has no generated settings table"
    return found.group(1)


def test_the_documented_table_is_the_generated_one() -> None:
    """docs/configuration.md documents the host and the plugins this repository ships, read from their source."""
    assert documented_table() == settings_table.markdown(every_setting()), (
        "docs/configuration.md's settings table differs from the declarations (tritonplug/settings.py and each "
        "bundled plugin's settings module): with every bundled plugin installed, paste the output of "
        "`tritonplug settings --markdown` between its markers")
    for setting in every_setting():
        assert f"| `{setting.name}` | {setting.owner} |" in documented_table()


def test_the_command_prints_the_table_of_the_installed_plugins() -> None:
    from tritonplug.cli.info import loaded_plugins

    loaded_plugins()
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith(settings.PREFIX)},
                   "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-m", "tritonplug", "settings", "--markdown"], capture_output=True,
                          text=True, timeout=120, env=environment)
    assert done.returncode == 0, done.stderr
    assert done.stdout == settings_table.markdown() + "\n"
    listed = subprocess.run([sys.executable, "-m", "tritonplug", "--json", "settings"], capture_output=True,
                            text=True, timeout=120, env={**environment, "TRITONPLUG_CPU_PATH": "interpret"})
    assert listed.returncode == 0, listed.stderr
    report = json.loads(listed.stdout)
    assert report["TRITONPLUG_CACHE"]["owner"] == "tritonplug"
    if "interpret" in {b.name for b in tritonplug.backends()}:
        assert report["TRITONPLUG_CPU_PATH"] == {"owner": "interpret", "value": "interpret (set)", "meaning":
                                                 by_name()["TRITONPLUG_CPU_PATH"].doc}


def test_an_invalid_setting_this_run_never_reads_is_still_said_at_first_use(clean: pytest.MonkeyPatch,
                                                                            fresh_state) -> None:
    """On a CPU-only run the compile workers' settings are never read (the CPU backend compiles in-process); a
    typo there is still said, once, when the process first uses tritonplug."""
    from tritonplug.process.state import state

    clean.setenv("TRITONPLUG_COMPILE_WORKERS", "two")
    clean.setenv("TRITONPLUG_COMPILE_TIMEOUT", "-1")
    state.reset(plugins=True)
    with pytest.warns(UserWarning, match=r"invalid settings.*TRITONPLUG_COMPILE_WORKERS.*'two'.*COMPILE_TIMEOUT"):
        state.host()
