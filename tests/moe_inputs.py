"""The MoE layer's test inputs, shared by the CPU-mesh child (``test_moe_parallel.py``) and the GPU test
(``test_moe_ragged_gpu.py``): NumPy fp32 tokens, a router and experts' weights small enough that SwiGLU stays
in its curved range, and a cotangent for the output."""

from __future__ import annotations

import numpy as np


def mlp_arrays(tokens: int, hidden: int, ffn: int, experts: int, seed: int = 0):
    """``(h, params, cotangent)``: ``h`` ``(tokens, hidden)``, ``params`` with ``router`` ``(hidden, experts)``,
    ``w_gate_up`` ``(experts, hidden, 2 * ffn)``, ``w_down`` ``(experts, ffn, hidden)``."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((tokens, hidden)).astype(np.float32)
    params = {"router": rng.standard_normal((hidden, experts)).astype(np.float32),
              "w_gate_up": (0.3 * rng.standard_normal((experts, hidden, 2 * ffn))).astype(np.float32),
              "w_down": (0.3 * rng.standard_normal((experts, ffn, hidden))).astype(np.float32)}
    return h, params, rng.standard_normal((tokens, hidden)).astype(np.float32)
