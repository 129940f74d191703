"""Importing this plugin fails, as a plugin whose native library is missing would."""

raise ImportError("tritonplug_broken_import needs libexample_driver.so, which is not installed")
