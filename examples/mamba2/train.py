"""Train the Mamba-2 model of ``examples/mamba2`` (the Llama example's family with Mamba-2 mixers) on synthetic
text, with one SSD op choice or both.

    python examples/mamba2/train.py --config tiny --ops compare --steps 8          # a CPU, seconds
    python examples/mamba2/train.py --config 1.3b-4l --ops tritonplug --steps 20   # one GPU
    python examples/mamba2/train.py --config tiny --ops compare --documents 24     # packed documents

``--ops`` is ``jax`` (the chunked SSD in ``jnp``, ``ssd_jnp.py``), ``tritonplug`` (mamba-ssm's Triton SSD kernels
through tritonplug, ``examples/ports/mamba_ssd.py``) or ``compare``: both from the same init and batches. The rest
of the model runs XLA's ops (``--dense-ops`` picks the Llama example's choice for the RMSNorms and the loss). The
last line printed is one JSON object, as ``examples/llama/train.py`` prints: per choice the losses, tokens/s and
memory; ``max_loss_difference`` between the first choice and the other.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "examples.mamba2"

from examples.llama import train as llama_train  # noqa: E402

from . import model  # noqa: E402
from .config import CONFIGS  # noqa: E402
from .model import CHOICES  # noqa: E402


def parse_args(argv=None):
    p = llama_train.parser(__doc__.split("\n\n")[0], CONFIGS, f"{' | '.join(CHOICES)} | compare")
    p.add_argument("--dense-ops", default="jax", help="the Llama example's op choice for the RMSNorms and the loss")
    p.add_argument("--chunk", type=int, help="override the config's SSD chunk size")
    p.add_argument("--documents", type=int, help="pack documents of this mean length into each row (each from a "
                   "BOS token, the mixers restarting there: seq_idx); default: one per row")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    cfg = llama_train.configure(args, CONFIGS)
    if args.chunk is not None:
        cfg = cfg.replace(chunk=args.chunk)
    if args.documents is not None:
        cfg = cfg.replace(documents=args.documents)
    return llama_train.train_family(args, cfg, model, lambda c, dense, mesh: model.Mamba2Ops(c, dense), argv,
                                    documents=cfg.documents)


if __name__ == "__main__":
    main()
