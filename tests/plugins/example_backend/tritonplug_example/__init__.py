"""An example third-party tritonplug backend (see docs/writing-a-backend.md)."""

__version__ = "0.1.0"
