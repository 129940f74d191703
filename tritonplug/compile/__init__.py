"""From a call to binaries: the backends (plugins) and the target, the front end (configurations, TTIR,
cache keys), the compile service (memory, disk cache, remote tier, workers) and the pool of compile-worker
subprocesses. Internal: no stable import path; a backend implements ``tritonplug.hookspecs``.
"""
