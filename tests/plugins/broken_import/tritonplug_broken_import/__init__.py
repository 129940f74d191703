"""A deliberately broken tritonplug plugin (test fixture): importing it raises."""
