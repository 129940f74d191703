"""CPU: what XLA makes of each corpus kernel on the XLA path: the optimized HLO's size (noise-free, unlike timings).

    python bench/cpu_xla_hlo_counts.py OUT.json

Per kernel of ``bench/interpret_corpus.py``: instructions, fusions, gathers and selects of the compiled
module (``jax.jit(...).lower(...).compile().as_text()``). Run it in two checkouts (each with its own ``.venv``)
to compare what a change to the translator gives XLA to compile; ``bench/cpu_xla_ab.py`` times the same kernels.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TRITONPLUG_CPU_PATH", "xla")

import interpret_corpus as corpus  # noqa: E402
import jax  # noqa: E402


def counts(text: str) -> dict[str, int]:
    """Instructions, fusions, gathers and selects of an optimized HLO module's text."""
    return {"instructions": sum(1 for line in text.splitlines() if re.match(r"\s+(ROOT )?%\S+ = ", line)),
            "fusions": len(re.findall(r" fusion\(", text)), "gathers": len(re.findall(r" gather\(", text)),
            "selects": len(re.findall(r" select\(", text))}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = {}
    for name, make in corpus._specs().items():
        spec = make()
        out[name] = counts(jax.jit(corpus._program(spec)).lower(*corpus._operands(spec)).compile().as_text())
    Path(args[0]).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
