"""This plugin's one adapter over Triton's AMD compiler API (triton 3.6 through 3.9)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import types
from collections.abc import Iterator
from typing import Any

import triton
from triton._C.libtriton import ir
from triton.backends.amd.compiler import HIPOptions
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

TRITON_VERSION = triton.__version__
OPTION_NAMES = frozenset(HIPOptions.__dataclass_fields__)


class TTIRSource(ASTSource):
    """TTIR text as a source, so ``triton.compile`` runs the TTIR stage and all that follow."""

    def __init__(self, ttir: str, name: str) -> None:
        super().__init__(types.SimpleNamespace(__name__=name, arg_names=[]), {})
        self.ttir = ttir

    def hash(self) -> str:
        return hashlib.sha256(self.ttir.encode()).hexdigest()

    def make_ir(self, *args: Any) -> Any:
        context = args[-1]
        with tempfile.NamedTemporaryFile("w", suffix=".ttir", delete=False) as f:
            f.write(self.ttir)
        try:
            module = ir.parse_mlir_module(f.name, context)
        finally:
            os.unlink(f.name)
        module.context = context
        return module


@contextlib.contextmanager
def private_triton_cache() -> Iterator[None]:
    saved = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tritonplug-triton-") as scratch:
        os.environ["TRITON_CACHE_DIR"] = scratch
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved


def warp_size(arch: str) -> int:
    """CDNA (gfx9xx) runs 64-wide wavefronts; RDNA (gfx10+) 32-wide."""
    return 64 if arch.startswith("gfx9") else 32


def compile_ttir(ttir: str, name: str, arch: str, options: dict[str, Any]) -> tuple[dict, dict]:
    """TTIR → (images, metadata) with Triton's own AMD pipeline (links the HSACO in-process)."""
    with private_triton_cache():
        kernel = triton.compile(TTIRSource(ttir, name), target=GPUTarget("hip", arch, warp_size(arch)),
                                options=options)
    metadata = kernel.metadata._asdict()
    images = {"hsaco": bytes(kernel.asm["hsaco"]), "amdgcn": kernel.asm["amdgcn"].encode(), "ttir": ttir.encode()}
    keep = ("name", "num_warps", "num_ctas", "shared", "global_scratch_size", "global_scratch_align", "arch")
    info = {k: metadata[k] for k in keep if k in metadata}
    info["triton_version"] = TRITON_VERSION
    return images, info
