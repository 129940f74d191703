"""A small Llama-style decoder trained in JAX with its ops switchable between ``jnp`` and Triton kernels."""
