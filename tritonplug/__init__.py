"""tritonplug: call hand-written Triton kernels from JAX, through pluggable backends.

Public names load on first use, so processes that only need the records and hooks (compile
workers, plugins) never import JAX.

Layout: the modules directly in this folder are the public surface, declared below (``PUBLIC_MODULES`` for
users, ``PLUGIN_API`` and ``CACHE_PLUGIN_API`` for plugins; ``tests/test_structure.py`` holds the tree and
the plugins to these lists). Everything else is internal and lives in a subpackage, one per family, each a
floor that imports only the floors below it: ``adapters`` (one per dependency) < ``calls`` (a call as a value)
< ``eager`` (eager calls made again: their memo and generated runners) < ``cache`` < ``compile`` (backends,
front end, compile service, workers) < ``tuning`` < ``process`` (state) < ``lowering`` (the JAX primitive and
what it emits) < ``porting`` (kernels from torch libraries) < ``sharding`` (partitioned launchers) < ``cli``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tritonplug.errors import (
    CompileError,
    KernelImportError,
    KernelSourceError,
    OutOfResourcesError,
    PartitionError,
    PluginError,
    TritonplugError,
    WorkerError,
)
from tritonplug.process.logs import configure_logging

#: Modules a user may import by path; their names are the API.
PUBLIC_MODULES = (
    "tritonplug.api", "tritonplug.debug", "tritonplug.errors", "tritonplug.inspection", "tritonplug.settings",
    "tritonplug.testing", "tritonplug.tuner", "tritonplug.utils", "tritonplug.version",
)
#: The only host modules a backend plugin imports (entry-point group ``tritonplug.backends``).
PLUGIN_API = ("tritonplug.hookspecs", "tritonplug.records", "tritonplug.plugin_kit")
#: What a remote-cache plugin imports besides (entry-point group ``tritonplug.caches``).
CACHE_PLUGIN_API = ("tritonplug.cache_hookspecs", "tritonplug.cache_records")

_LAZY = {
    "triton_call": "tritonplug.api",
    "compile_stats": "tritonplug.process.state",
    "backends": "tritonplug.process.state",
    "backend_for": "tritonplug.process.state",
    "register_plugin": "tritonplug.process.state",
    "tune": "tritonplug.tuner",
    "set_inline": "tritonplug.api",
    "kernels_of": "tritonplug.porting.kernel_source",
    "kernels_from_file": "tritonplug.porting.kernel_source",
    "export_disabled_checks": "tritonplug.adapters.jaxlib_compat",
    "TensorDescriptor": "tritonplug.calls.tensor_descriptor",
    "cdiv": "tritonplug.utils",
    "launch": "tritonplug.porting.launcher",
    "partitioned": "tritonplug.sharding.launcher",
    "sharding_rule": "tritonplug.sharding.launcher",
    "shard_offset": "tritonplug.sharding.offsets",
    "check_rule": "tritonplug.sharding.launcher",
    "Launcher": "tritonplug.porting.launcher",
    "Tensor": "tritonplug.porting.launcher",
    "tensor": "tritonplug.porting.launcher",
    "empty": "tritonplug.porting.launcher",
    "empty_like": "tritonplug.porting.launcher",
    "zeros": "tritonplug.porting.launcher",
    "zeros_like": "tritonplug.porting.launcher",
    "torch_launcher": "tritonplug.porting.ported",
    "get_compute_capability": "tritonplug.utils",
    "next_power_of_2": "tritonplug.utils",
    "strides_from_shape": "tritonplug.utils",
    "__version__": "tritonplug.version",
    "__version_info__": "tritonplug.version",
}
#: Submodules reachable as attributes (``tritonplug.inspection.kernel_calls(...)``), imported on first use.
_LAZY_SUBMODULES = frozenset({"debug", "inspection"})
CUSTOM_CALL_TARGET_NAME = "triton_kernel_call_ffi"

__all__ = [
    "CUSTOM_CALL_TARGET_NAME", "CompileError", "KernelImportError", "KernelSourceError", "Launcher",
    "OutOfResourcesError", "PartitionError", "PluginError", "Tensor", "TensorDescriptor", "TritonplugError",
    "WorkerError", "backend_for", "backends", "cdiv",
    "check_rule", "compile_stats",
    "debug", "empty", "empty_like", "export_disabled_checks", "get_compute_capability", "inspection",
    "kernels_from_file", "kernels_of", "launch", "next_power_of_2", "partitioned", "register_plugin",
    "set_inline", "shard_offset", "sharding_rule", "strides_from_shape", "tensor",
    "torch_launcher", "triton_call", "tune", "zeros", "zeros_like", "__version__", "__version_info__",
]

if TYPE_CHECKING:
    from tritonplug import debug, inspection
    from tritonplug.adapters.jaxlib_compat import export_disabled_checks
    from tritonplug.api import set_inline, triton_call
    from tritonplug.calls.tensor_descriptor import TensorDescriptor
    from tritonplug.porting.kernel_source import kernels_from_file, kernels_of
    from tritonplug.porting.launcher import Launcher, Tensor, empty, empty_like, launch, tensor, zeros, zeros_like
    from tritonplug.porting.ported import torch_launcher
    from tritonplug.process.state import backend_for, backends, compile_stats, register_plugin
    from tritonplug.sharding.launcher import check_rule, partitioned, sharding_rule
    from tritonplug.sharding.offsets import shard_offset
    from tritonplug.tuner import tune
    from tritonplug.utils import cdiv, get_compute_capability, next_power_of_2, strides_from_shape
    from tritonplug.version import __version__, __version_info__


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"tritonplug.{name}")  # the import binds it in globals() too
    if name not in _LAZY:
        raise AttributeError(f"module 'tritonplug' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _LAZY_SUBMODULES)


configure_logging()
