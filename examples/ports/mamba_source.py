"""Where mamba-ssm's Triton kernels come from, for the SSD port (``examples/ports/mamba_ssd*.py``), its tests and
the benches.

mamba-ssm 2.3.2.post1 ships as an sdist whose build wants torch and CUDA; its package ``__init__`` imports its
compiled extensions. So nothing here imports ``mamba_ssm`` as a package:

* :func:`kernels` loads a module's kernels from source (``tritonplug.kernels_of(..., use_import=False)``), also
  where torch imports (a plain import would run the package ``__init__``). mamba-ssm's ``autotune_configs``
  asks ``MAMBA_DETERMINISTIC`` (and torch when it is unset) which configurations to keep, when a kernel's
  definition loads: :func:`kernels` loads the module's kernels (``kernels_of`` does it at once) with
  ``MAMBA_DETERMINISTIC=0`` unless the caller set it, so all configurations are kept and torch is never
  asked. The port always takes mamba-ssm's non-deterministic path (``tl.atomic_add`` reductions,
  ``DETERMINISTIC_REDUCTION=False``).
* :func:`register_bare_packages` (for code that runs mamba-ssm's own torch functions: the GPU test, the bench)
  enters ``mamba_ssm``, ``mamba_ssm.ops`` and ``mamba_ssm.ops.triton`` in ``sys.modules`` as empty packages with
  their ``__path__`` set, so ``import mamba_ssm.ops.triton.ssd_combined`` runs only that module and the ones it
  imports.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import tritonplug

_PACKAGES = ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton")


def source_root() -> Path | None:
    """The directory holding the ``mamba_ssm`` package on ``sys.path`` (found, never imported), or None."""
    spec = importlib.machinery.PathFinder.find_spec("mamba_ssm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


@contextlib.contextmanager
def _all_configurations() -> Iterator[None]:
    if "MAMBA_DETERMINISTIC" in os.environ:
        yield
        return
    os.environ["MAMBA_DETERMINISTIC"] = "0"
    try:
        yield
    finally:
        os.environ.pop("MAMBA_DETERMINISTIC", None)


def kernels(module: str) -> types.ModuleType:
    """``mamba_ssm.ops.triton.<module>`` loaded from source, its kernels defined (see the module docstring)."""
    with _all_configurations():  # kernels_of defines the module's kernels (their autotune configs) now
        return tritonplug.kernels_of(f"mamba_ssm.ops.triton.{module}", use_import=False)


def register_bare_packages() -> None:
    """Enter mamba-ssm's packages in ``sys.modules`` without running their ``__init__`` (see the module
    docstring); raises ``ImportError`` when mamba-ssm's source is not on ``sys.path``."""
    root = source_root()
    if root is None:
        raise ImportError("mamba-ssm's source is not on sys.path (examples/fetch_kernel_sources.py fetches it)")
    for name in _PACKAGES:
        if name in sys.modules:
            continue
        package = types.ModuleType(name)
        package.__path__ = [str(root.joinpath(*name.split(".")))]
        package.__package__ = name
        sys.modules[name] = package
        if "." in name:
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, package)
