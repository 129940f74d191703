"""A corpus entry: one launch of a real library kernel, described in the library's own words.

``Launch`` holds what the library's torch launcher passes: the kernel object as the library exposes it
(``module`` + ``kernel``: a ``JITFunction``, an ``Autotuner``, a ``Heuristics``, a ``LibEntry``), the grid
(a tuple or a callable of the metaparameters), the positional arguments in the library's order and its
keywords (constexprs and launch options included), with every buffer named by a :class:`Buf`; which
buffers the kernel writes (``"out"``: the launcher allocates it, ``"inout"``: read and written in place);
the initial contents of every buffer; and a reference of the op (NumPy, or ``jax.vjp`` of a ``jnp``
forward for gradients) giving the expected contents of the written buffers it checks (after ``post``: partial
sums that the launcher reduces are compared reduced).
The drivers (``driver.py``: tritonplug; ``torch_driver.py``: Triton's own launcher) read the same record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Buf:
    """A buffer argument, by name (its contents are ``Launch.buffers[name]``)."""

    name: str


@dataclass(frozen=True)
class Launch:
    id: str  # "liger/rms_norm_fwd"
    module: str  # the library module that defines the kernel
    kernel: str  # its name there
    grid: Any  # as the launcher passes it: a tuple, or a callable of the metaparameters
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)  # name → "out" | "inout"
    expect: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None
    #: what the launcher does with a written buffer after the launch (``_dW.sum(0)``): applied before comparing
    post: dict[str, Callable[[np.ndarray], np.ndarray]] = field(default_factory=dict)
    rtol: float = 1e-5
    atol: float = 1e-5
    gpu_only: str = ""  # why the CPU cannot run it (the reason is printed in the skip)
    #: Triton's own front end refuses this kernel on the supported Triton versions with a message matching this
    #: regex (a library bug): the right outcome is the same refusal, pointing at the library's file
    triton_error: str = ""

    def __post_init__(self) -> None:
        named = {a.name for a in (*self.args, *self.kwargs.values()) if isinstance(a, Buf)}
        missing = named - set(self.buffers)
        assert not missing, f"{self.id}: buffers {sorted(missing)} have no contents"
        assert set(self.written) <= named, f"{self.id}: written buffers {set(self.written) - named} are not passed"
        assert set(self.written.values()) <= {"out", "inout"}, self.id

    @property
    def library(self) -> str:
        return self.id.split("/")[0]


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(gen: np.random.Generator, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return gen.standard_normal(shape).astype(dtype)


def next_power_of_2(n: int) -> int:
    return 1 << (max(n, 1) - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
