"""What every test session needs before anything is imported or compiled; kept in the conformance kit
(``tritonplug.testing``), which plugins outside this repository use too."""

from tritonplug.testing import configure_environment, use_private_cache

__all__ = ["configure_environment", "use_private_cache"]
