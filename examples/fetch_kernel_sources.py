"""Fetch the kernel libraries pip cannot install without torch: mamba-ssm 2.3.2.post1's ``mamba_ssm`` package.

mamba-ssm is an sdist only on PyPI and its build wants torch and CUDA, so ``pip install --no-deps`` cannot
install it; its Triton kernels need neither (``tritonplug.kernels_of`` loads them from source). This script
downloads the pinned sdist from PyPI, checks its SHA-256, and unpacks only its ``mamba_ssm/`` package (and its
licence) into a directory on the path: by default this interpreter's site-packages (tox's corpus env runs it as a
``commands_pre``). Nothing of the sdist runs.

    python examples/fetch_kernel_sources.py [--into DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import sys
import sysconfig
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath

NAME, VERSION = "mamba-ssm", "2.3.2.post1"
SDIST = f"mamba_ssm-{VERSION}.tar.gz"
SHA256 = "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028"
INDEXES = (f"https://pypi.org/pypi/{NAME}/{VERSION}/json", f"https://pypi.org/pypi/{NAME}/json")
PACKAGE = "mamba_ssm"


class FetchError(RuntimeError):
    """A failure to say plainly (no network, a changed file on PyPI, a bad archive)."""


def _get(url: str, what: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (https URLs of PyPI only)
            return response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise FetchError(f"could not download {what} from {url}: {error} (is the network reachable?)") from error


def sdist_url() -> str:
    """The sdist's URL, from PyPI's JSON API: the release's page, else the project's (some mirrors and proxies
    answer only the latter)."""
    failures = []
    for index in INDEXES:
        try:
            answer = json.loads(_get(index, f"{NAME} {VERSION}'s release data"))
            files = answer["urls"] if index.endswith(f"{VERSION}/json") else answer["releases"][VERSION]
        except FetchError as error:
            failures.append(str(error))
            continue
        except (ValueError, KeyError) as error:
            failures.append(f"PyPI's answer for {index} is not the release JSON it should be: {error!r}")
            continue
        for entry in files:
            if entry.get("filename") == SDIST:
                return str(entry["url"])
        failures.append(f"{index} lists no {SDIST} (files: {[f.get('filename') for f in files]})")
    raise FetchError("; ".join(failures))


def verified(data: bytes) -> bytes:
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise FetchError(f"{SDIST} has SHA-256 {digest}, not the pinned {SHA256}: refusing to unpack it")
    return data


def unpack(data: bytes, into: Path) -> int:
    """Write the sdist's ``mamba_ssm/`` files (and ``LICENSE``, as ``mamba_ssm/LICENSE``) to ``into/mamba_ssm``:
    unpacked into a temporary directory beside it and renamed into place whole, so an interrupted run leaves no
    half-written package (a stale one is replaced). Returns the number of files."""
    into.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".mamba_ssm-", dir=into))
    try:
        written = _extract(data, staging)
        final = into / PACKAGE
        if final.exists():
            shutil.rmtree(final)
        (staging / PACKAGE).rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return len(written)


def _extract(data: bytes, into: Path) -> list[Path]:
    written = []
    root = f"mamba_ssm-{VERSION}"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            path = PurePosixPath(member.name)
            if not member.isfile() or len(path.parts) < 2 or path.parts[0] != root or ".." in path.parts:
                continue
            inner = path.parts[1:]
            if inner[0] == PACKAGE:
                target = into.joinpath(*inner)
            elif inner == ("LICENSE",):
                target = into / PACKAGE / "LICENSE"
            else:
                continue
            source = archive.extractfile(member)
            assert source is not None
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read())
            written.append(target)
    if not any(p.name == "ssd_combined.py" for p in written):
        raise FetchError(f"{SDIST} holds no {PACKAGE}/ops/triton/ssd_combined.py: not the expected archive")
    return written


def present(into: Path) -> bool:
    init = into / PACKAGE / "__init__.py"
    return init.is_file() and f'__version__ = "{VERSION}"' in init.read_text()


def fetch(into: Path) -> str:
    if present(into):
        return f"{NAME} {VERSION} is already in {into}"
    count = unpack(verified(_get(sdist_url(), SDIST)), into)
    return f"{NAME} {VERSION}: {count} files of {PACKAGE}/ unpacked into {into}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--into", type=Path, default=Path(sysconfig.get_paths()["purelib"]),
                        help="directory to unpack mamba_ssm/ into (default: this interpreter's site-packages)")
    args = parser.parse_args(argv)
    try:
        print(fetch(args.into))
    except FetchError as error:
        print(f"fetch_kernel_sources: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
