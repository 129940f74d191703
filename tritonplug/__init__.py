"""tritonplug: call hand-written Triton kernels from JAX, through pluggable backends.

Public names load on first use, so processes that only need the records and hooks (compile
workers, plugins) never import JAX.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tritonplug.errors import CompileError, KernelSourceError, PluginError, TritonplugError, WorkerError
from tritonplug.logs import configure_logging

_LAZY = {
    "triton_call": "tritonplug.api",
    "compile_stats": "tritonplug.state",
    "backends": "tritonplug.state",
    "backend_for": "tritonplug.state",
    "register_plugin": "tritonplug.state",
    "tune": "tritonplug.tuning",
    "export_disabled_checks": "tritonplug.jaxlib_compat",
    "TensorDescriptor": "tritonplug.tensor_descriptor",
    "cdiv": "tritonplug.utils",
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
    "CUSTOM_CALL_TARGET_NAME", "CompileError", "KernelSourceError", "PluginError", "TensorDescriptor",
    "TritonplugError", "WorkerError", "backend_for", "backends", "cdiv", "compile_stats", "debug",
    "export_disabled_checks", "get_compute_capability", "inspection", "next_power_of_2", "register_plugin",
    "strides_from_shape", "triton_call", "tune", "__version__", "__version_info__",
]

if TYPE_CHECKING:
    from tritonplug import debug, inspection
    from tritonplug.api import triton_call
    from tritonplug.jaxlib_compat import export_disabled_checks
    from tritonplug.state import backend_for, backends, compile_stats, register_plugin
    from tritonplug.tensor_descriptor import TensorDescriptor
    from tritonplug.tuning import tune
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
