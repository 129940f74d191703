"""tritonplug: call hand-written Triton kernels from JAX, through pluggable backends."""

from tritonplug.api import triton_call
from tritonplug.compiler import compile_stats
from tritonplug.errors import CompileError, KernelSourceError, PluginError, TritonplugError, WorkerError
from tritonplug.host import backends, register_plugin
from tritonplug.jaxlib_compat import FFI_TARGET as CUSTOM_CALL_TARGET_NAME
from tritonplug.jaxlib_compat import export_disabled_checks
from tritonplug.logs import configure_logging
from tritonplug.tensor_descriptor import TensorDescriptor
from tritonplug.utils import cdiv, get_compute_capability, next_power_of_2, strides_from_shape

__all__ = [
    "CUSTOM_CALL_TARGET_NAME", "CompileError", "KernelSourceError", "PluginError", "TensorDescriptor",
    "TritonplugError", "WorkerError", "backends", "cdiv", "compile_stats", "export_disabled_checks",
    "get_compute_capability", "next_power_of_2", "register_plugin", "strides_from_shape", "triton_call",
]

configure_logging()
