"""Ports of PyTorch-ecosystem Triton kernels to JAX with ``tritonplug.launch`` (see README, "Bring a PyTorch kernel")."""
