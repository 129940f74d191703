"""tritonplug's ROCm backend."""

__version__ = "0.1.0"
