"""Kernels from PyTorch libraries: Triton's launch syntax on JAX values (``tritonplug.launch``),
``tritonplug.torch_launcher``, and ``tritonplug.kernels_of`` (a library's kernels without importing torch).
Use them through the names ``tritonplug`` exports; the modules are internal.
"""
