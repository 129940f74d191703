"""What the tests of backends from outside the host (``test_plugins_*.py``) share: marks for the
installed plugins, an add kernel and its call on the CPU, and a fresh Python to run a script in.

* ``tests/plugins/example_backend``: a working third-party backend (``tritonplug-example``) for the
  cpu platform; the tox env ``plugins`` installs it, elsewhere its tests skip.
* ``tests/plugins/broken_*`` and ``conflicting``: tiny distributions that fail in one way each
  (``test_plugins_broken.py`` installs them into a private directory).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import triton
import triton.language as tl
from helpers import requires_backend

import tritonplug

ROOT = Path(__file__).resolve().parent.parent
SUBPROCESS_TIMEOUT_S = 240


requires_interpret = requires_backend("interpret")
requires_example = requires_backend("example")  # tests/plugins/example_backend


@triton.jit
def add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def on_cpu(n: int) -> jax.Array:
    """``arange(n)`` on the CPU device, so calls lower for the cpu platform even where a GPU is visible."""
    return jax.device_put(np.arange(n, dtype=np.float32), jax.devices("cpu")[0])


def add(x: jax.Array, **options) -> jax.Array:
    n = x.shape[0]
    return tritonplug.triton_call(x, x, n, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=1, BLOCK=tritonplug.next_power_of_2(n), **options)


def subprocess_environment(site: Path | None, env: dict[str, str]) -> dict[str, str]:
    """The environment of a fresh Python: this one's less the backend choices, with ``tests/`` (and ``site``,
    where the broken plugins are installed) on ``PYTHONPATH`` and JAX on the CPU; ``env`` on top."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TRITONPLUG_BACKENDS", "TRITONPLUG_DISABLE_PLUGINS")}
    paths = [str(ROOT / "tests"), str(site) if site else "", environment.get("PYTHONPATH", "")]
    environment["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    environment["JAX_PLATFORMS"] = "cpu"
    environment.update(env)
    return environment


def run_python(script: str, *args: str, site: Path | None = None, env: dict[str, str] | None = None) -> dict:
    """Run ``script`` in a fresh interpreter; it prints one line ``REPORT <json>``."""
    proc = subprocess.run([sys.executable, "-c", script, *args], env=subprocess_environment(site, env or {}), cwd=ROOT,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    reports = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and reports, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(reports[-1][len("REPORT "):])
