# Launches mamba-ssm 2.3.2.post1's kernels over its autotune configurations: Apache-2.0, Copyright (c) 2024, Tri Dao,
# Albert Gu. The licence's text: LICENSE (Apache-2.0); the notice: THIRD_PARTY_NOTICES.md.
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
* :func:`launchable` is ``tritonplug.launch`` of such a kernel, over more configurations where ``CONFIGS`` says so
  (the port's matmul kernels: see ``CONFIGS``).
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
from typing import Any

import triton

import tritonplug
from tritonplug.adapters import triton_compat

_PACKAGES = ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton")

#: Which configurations the port's matmul kernels (those its launchers pass ``wide=True``) are tuned over:
#: "mamba" (the default) keeps mamba-ssm's list; "wide" adds, after it, each block shape of that list at 4 and 8
#: warps and 2 to 4 pipeline stages (mamba-ssm's lists hold mostly 4 warps and 3 stages). On an H200 at the model's
#: shapes "wide" found configurations 5% faster in all (the dx kernel's 10% faster) for about four times the
#: tuning time (docs/mamba2.md), so it is not the default. The first configuration is mamba-ssm's first either
#: way, so an untuned call (``autotune="first"``) runs the same. Read when the launcher modules are imported:
#: ``bench/mamba2.py --configs`` sets it before that.
CONFIGS = "mamba"
WARPS, STAGES = (4, 8), (2, 3, 4)


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


def widened(kernel: Any) -> Any:
    """``kernel`` (a ``triton.autotune`` of a jit function) over its configurations, then each of their block
    shapes at ``WARPS`` × ``STAGES`` not among them, each keeping its shape's ``pre_hook`` (mamba-ssm's
    ``init_to_zero``). The same jit function: the kernel's code is mamba-ssm's, only the search is wider."""
    reset, restore = triton_compat.autotune_resets(kernel)
    dropped = {"reset_to_zero": reset, "restore_value": restore, **triton_compat.autotuner_hooks(kernel),
               "early_config_prune": triton_compat.early_prune_function(kernel),
               "perf_model": getattr(kernel, "perf_model", None)}
    hooks = [name for name, value in dropped.items() if value]
    if hooks:  # mamba-ssm's SSD autotuners have none; a kernel that does would lose them here
        raise ValueError(f"widened: {kernel.fn.__name__}'s autotuner has {hooks}, which widened does not carry over")
    given = triton_compat.autotune_configs(kernel)
    configs = list(given)       # the given ones first, then the new ones appended while the given are walked
    seen = {(tuple(sorted(c.kwargs.items())), c.num_warps, c.num_stages) for c in given}
    for config in given:
        shape = tuple(sorted(config.kwargs.items()))
        for warps in WARPS:
            for stages in STAGES:
                if (shape, warps, stages) not in seen:
                    seen.add((shape, warps, stages))
                    configs.append(triton.Config(dict(config.kwargs), num_warps=warps, num_stages=stages,
                                                 pre_hook=config.pre_hook))
    return triton.autotune(configs=configs, key=triton_compat.autotune_key_names(kernel))(kernel.fn)


def launchable(kernel: Any, wide: bool = False) -> Any:
    """``tritonplug.launch(kernel)``, over :func:`widened` configurations when ``wide`` and ``CONFIGS`` is "wide"."""
    if CONFIGS not in ("wide", "mamba"):
        raise ValueError(f"mamba_source.CONFIGS is {CONFIGS!r}; expected 'wide' or 'mamba'")
    return tritonplug.launch(widened(kernel) if wide and CONFIGS == "wide" else kernel)


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
