"""tritonplug's CUDA backend."""

__version__ = "0.1.0"
