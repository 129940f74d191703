"""Triton kernels as JAX array programs: TTIR → jax.numpy/jax.lax, compiled by XLA for the CPU.

The plugin may build a kernel from JAX's public array API (jax.numpy, jax.lax, jax.vmap) but
never touches JAX's tracing or lowering machinery; the host inlines the function it returns.
"""

from __future__ import annotations

from tritonplug.records import Launch
from tritonplug_interpret.xla.driver import Translation
from tritonplug_interpret.xla.inline import inline_calls
from tritonplug_interpret.xla.program import Unsupported
from tritonplug_interpret.xla.ttir import TtirSyntaxError, parse_module

__all__ = ["Translation", "Unsupported", "translate"]


def translate(ttir: str, launch: Launch, check: bool) -> Translation:
    """Bind ``launch`` to the public function of (canonicalised) ``ttir``; raises :class:`Unsupported`."""
    try:
        functions = parse_module(ttir)
    except TtirSyntaxError as exc:
        raise Unsupported("ttir", str(exc)) from exc
    public = [f for f in functions.values() if f.public]
    if len(public) != 1:
        raise Unsupported("tt.func", f"the module has {len(public)} public functions")
    return Translation(inline_calls(public[0]), launch, check)
