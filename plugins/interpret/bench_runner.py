"""Timing (not a test): run_launch vs calling Triton's interpreter directly on the same add kernel.

    python plugins/interpret/bench_runner.py [--check] [--repeat 30]

The direct call is ``InterpretedFunction(kernel.fn)[grid](x, y, out, n, BLOCK=1024)`` with
minimal torch-free stand-ins for CPU tensors (what ``GridExecutor`` touches: ``data_ptr``,
``dtype``, ``untyped_storage`` …); like torch CPU tensors they are never copied.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from tritonplug_interpret.runner import run_launch  # noqa: E402

from tritonplug.records import ArrayParam, BufferSpec, ConstexprParam, Launch, ScalarParam  # noqa: E402


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


class _Storage:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def data_ptr(self) -> int:
        return self.array.__array_interface__["data"][0]

    def cpu(self) -> _Storage:
        return self

    def copy_(self, other: _Storage) -> None:
        if other.data_ptr() != self.data_ptr():
            np.copyto(self.array, other.array)


class HostTensor:
    """The part of a torch CPU tensor that Triton's GridExecutor uses."""

    def __init__(self, array: np.ndarray | None, dtype) -> None:
        self.array, self.dtype = array, dtype

    def data_ptr(self) -> int:
        return self.array.__array_interface__["data"][0]

    def untyped_storage(self) -> _Storage:
        return _Storage(self.array)

    def new_empty(self, *_, **__) -> HostTensor:
        return HostTensor(None, self.dtype)

    def set_(self, storage: _Storage, *_) -> HostTensor:
        self.array = storage.array
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self):
        return self.array.shape

    def stride(self):
        return tuple(s // self.array.itemsize for s in self.array.strides)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="time run_launch in checked mode")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    n, block = 1 << 16, 1024
    grid = (triton.cdiv(n, block), 1, 1)
    rng = np.random.default_rng(0)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    launch = Launch("add_kernel", grid, (ArrayParam(0), ArrayParam(1), ArrayParam(2), ScalarParam(n, "i32"),
                                         ConstexprParam(block)),
                    ("x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"), (BufferSpec((n, ), "float32"), ) * 2,
                    (BufferSpec((n, ), "float32"), ), kernel=add_kernel)
    direct = InterpretedFunction(add_kernel.fn)
    out_a, out_b = np.zeros(n, np.float32), np.zeros(n, np.float32)
    hx, hy, hout = HostTensor(x, tl.float32), HostTensor(y, tl.float32), HostTensor(out_b, tl.float32)

    def ours() -> None:
        run_launch(launch, [x, y], [out_a], args.check)

    def theirs() -> None:
        direct[grid](hx, hy, hout, n, BLOCK=block)

    ours(), theirs()  # warm up: AST rewrite, caches
    assert np.array_equal(out_a, x + y) and np.array_equal(out_b, x + y)
    t_ours, t_theirs = [], []
    for _ in range(args.repeat):
        for fn, times in ((ours, t_ours), (theirs, t_theirs)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    a, b = statistics.median(t_ours), statistics.median(t_theirs)
    print(f"triton {triton.__version__}: n=2^16, BLOCK={block}, {grid[0]} programs, check={args.check}")
    print(f"run_launch          median {a * 1e3:8.2f} ms")
    print(f"interpreter direct  median {b * 1e3:8.2f} ms")
    print(f"ratio run_launch / direct = {a / b:.3f}")


if __name__ == "__main__":
    main()
