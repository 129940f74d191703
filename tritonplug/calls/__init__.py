"""A ``triton_call`` as a value: its options, its arguments bound to the kernel's parameters, and the
hashable description (``CallSpec``) that the JAX primitive carries. Checks that name a bad argument live here, as
do the guards around the user's own callables (grids, heuristics). Internal: no stable import path.
"""
