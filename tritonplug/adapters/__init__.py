"""Adapters over the dependencies: one module per dependency, the only place that touches its internals.

``jax_compat`` (JAX), ``jaxlib_compat`` (jaxlib's Triton runtime), ``triton_compat`` (Triton's Python API) and
``host_ffi`` (an XLA FFI custom call that runs Python on CPU buffers). Everything above them sees one API whatever
the installed versions. Internal: no stable import path.
"""
