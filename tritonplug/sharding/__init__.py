"""Partitioned launchers: a function that calls Triton kernels, run per shard inside a sharded ``jit``."""
