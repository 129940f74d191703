"""Every code block of README.md and docs/*.md runs, as a reader would run it (issue 28).

Each ```python block runs alone in a fresh Python process on the CPU backend (so a block must be complete: its
imports and names are its own), with the environment a new user has (no ``TRITONPLUG_*`` variable but the test
session's private cache directory); each ```bash / ```sh / ```console block runs alone in ``bash -euo pipefail``
from the repository's root, with this Python's ``bin`` first on PATH (``python``, ``tritonplug``). A block
either runs or is marked, visibly, right before its fence in the markdown:

* ``<!-- not run: why -->``: never run here (a GPU, the network, an install, an hour of CI); listed by
  ``test_few_blocks_are_marked_not_run``, which allows at most ``MAX_NOT_RUN`` of them;
* ``<!-- needs: module[, module] -->``: runs where those modules are found (``tox -e cpu`` installs
  liger-kernel, fla-core and optax), and is skipped with that reason elsewhere.

Blocks in the languages of ``DATA`` (``text``, ``json``, ``toml``) are output, formats and layouts, not code; a
fence without a language is refused, so that every block says which it is. A data block opening with ``# path``
quotes that file of the repository, and is checked against it. A temporary file holds each block's
code at the markdown's own line numbers, so a traceback's line is the document's.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = {"bash", "sh", "console"}
RUN = {"python"} | SHELLS
DATA = {"text", "json", "toml"}
MAX_NOT_RUN = 8
TIMEOUT_S = 300

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not run|needs):\s*(?P<text>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    index: int  #: the block's place among its document's fenced blocks, from 0
    line: int  #: the line of the opening fence, from 1
    lang: str
    code: str
    not_run: str | None
    needs: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}#{self.index}"


def read_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, with the markers on the lines right before each fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, lang = len(opening["indent"]), opening["lang"]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"{path.name}:{i + 1}: a code block is never closed"
        markers = {}
        j = i - 1
        while j >= 0 and MARKER.match(lines[j]):
            found = MARKER.match(lines[j])
            markers[found["kind"]] = found["text"]
            j -= 1
        code = "\n".join(line[indent:] for line in lines[i + 1:end])
        needs = tuple(m.strip() for m in markers.get("needs", "").split(",") if m.strip())
        blocks.append(Block(path, len(blocks), i + 1, lang, code, markers.get("not run"), needs))
        i = end + 1
    return blocks


BLOCKS = [block for path in DOCUMENTS for block in read_blocks(path)]
RUNNABLE = [block for block in BLOCKS if block.lang in RUN]


def test_every_block_says_its_language_and_markers_are_spelt_right() -> None:
    unknown = [f"{b.name} (line {b.line}): ```{b.lang}" for b in BLOCKS if b.lang not in RUN | DATA]
    assert not unknown, f"give these blocks one of the languages {sorted(RUN | DATA)}: {unknown}"
    for path in DOCUMENTS:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.match(r"\s*<!--\s*(not run|needs)\b", line):
                assert MARKER.match(line), f"{path.name}:{number}: write `<!-- not run: why -->` or " \
                                           f"`<!-- needs: module -->`, alone on the line before the fence"
    assert all(b.not_run for b in BLOCKS if b.not_run is not None), "a `not run` marker says why"


def test_few_blocks_are_marked_not_run() -> None:
    marked = [f"{b.name} (line {b.line}): {b.not_run}" for b in RUNNABLE if b.not_run]
    print("\n".join(["blocks not run:", *marked]))
    assert len(marked) <= MAX_NOT_RUN, f"{len(marked)} blocks are marked not run, more than {MAX_NOT_RUN}: {marked}"
    assert len(RUNNABLE) - len(marked) >= 10, "most blocks run"


def test_the_readme_is_a_front_page() -> None:
    """At most 250 lines, opening on the Quick start: the two commands, the second the one CI runs."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[0] == "## Quick start", headings
    assert lines.index("## Quick start") <= 8, "a short introduction, then the Quick start"
    quick = read_blocks(ROOT / "README.md")[0]
    install_and_run, test = quick.code.splitlines()
    assert install_and_run.endswith("examples/add.py")
    assert test in (ROOT / ".ci" / "run").read_text(encoding="utf-8"), "CI runs the README's test command"


def test_the_env_list_is_written_once() -> None:
    """tox.ini's envlist is the only list of the envs: ``tox`` with no -e runs it; nothing repeats it."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    envs = [e.strip() for e in tox["tox"]["envlist"].split(",")]
    assert all(tox.has_section(f"testenv:{env}") for env in envs)
    for path in [*DOCUMENTS, ROOT / ".ci" / "run", ROOT / "toxfile.py"]:
        text = path.read_text(encoding="utf-8")
        assert ",".join(envs[:3]) not in text and " ".join(envs[:3]) not in text, f"{path.name} lists the envs"
        assert not re.search(r"\btox -e [\w-]+,[\w-]+", text), f"{path.name} runs a list of envs: run `tox`"


QUOTED = [b for b in BLOCKS if b.lang in DATA and re.match(r"# [\w./-]+\n", b.code)]


@pytest.mark.parametrize("block", QUOTED, ids=lambda b: b.name)
def test_a_quoted_file_says_what_the_file_says(block: Block) -> None:
    """A data block that opens with ``# path`` quotes that file: its lines are the file's, in the file's order."""
    first, *quoted = block.code.splitlines()
    lines = iter((ROOT / first[2:].strip()).read_text(encoding="utf-8").splitlines())
    for line in filter(str.strip, quoted):
        assert line in lines, f"{block.name}: {line!r} is not in {first[2:]} (or not in this order)"


def _environment(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONPLUG_") and k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", TRITONPLUG_CACHE_DIR=os.environ.get("TRITONPLUG_CACHE_DIR", str(cache)),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    return env


@pytest.mark.parametrize("block", [b for b in RUNNABLE if not b.not_run], ids=lambda b: b.name)
def test_the_block_runs(block: Block, tmp_path: Path) -> None:
    missing = [m for m in block.needs if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{block.name} needs {', '.join(missing)}, not installed here (tox -e cpu installs it)")
    source = tmp_path / f"{block.path.name}-block{block.index}"
    source.write_text("\n" * block.line + block.code + "\n", encoding="utf-8")
    if block.lang == "python":
        command, cwd = [sys.executable, str(source)], tmp_path
    else:
        command, cwd = ["bash", "-euo", "pipefail", str(source)], ROOT
    done = subprocess.run(command, cwd=cwd, env=_environment(tmp_path / "cache"), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, (f"{block.name}, the ```{block.lang} block at line {block.line} of "
                                  f"{block.path.relative_to(ROOT)}, failed:\n{done.stdout[-3000:]}\n"
                                  f"{done.stderr[-6000:]}")
