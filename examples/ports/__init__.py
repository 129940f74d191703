"""Ports of PyTorch-ecosystem Triton kernels to JAX with ``tritonplug.launch`` (README: "Bring a PyTorch kernel")."""
