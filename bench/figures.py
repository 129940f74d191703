"""Render the documents' figures from the runs recorded under ``bench/results/``.

    python bench/figures.py            # rewrite every block between the markers of README.md and docs/*.md
    python bench/figures.py --check    # exit 1, naming each document that differs from its rendering

A block stands between ``<!-- bench/figures.py: NAME -->`` and ``<!-- bench/figures.py: end NAME -->``; what lies
between them is generated, so a figure typed over it, or a new run recorded without rendering again, fails
``tests/test_readme_figures.py``. A configuration's figure is the median over all its recorded runs, with their range
where there are several; a run whose checks failed is named beside the figures and not counted (``_report.py``).
Which runs make each figure: the ``*_RUNS`` lists and folder lists of ``_figures_*.py``. docs/moe.md has its own
script, ``bench/moe_report.py``, built on the same ``_report.py``.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # for the _figures_* modules, when loaded by path (tests)
import _figures_eager as eager  # noqa: E402
import _figures_fusion as fusion  # noqa: E402
import _figures_kernels as kernels  # noqa: E402
import _figures_model as model  # noqa: E402
import _figures_partitioned as partitioned  # noqa: E402
import _figures_summary as summary  # noqa: E402
from _report import ROOT, replace_between, rewrite  # noqa: E402

#: document (relative to the repository) -> block name -> its rendering
BLOCKS: dict[str, dict[str, Callable[[], str]]] = {
    "README.md": {"performance": summary.readme_performance},
    "docs/benchmarks.md": {
        "in-short": summary.in_short, "cpu-xla": kernels.cpu_xla, "h200-kernels": kernels.h200_kernels,
        "h200-compile": kernels.h200_compile, "h200-goals": summary.h200_goals, "ncu-add": summary.ncu_add,
        "jax-triton-suite": kernels.jax_triton_suite,
        "h200-launch-ab": eager.h200_launch_ab, "eager-paired": eager.eager_paired, "eager-guards": eager.eager_guards,
        "eager-runners": eager.eager_runners, "eager-runners-summary": eager.eager_runners_summary,
        "compile-workers": kernels.compile_workers, "startup-cpu": lambda: kernels.startup("cpu"),
        "startup-gpu": lambda: kernels.startup("gpu"), "hopper": kernels.hopper, "ports": kernels.ports,
        "fusion-ops": fusion.ops, "fusion-step": fusion.step,
        "fusion-store-forms": lambda: fusion.forms("bench/fusion_store_forms.py"),
        "fusion-swiglu-forms": lambda: fusion.forms("bench/fusion_swiglu_forms.py")},
    "docs/model.md": {"one-gpu": model.one_gpu_tables, "largest-batch": model.largest_batch, "per-op": model.per_op,
                      "attention-configs": model.attention_configs,
                      "meshes": model.meshes, "vocab-parallel": model.vocab_parallel,
                      "loss-curves": model.loss_curves},
    "docs/partitioned.md": {"suite": partitioned.suite, "scaling": partitioned.scaling,
                            "xla-comparison": partitioned.xla_comparison, "ports": partitioned.ports,
                            "multiprocess": partitioned.multiprocess},
}
#: where each document is read from and written to (a test points one at a copy)
DOCUMENTS: dict[str, Path] = {name: ROOT / name for name in BLOCKS}
MARKER = re.compile(r"<!-- bench/figures\.py: (?!end )(\S+) -->")
WIDTH = 116
#: a line that would open a list, heading, quote or table where a paragraph was meant
BLOCK_START = re.compile(r"^([-+*>#|]\s|\d+[.)]\s)")


def begin(name: str) -> str:
    return f"<!-- bench/figures.py: {name} -->"


def end(name: str) -> str:
    return f"<!-- bench/figures.py: end {name} -->"


def wrap(text: str) -> str:
    """Prose wrapped as the documents are; table rows and blank lines as they are."""
    out = []
    for line in text.split("\n"):
        if line.startswith("|") or not line:
            out.append(line)
        else:
            indent = "  " if line.startswith("* ") else ""
            lines = textwrap.wrap(line, WIDTH, subsequent_indent=indent, break_long_words=False,
                                  break_on_hyphens=False)
            bad = [x for x in lines[1:] if BLOCK_START.match(x.strip())]
            if bad:
                raise ValueError(f"wrapping would start a markdown block: {bad[0]!r}")
            out += lines
    return "\n".join(out)


def render(document: str, text: str) -> str:
    """``text`` (the document ``document``) with each of its blocks rendered again.

    A block the document lacks, or a marker naming no block, raises ``ValueError``.
    """
    found = MARKER.findall(text)
    unknown = set(found) - set(BLOCKS[document])
    if unknown:
        raise ValueError(f"{document}: markers for no block: {sorted(unknown)}")
    for name, block in BLOCKS[document].items():
        text = replace_between(text, begin(name), end(name), f"{begin(name)}\n{wrap(block())}\n{end(name)}")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a document differs from its rendering")
    args = p.parse_args(argv)
    renderers = {path: (lambda text, name=name: render(name, text)) for name, path in DOCUMENTS.items()}
    return rewrite(renderers, args.check, "bench/figures.py")


if __name__ == "__main__":
    sys.exit(main())
