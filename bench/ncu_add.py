"""Launch the add kernel (2^28 fp32) three times through tritonplug, then three times through
Triton's own launcher on torch tensors, so Nsight Compute can time the kernels alone:

    ncu --clock-control none --kernel-name regex:add_kernel --metrics gpu__time_duration.sum,dram__bytes.sum \\
        python3 bench/ncu_add.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
from add import add, add_kernel  # noqa: E402

N, BLOCK = 1 << 28, 1024


def main() -> None:
    x = jax.random.normal(jax.random.key(0), (N,), jnp.float32)
    y = jax.random.normal(jax.random.key(1), (N,), jnp.float32)
    f = jax.jit(add)
    for _ in range(3):
        jax.block_until_ready(f(x, y))
    tx, ty = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    out = torch.empty(N, device="cuda")
    for _ in range(3):
        add_kernel[(N // BLOCK,)](tx, ty, N, out, BLOCK=BLOCK)
    torch.cuda.synchronize()
    print("launched 3 tritonplug then 3 triton_native add kernels")


if __name__ == "__main__":
    main()
