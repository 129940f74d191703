"""tritonplug's CPU backend: Triton kernels run in Triton's interpreter on NumPy buffers."""

__version__ = "0.1.0"
