"""A tritonplug plugin (test fixture) that claims the cpu platform the interpret backend serves."""
