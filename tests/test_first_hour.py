"""A new user's first hour: the README's attribute paths work after a bare ``import tritonplug``, and the
command's help is plain text."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest


def python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_inspection_is_an_attribute_after_import_tritonplug_and_loads_jax_only_then() -> None:
    done = python(
        "import sys, tritonplug\n"
        "assert 'jax' not in sys.modules and 'tritonplug.inspection' not in sys.modules, 'import stays light'\n"
        "assert 'inspection' in dir(tritonplug)\n"
        "calls = tritonplug.inspection.kernel_calls('module {}')\n"
        "assert calls == [] and 'tritonplug.inspection' in sys.modules\n"
        "from tritonplug import inspection\n"
        "assert inspection is tritonplug.inspection\n"
        "try:\n    tritonplug.inspectoin\nexcept AttributeError as e:\n    print(e)\n")
    assert done.returncode == 0, done.stderr
    assert "module 'tritonplug' has no attribute 'inspectoin'" in done.stdout


@pytest.mark.parametrize("command", [[], ["info"], ["cache"], ["cache", "stats"], ["cache", "clear"],
                                     ["cache", "prune"], ["tune"], ["tune", "list"], ["tune", "export"],
                                     ["tune", "import"], ["tune", "clear"]], ids=lambda c: " ".join(c) or "tritonplug")
def test_help_is_plain_text(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "tritonplug", *command, "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: tritonplug {' '.join(command)}".rstrip())
    assert "``" not in done.stdout and not re.search(r":(func|class|mod|meth|envvar):`", done.stdout), done.stdout
    body = done.stdout.split("\n\n")[1]
    assert body and not body.startswith(("positional", "options")), "every command says what it does"
