"""A deliberately broken tritonplug plugin (test fixture): a hook's signature does not match the spec."""
