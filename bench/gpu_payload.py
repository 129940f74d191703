"""What a lent GPU machine needs beside the checkout, built here: it has no package index.

* ``.whl/``: wheels for the device's Python (3.12) of the kernel libraries the examples and the corpus load
  (pinned in ``examples/requirements-kernels.txt``, vLLM aside) and of the tools the GPU tests import; installed
  there with ``pip install --no-index --no-deps --target /tmp/site .whl/*.whl``.
* ``.moe-libs/``: vLLM's Python sources that ``examples/moe`` loads ``fused_moe_kernel`` from (the top level and
  the packages its module imports; the wheel itself is 400 MB of CUDA builds) and mamba-ssm's ``mamba_ssm/``
  (``examples/fetch_kernel_sources.py``: an sdist whose build wants torch). Put on ``PYTHONPATH`` there.

Both are git-ignored, so a fresh checkout has neither; carry them to the device (``carry: [".moe-libs",
".whl"]``, 12 MB together). Each bench/results README names its call's prefix.

    python bench/gpu_payload.py            # both, from PyPI (pip download), replacing what is there
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import fetch_kernel_sources  # noqa: E402

PYTHON = "3.12"  #: the device's Python (its torch venv)
#: the wheels beside the pinned kernel libraries: einops (fla), setuptools (Triton's build helpers on 3.12),
#: jax-triton (its test suite, bench/jax_triton_suite) and hypothesis with its dependencies (the GPU tests)
TOOLS = ("einops", "setuptools", "jax-triton==0.3.1", "hypothesis", "sortedcontainers", "attrs")
#: the vLLM sources examples/moe/kernels.py's module needs, as paths inside the wheel
VLLM_SOURCES = re.compile(r"^vllm/([^/]+\.py|(platforms|utils|triton_utils|plugins|v1/attention|"
                          r"model_executor/layers/fused_moe)/.*\.py)$")


def pins() -> list[str]:
    """``examples/requirements-kernels.txt``'s pinned requirements (``name==version``)."""
    lines = (ROOT / "examples" / "requirements-kernels.txt").read_text().splitlines()
    return [line.strip() for line in lines if "==" in line and not line.lstrip().startswith("#")]


def download(requirements: list[str], into: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", PYTHON, "--dest", str(into), *requirements], check=True)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    wheels, libs = ROOT / ".whl", ROOT / ".moe-libs"
    pinned = pins()
    vllm = [p for p in pinned if p.startswith("vllm==")]
    for folder in (wheels, libs):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
    download([p for p in pinned if p not in vllm] + list(TOOLS), wheels)
    with tempfile.TemporaryDirectory() as tmp:
        download(vllm, Path(tmp))
        (wheel,) = Path(tmp).glob("vllm-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            sources = [name for name in archive.namelist() if VLLM_SOURCES.match(name)]
            archive.extractall(libs, sources)
    print(fetch_kernel_sources.fetch(libs))
    print(f"{len(list(wheels.glob('*.whl')))} wheels in {wheels}; {len(sources)} vLLM sources in {libs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
