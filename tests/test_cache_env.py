"""The cache the environment asks for: directory, bound, disabling, and refusal of unsafe directories."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tritonplug.cache.disk import DiskCache, UnsafeCacheDir, cache_from_env
from tritonplug.errors import TritonplugError


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("TRITONPLUG_CACHE", "TRITONPLUG_CACHE_DIR", "TRITONPLUG_CACHE_MAX_BYTES", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_cache_from_env_defaults(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cache = cache_from_env()
    assert cache is not None
    assert cache.directory == tmp_path / "home" / ".cache" / "tritonplug"
    assert cache.max_bytes == 1 << 30
    assert stat.S_IMODE((tmp_path / "home").stat().st_mode) == 0o700
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_from_env().directory == tmp_path / "xdg" / "tritonplug"
    env.setenv("TRITONPLUG_CACHE_DIR", str(tmp_path / "explicit"))
    env.setenv("TRITONPLUG_CACHE_MAX_BYTES", "12345")
    cache = cache_from_env()
    assert (cache.directory, cache.max_bytes) == (tmp_path / "explicit", 12345)
    assert cache.stats().max_bytes == 12345


@pytest.mark.parametrize("value", ["0", "off", "OFF"])
def test_cache_disabled(env: pytest.MonkeyPatch, tmp_path: Path, value: str) -> None:
    env.setenv("TRITONPLUG_CACHE", value)
    assert cache_from_env() is None
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("value", ["lots", "1.5e9", "-1"])
def test_bad_max_bytes(env: pytest.MonkeyPatch, value: str) -> None:
    env.setenv("TRITONPLUG_CACHE_MAX_BYTES", value)
    with pytest.raises(ValueError, match="TRITONPLUG_CACHE_MAX_BYTES"):
        cache_from_env()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_directory_writable_by_others_is_refused(env: pytest.MonkeyPatch, tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(mode)
    env.setenv("TRITONPLUG_CACHE_DIR", str(directory))
    with pytest.warns(RuntimeWarning, match=f"{directory}.*writable by group or others"):
        assert cache_from_env() is None
    with pytest.raises(UnsafeCacheDir):
        DiskCache(directory)
    assert issubclass(UnsafeCacheDir, TritonplugError)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_directory_owned_by_another_user_is_refused(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    env.setenv("TRITONPLUG_CACHE_DIR", str(directory))
    with pytest.warns(RuntimeWarning, match=f"{directory}.*owned by uid 65534"):
        assert cache_from_env() is None


def test_uncreatable_directory_warns(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    env.setenv("TRITONPLUG_CACHE_DIR", str(tmp_path / "file" / "cache"))
    with pytest.warns(RuntimeWarning, match="cannot create"):
        assert cache_from_env() is None


