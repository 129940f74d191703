"""Train the Mixture-of-Experts model of ``examples/moe`` (the Llama example's decoder with an MoE MLP) on
synthetic text, with one MoE op choice or all of them.

    python examples/moe/train.py --config tiny --ops compare --steps 8             # a CPU, seconds
    python examples/moe/train.py --config qwen3-64e --ops tritonplug --steps 20    # one GPU
    python examples/moe/train.py --config qwen3-64e --ops tritonplug-ep --mesh model=4  # experts over 4 GPUs
    python examples/moe/train.py --config qwen3-64e --ops tritonplug-ep --mesh data=4   # the same, attention DP
    python examples/moe/train.py --config qwen3-64e --ops tritonplug-ep-ragged --mesh data=4  # ragged all-to-all
    python examples/moe/train.py --config tiny --ops tritonplug-ep --mesh data=2,model=4  # 8 CPU devices (*)

``--ops`` is ``jax`` (``ragged_dot``), ``jax-dense`` (GShard's capacity dispatch and einsums), ``tritonplug``
(vLLM's grouped-matmul kernel through tritonplug, ``grouped.py``), ``tritonplug-ep`` (the same kernels with the
experts split over the mesh's ``model`` axis, or ``data`` on a data-parallel mesh, and the tokens exchanged by
all-to-all, ``parallel.py``), ``tritonplug-ep-ragged`` (split alike, the tokens sorted by expert and exchanged
by a ragged all-to-all: no capacity, nothing dropped, ``ragged.py``) or ``compare``: all five from the same init
and batches. The rest of the model runs XLA's ops (``--dense-ops`` picks the Llama example's choice for them).
The last line printed is one JSON object, as ``examples/llama/train.py`` prints: per choice the losses, tokens/s
and memory; ``max_loss_difference`` between the first choice and the others.
(*) with ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` and ``TRITONPLUG_INTERPRET_CHECK=0``. On a mesh
``tritonplug`` itself is refused (its kernels are not partitioned: the experts' weights are split by expert),
and ``compare`` runs the other four.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "examples.moe"

from examples.llama import train as llama_train  # noqa: E402

from . import model  # noqa: E402
from .config import CONFIGS  # noqa: E402
from .model import CHOICES  # noqa: E402


def parse_args(argv=None):
    p = llama_train.parser(__doc__.split("\n\n")[0], CONFIGS, f"{' | '.join(CHOICES)} | compare")
    p.add_argument("--dense-ops", default="jax", help="the Llama example's op choice for the other ops")
    p.add_argument("--experts", type=int, help="override the config's expert count")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    cfg = llama_train.configure(args, CONFIGS)
    if args.experts is not None:
        cfg = cfg.replace(experts=args.experts)
    return llama_train.train_family(args, cfg, model, model.MoEOps, argv)


if __name__ == "__main__":
    main()
