"""An example backend for JAX platforms the tritonplug host never names (``oneapi``, ``tpu``)."""

__version__ = "0.1.0"
