"""tritonplug-redis: a fleet-wide kernel cache for tritonplug on a Redis server (see plugin.py)."""
