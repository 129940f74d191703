"""The version policy: tested lower bounds, no upper caps, a one-line warning outside the tested range, an error
only for a release known to break, and ``tritonplug info`` saying what was tested (``tritonplug/version.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from plugin_test_support import tomllib

from tritonplug import version
from tritonplug.version import IncompatibleVersionError, KnownBreak

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = [ROOT / "pyproject.toml", *sorted((ROOT / "plugins").glob("*/pyproject.toml"))]
MOVING = ("jax", "jaxlib", "triton")


@pytest.mark.parametrize("text, expected", [
    ("0.12.0.1", (0, 12, 0, 1)), ("3.10.0+git1a2b3c", (3, 10, 0)), ("3.10.0rc1", (3, 10, 0)),
    ("3.9.0.dev20261201", (3, 9, 0)), ("0.11.2", (0, 11, 2)), ("nonsense", ()),
])
def test_release_numbers(text, expected):
    assert version.release(text) == expected


def test_status_of_each_kind_of_version():
    oldest, newest = version.tested_range("jax")
    assert version.status("jax", newest) == "tested"
    assert version.status("triton", "3.9.0+local") == "tested"
    assert version.status("python", "3.12.1") == "tested"  # Python by major.minor
    assert version.status("jax", "0.13.0").startswith(f"newer than tested (the newest tested is {newest})")
    assert version.status("triton", "3.10.0").startswith("newer than tested")
    assert version.status("jax", "0.9.2").startswith(f"older than tested (the oldest tested is {oldest})")
    assert version.status("jax", "0.11.0").startswith("within the tested range")


def test_a_newer_release_gets_one_line_naming_the_tested_ranges():
    message = version.check({"jax": "0.13.0", "jaxlib": "0.13.0", "triton": version.tested_range("triton")[1]})
    assert message is not None and "\n" not in message
    assert "this process has jax 0.13.0 (newer), jaxlib 0.13.0 (newer):" in message
    for distribution in MOVING:
        oldest, newest = version.tested_range(distribution)
        assert f"{distribution} {oldest}–{newest}" in message
    assert "tritonplug info" in message
    assert version.check({d: version.tested_range(d)[1] for d in MOVING}) is None


def test_only_a_release_known_to_break_is_an_error():
    known = (KnownBreak("triton", "3.11.0", "3.11.2", "tl.foo changed its signature"),)
    with pytest.raises(IncompatibleVersionError, match=r"does not work with triton 3\.11\.1: tl\.foo changed .*"
                                                         r"3\.11\.2 works again"):
        version.check({"triton": "3.11.1"}, known)
    assert "this process has triton 3.11.2 (newer):" in version.check({"triton": "3.11.2"}, known)
    assert version.status("triton", "3.11.0", known) == "known to break: tl.foo changed its signature"
    assert issubclass(IncompatibleVersionError, ImportError)


def test_tested_releases_pass_the_check_today():
    assert version.KNOWN_BROKEN == () or all(version.known_break(d, v) is None
                                             for d, vs in version.TESTED.items() for v in vs)


@pytest.mark.skipif(tomllib is None, reason="needs tomllib (Python 3.11+)")
@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.parent.name)
def test_no_upper_caps_and_lower_bounds_are_the_oldest_tested(project):
    meta = tomllib.loads(project.read_text())["project"]
    assert meta["requires-python"] == f">={version.tested_range('python')[0]}"
    for requirement in meta["dependencies"]:
        name = requirement.split(">")[0].split("=")[0].split("<")[0].strip()
        if name in MOVING:
            assert "<" not in requirement and "!=" not in requirement, f"{project}: {requirement} caps {name}"
            assert requirement == f"{name}>={version.tested_range(name)[0]}", project


def test_importing_the_primitive_warns_exactly_when_a_version_is_untested():
    """The check runs where the host first loads JAX: one warning for an untested release, none otherwise (the
    envs that pin tested releases take the second branch; one that floats to a new release, the first)."""
    report = version.tested_report()
    assert set(report) == {"python", *MOVING}
    untested = version.check(version.installed())
    code = ("import warnings\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always')\n"
            "    import tritonplug.lowering.primitive\n"
            "from tritonplug.version import UntestedVersionWarning\n"
            "print(sum(issubclass(w.category, UntestedVersionWarning) for w in seen))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == ("1" if untested else "0"), (report, done.stdout)


def test_every_ffi_call_names_its_vmap_method():
    """jax 0.12 refuses ``jax.ffi.ffi_call`` under ``vmap`` without ``vmap_method`` (0.10/0.11 warned): every use
    in the host, the plugins and the examples must pass one. (Today none uses it: the host emits its FFI calls
    from lowering rules, ``jax.ffi.ffi_lowering``, and batches the primitive with its own rule.)"""
    import ast

    offenders = []
    for directory in ("tritonplug", "plugins", "examples", "bench"):
        for path in sorted((ROOT / directory).rglob("*.py")):
            if ".venv" in path.parts or ".tox" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                name = getattr(node, "func", None) and getattr(node.func, "attr", getattr(node.func, "id", ""))
                if name == "ffi_call" and not any(k.arg == "vmap_method" for k in node.keywords):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
