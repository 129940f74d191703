"""``@tritonplug.torch_launcher``: run a library's torch launcher body on JAX values.

A torch launcher reads strides and views off its tensor arguments and returns tensors. Decorated,
the same body gets :func:`tritonplug.tensor` handles for its array arguments (those named in
``writes`` over a ``jax.new_ref`` of their value: the kernel updates them in place) and its caller
gets JAX arrays back for the handles it returns, so the body needs no ``tensor(...)`` / ``[...]``
lines of its own: only its allocations (``torch.empty`` → ``tritonplug.empty``) change.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax

from tritonplug.calls import binding
from tritonplug.porting.launcher import Tensor, tensor


def torch_launcher(fn: Callable[..., Any] | None = None, *, writes: Sequence[str] = ()) -> Any:
    """Decorate a torch launcher ported to JAX: array arguments arrive as torch-like handles, the
    ones named in ``writes`` over a ``jax.new_ref`` (updated in place, as the torch launcher updates
    them), and every handle in the result (any pytree) leaves as its JAX array."""
    if fn is not None and not callable(fn):  # @torch_launcher("x"): the names belong in writes=
        raise TypeError(_not_a_function(fn))
    writes = (writes,) if isinstance(writes, str) else tuple(writes)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        unknown = [name for name in writes if name not in signature.parameters]
        if unknown:
            raise TypeError(f"torch_launcher(writes=...): {fn.__name__} has no parameter(s) {unknown}")

        @functools.wraps(fn)
        def launcher(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            for name, value in bound.arguments.items():
                if name in writes:
                    if not binding.is_array(value):
                        raise TypeError(f"{fn.__name__}: argument {name!r} is written in place (writes=...), so it "
                                        f"must be an array or a jax.new_ref, got {type(value).__name__}")
                    ref = value if binding.is_ref(value) or isinstance(value, Tensor) else jax.new_ref(value)
                    bound.arguments[name] = tensor(ref)
                elif binding.is_array(value):
                    bound.arguments[name] = tensor(value)
            result = fn(*bound.args, **bound.kwargs)
            return jax.tree_util.tree_map(lambda v: v[...] if isinstance(v, Tensor) else v, result)

        return launcher

    return decorate(fn) if fn is not None else decorate


def _not_a_function(given: Any) -> str:
    """What ``@torch_launcher(given)`` is told when ``given`` is no function: names go in ``writes=``."""
    names = (given,) if isinstance(given, str) else tuple(given) if isinstance(given, (list, tuple)) else ()
    hint = ""
    if names and all(isinstance(n, str) for n in names):
        hint = f"; the parameters it writes in place are named by keyword: @tritonplug.torch_launcher(writes={names!r})"
    return (f"torch_launcher decorates a function (@tritonplug.torch_launcher, or @tritonplug.torch_launcher(writes="
            f"(...))), got {type(given).__name__} {given!r:.80}{hint}")
