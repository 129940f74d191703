"""tritonplug: call hand-written Triton kernels from JAX, through pluggable backends.

Public names load on first use, so processes that only need the records and hooks (compile
workers, plugins) never import JAX.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tritonplug.errors import (
    CompileError,
    KernelImportError,
    KernelSourceError,
    PluginError,
    TritonplugError,
    WorkerError,
)
from tritonplug.logs import configure_logging

_LAZY = {
    "triton_call": "tritonplug.api",
    "compile_stats": "tritonplug.state",
    "backends": "tritonplug.state",
    "backend_for": "tritonplug.state",
    "register_plugin": "tritonplug.state",
    "tune": "tritonplug.tuning",
    "kernels_of": "tritonplug.kernel_source",
    "kernels_from_file": "tritonplug.kernel_source",
    "export_disabled_checks": "tritonplug.jaxlib_compat",
    "TensorDescriptor": "tritonplug.tensor_descriptor",
    "cdiv": "tritonplug.utils",
    "launch": "tritonplug.launcher",
    "Launcher": "tritonplug.launcher",
    "Tensor": "tritonplug.launcher",
    "tensor": "tritonplug.launcher",
    "empty": "tritonplug.launcher",
    "empty_like": "tritonplug.launcher",
    "zeros": "tritonplug.launcher",
    "zeros_like": "tritonplug.launcher",
    "torch_launcher": "tritonplug.ported",
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
    "CUSTOM_CALL_TARGET_NAME", "CompileError", "KernelImportError", "KernelSourceError", "Launcher", "PluginError",
    "Tensor", "TensorDescriptor", "TritonplugError", "WorkerError", "backend_for", "backends", "cdiv", "compile_stats",
    "debug", "empty", "empty_like", "export_disabled_checks", "get_compute_capability", "inspection",
    "kernels_from_file", "kernels_of", "launch", "next_power_of_2", "register_plugin", "strides_from_shape", "tensor",
    "torch_launcher", "triton_call", "tune", "zeros", "zeros_like", "__version__", "__version_info__",
]

if TYPE_CHECKING:
    from tritonplug import debug, inspection
    from tritonplug.api import triton_call
    from tritonplug.jaxlib_compat import export_disabled_checks
    from tritonplug.kernel_source import kernels_from_file, kernels_of
    from tritonplug.launcher import Launcher, Tensor, empty, empty_like, launch, tensor, zeros, zeros_like
    from tritonplug.ported import torch_launcher
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
