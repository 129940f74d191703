"""Into the JAX program: the ``tritonplug_call`` primitive and its rules, the lowering pipeline per
platform (started early at trace time), and the kernel calls it emits (jaxlib's GPU runtime, or XLA on the
CPU). Internal: no stable import path.
"""
