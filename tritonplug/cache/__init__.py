"""Compiled kernels kept for later: the on-disk LRU cache every process of the user shares, and the remote
tier behind it (Redis through a plugin, or JAX's coordination service). Internal: no stable import path; a
remote-cache plugin implements ``tritonplug.cache_hookspecs``.
"""
