"""The same ``Launch`` through Triton's own launcher on torch tensors (``kernel[grid](*args, **kwargs)``, the
library's kernel object, the same inputs), and the comparison of its buffers with tritonplug's, on a GPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from corpus import driver
from corpus.spec import Buf, Launch


def unavailable() -> str | None:
    """Why Triton's launcher cannot run here (None when torch sees a CUDA GPU and JAX does too)."""
    try:
        import torch
    except Exception as exc:  # ImportError, or a torch without its CUDA libraries
        return f"torch does not import ({type(exc).__name__}: {exc}); the GPU comparison needs torch and a GPU"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    if not any(d.platform == "gpu" for d in jax.devices()):
        return "JAX sees no GPU (install jax's CUDA plugin)"
    return None


def _tensors(launch: Launch) -> dict[str, Any]:
    import torch

    return {name: torch.from_numpy(np.ascontiguousarray(value)).cuda() for name, value in launch.buffers.items()}


def _call(launch: Launch, kernel: Any, tensors: dict[str, Any]) -> Callable[[], Any]:
    args = [tensors[a.name] if isinstance(a, Buf) else a for a in launch.args]
    kwargs = {k: tensors[v.name] if isinstance(v, Buf) else v for k, v in launch.kwargs.items()}
    return lambda: kernel[launch.grid](*args, **kwargs)


def run_triton(launch: Launch) -> dict[str, np.ndarray]:
    """The written buffers after Triton's own launch."""
    import torch

    tensors = _tensors(launch)
    _call(launch, driver.load_kernel(launch), tensors)()
    torch.cuda.synchronize()
    return {name: tensors[name].cpu().numpy() for name in launch.written}


def compare(launch: Launch, got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """Buffer by buffer (after the launcher's own reduction of partial sums, ``Launch.post``)."""
    for name in launch.written:
        a, b = got[name], want[name]
        if name in launch.post:
            a, b = launch.post[name](a), launch.post[name](b)
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=launch.rtol,
                                   atol=launch.atol, err_msg=f"{launch.id}: buffer {name}, tritonplug vs Triton")


def _median_seconds(step: Callable[[], Any], sync: Callable[[], Any], reps: int) -> float:
    step()
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_triton(launch: Launch, reps: int = 50) -> float:
    import torch

    return _median_seconds(_call(launch, driver.load_kernel(launch), _tensors(launch)), torch.cuda.synchronize, reps)


def time_tritonplug(launch: Launch, shape: str = "out_type", reps: int = 50) -> float:
    """One launch per call of a jitted function (the ``out_type`` shape: outputs allocated by XLA, in-place
    buffers as refs), synchronised like Triton's."""
    kernel = driver.load_kernel(launch)
    names = sorted(launch.buffers)
    body = {"out_type": driver._out_type, "aliases": driver._aliases}[shape]
    program = jax.jit(lambda *arrays: body(launch, kernel, dict(zip(names, arrays, strict=True))))
    arrays = [jnp.asarray(launch.buffers[n]) for n in names]
    out: list[Any] = []

    def step() -> None:
        out[:] = [program(*arrays)]

    return _median_seconds(step, lambda: jax.block_until_ready(out), reps)
