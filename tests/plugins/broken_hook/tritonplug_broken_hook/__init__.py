"""A deliberately broken tritonplug plugin (test fixture): its detect_target hook raises."""
