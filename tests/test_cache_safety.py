"""The kernel cache is never a way in: unsafe directories are refused, entries are never unpickled.

Only backends that compile TTIR use the disk cache, so these tests lower for sm_90 through the
CUDA backend (no GPU needed); each call must still work, compiling without the cache if need be.
"""

from __future__ import annotations

import inspect
import os
import pathlib
import pickle
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import triton
import triton.language as tl
from helpers import requires_backend

import tritonplug
from tritonplug.cache import disk as cache_module
from tritonplug.inspection import kernel_calls
from tritonplug.process.state import state

pytestmark = requires_backend("cuda")

N = 2304  # a size no other test module lowers


@triton.jit
def scale_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


def lower_for_sm90() -> None:
    """Lower a fresh program (so JAX runs the lowering rule again) and check the kernel reached it."""
    spec = jax.ShapeDtypeStruct((N,), jnp.float32)

    def f(x):
        return tritonplug.triton_call(x, N, kernel=scale_kernel, out_type=spec, grid=(tritonplug.cdiv(N, 256),),
                                      BLOCK=256)

    text = jax.jit(f).trace(spec).lower(lowering_platforms=("cuda",)).as_text()
    (call,) = kernel_calls(text)
    assert ".target sm_90" in call["kernel_call"]["kernel"]["ptx"]


@pytest.fixture
def use_cache_dir(monkeypatch: pytest.MonkeyPatch, fresh_state):
    """Point the compile service at a directory, forgetting what it compiled or cached so far."""
    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    monkeypatch.setenv("TRITONPLUG_CUDA_MODULE_IMAGE", "0")  # PTX in the payload on every jaxlib (lower_for_sm90)
    monkeypatch.delenv("TRITONPLUG_CACHE", raising=False)

    def use(directory: Path) -> None:
        monkeypatch.setenv("TRITONPLUG_CACHE_DIR", str(directory))
        fresh_state.reset()

    return use


def entry_files(directory: Path) -> list[Path]:
    return sorted((directory / "entries").rglob("*.bin")) if (directory / "entries").exists() else []


def compiled() -> int:
    return int(tritonplug.compile_stats()["compiled"])


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o707], ids=oct)
def test_directory_writable_by_others_is_refused_and_the_call_still_works(tmp_path: Path, use_cache_dir, mode: int):
    directory = tmp_path / "shared-cache"
    directory.mkdir()
    directory.chmod(mode)
    use_cache_dir(directory)
    before = compiled()
    with pytest.warns(RuntimeWarning, match=rf"not using the kernel cache: .*{directory}.*writable by group or others"):
        lower_for_sm90()
    assert compiled() == before + 1  # compiled without the cache
    assert entry_files(directory) == [] and not (directory / "lock").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a directory away needs root")
def test_directory_owned_by_another_user_is_refused_and_the_call_still_works(tmp_path: Path, use_cache_dir):
    directory = tmp_path / "their-cache"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    use_cache_dir(directory)
    before = compiled()
    with pytest.warns(RuntimeWarning, match=rf"not using the kernel cache: .*{directory} is owned by uid 65534"):
        lower_for_sm90()
    assert compiled() == before + 1
    assert entry_files(directory) == []


class _TouchWhenUnpickled:
    """Unpickling this creates ``path``: a stand-in for an attacker's payload."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.path),)


def _raw_pickle(payload: bytes) -> bytes:
    return payload


def _pickle_behind_magic_with_valid_checksum(payload: bytes) -> bytes:
    import hashlib

    body = cache_module.MAGIC + payload
    return body + hashlib.sha256(body).digest()


@pytest.mark.parametrize("craft", [_raw_pickle, _pickle_behind_magic_with_valid_checksum])
def test_a_pickle_planted_in_an_entry_is_never_unpickled(tmp_path: Path, use_cache_dir, craft) -> None:
    live = tmp_path / "proof-the-payload-works"
    pickle.loads(pickle.dumps(_TouchWhenUnpickled(live)))
    assert live.exists()

    directory = tmp_path / "cache"
    use_cache_dir(directory)
    lower_for_sm90()
    (entry,) = entry_files(directory)

    marker = tmp_path / "unpickled"
    entry.write_bytes(craft(pickle.dumps(_TouchWhenUnpickled(marker), protocol=pickle.HIGHEST_PROTOCOL)))
    state.reset()  # forget the in-memory binary: the next lowering reads the disk
    before = dict(tritonplug.compile_stats())
    lower_for_sm90()
    after = tritonplug.compile_stats()
    assert not marker.exists()
    assert after["compiled"] == before["compiled"] + 1 and after["disk_hits"] == before["disk_hits"]
    assert entry_files(directory) == [entry] and entry.read_bytes().startswith(cache_module.MAGIC)
    assert b"pathlib" not in entry.read_bytes()  # the damaged entry was replaced by the fresh binary


@pytest.mark.parametrize("module", ["cache.disk", "cache.files", "compile.compiler"])
def test_the_cache_path_imports_no_deserialiser_that_runs_code(module: str) -> None:
    import ast
    import importlib

    tree = ast.parse(Path(importlib.import_module(f"tritonplug.{module}").__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"pickle", "cloudpickle", "dill", "marshal", "shelve", "joblib"}


@pytest.mark.parametrize("kind", ["directory tree", "fifo", "dangling symlink"])
def test_a_non_file_at_a_real_entry_path_is_healed_and_the_next_process_hits(tmp_path: Path, use_cache_dir,
                                                                            kind: str) -> None:
    import warnings

    from cache_helpers import plant

    directory = tmp_path / "cache"
    use_cache_dir(directory)
    lower_for_sm90()
    (entry,) = entry_files(directory)
    entry.unlink()
    plant(entry, kind)
    assert cache_module.DiskCache(directory).stats().entries == 0
    state.reset()  # a new process: nothing in memory
    before = dict(tritonplug.compile_stats())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # healing is silent
        lower_for_sm90()
    assert tritonplug.compile_stats()["compiled"] == before["compiled"] + 1
    assert entry.is_file() and not entry.is_symlink() and entry.read_bytes().startswith(cache_module.MAGIC)
    state.reset()
    lower_for_sm90()
    after = tritonplug.compile_stats()
    assert after["disk_hits"] == before["disk_hits"] + 1 and after["compiled"] == before["compiled"] + 1


def test_a_cache_warning_during_lowering_names_the_users_line(tmp_path: Path, use_cache_dir) -> None:
    directory = tmp_path / "cache"
    use_cache_dir(directory)
    lower_for_sm90()
    (entry,) = entry_files(directory)
    bucket = entry.parent
    entry.unlink()
    bucket.rmdir()
    bucket.write_bytes(b"")  # a file where the bucket belongs: the put after the compile fails
    state.reset()
    with pytest.warns(RuntimeWarning, match="cannot write to the kernel cache") as caught:
        lower_for_sm90()
    lines, first = inspect.getsourcelines(lower_for_sm90)
    lowering_line = first + next(i for i, line in enumerate(lines) if ".lower(" in line)
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, lowering_line)]


def test_an_unsafe_cache_warning_during_lowering_names_the_users_line(tmp_path: Path, use_cache_dir) -> None:
    directory = tmp_path / "cache"
    (directory / "entries").mkdir(parents=True)
    directory.chmod(0o700)
    (directory / "entries").chmod(0o777)
    use_cache_dir(directory)
    with pytest.warns(RuntimeWarning, match="not using the kernel cache: .*chmod go-w") as caught:
        lower_for_sm90()
    assert [w.filename for w in caught] == [__file__]
