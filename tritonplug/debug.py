"""Find the kernel behind a GPU fault: run the computation again on the CPU, with every access checked.

A kernel that reads or writes out of bounds on a GPU ends in ``CUDA_ERROR_ILLEGAL_ADDRESS``, which names
no kernel and leaves the process's CUDA context unusable, so nothing after it runs. The CPU backend
(``tritonplug-interpret``) runs the same kernels from the same TTIR and, in checked mode
(``TRITONPLUG_INTERPRET_CHECK=1``), stops at the first out-of-bounds access with an error naming the
kernel, the argument, the offset and the buffer's size. Two ways to get there:

* in a new process: ``JAX_PLATFORMS=cpu TRITONPLUG_INTERPRET_CHECK=1 python your_program.py`` (the GPU's
  process is poisoned; nothing of it can be reused);
* from Python, with inputs still on the host or on a healthy device: :func:`replay`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from tritonplug import settings

#: The CPU backend's (``tritonplug-interpret``'s) checked-mode variable, which it declares.
CHECK_VARIABLE = "TRITONPLUG_INTERPRET_CHECK"


def replay(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` on the CPU in checked mode and return its result (on the CPU).

    Arrays among the arguments (any pytree; JAX arrays on any device, NumPy arrays) are copied to the
    CPU first; ``fn`` may be jitted. The first out-of-bounds load or store of any kernel it calls raises
    the interpreter's ``OutOfBoundsAccess``, naming the kernel, the argument and the offset. Programs
    already compiled in this process are compiled again (checked mode changes the kernels).
    """
    from tritonplug.process.state import state

    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError as exc:
        raise RuntimeError("tritonplug.debug.replay needs JAX's CPU platform (it runs the kernels on the CPU); "
                           "JAX_PLATFORMS leaves it out") from exc
    if "cpu" not in state.host().platforms():
        raise RuntimeError("tritonplug.debug.replay needs the CPU backend: pip install ./plugins/interpret "
                           "(tritonplug-interpret)")
    args, kwargs = jax.tree_util.tree_map(lambda leaf: _to_cpu(leaf, cpu), (args, kwargs))
    with _checked_mode():
        with jax.default_device(cpu):
            try:
                return jax.block_until_ready(fn(*args, **kwargs))
            except jax.errors.JaxRuntimeError as exc:  # the XLA path reports through a host callback
                message = str(exc).strip().splitlines()[-1]
                if "out-of-bounds" not in message:
                    raise
                raise OutOfBoundsError(message) from exc


class OutOfBoundsError(IndexError):
    """An out-of-bounds access found by :func:`replay`: the message names the kernel, the argument and the
    offset."""


def _to_cpu(leaf: Any, cpu: Any) -> Any:
    if isinstance(leaf, (jax.Array, np.ndarray)):
        return jax.device_put(np.asarray(leaf), cpu)
    return leaf


@contextlib.contextmanager
def _checked_mode() -> Iterator[None]:
    """Checked mode on, and every program and kernel object made without it forgotten, for the duration."""
    from tritonplug.process.state import state

    with settings.overridden(CHECK_VARIABLE, "1"):
        jax.clear_caches()
        state.memo.clear()
        try:
            yield
        finally:
            jax.clear_caches()
            state.memo.clear()
