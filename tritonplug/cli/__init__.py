"""The ``tritonplug`` command: ``info``, ``cache`` and ``tune``."""
