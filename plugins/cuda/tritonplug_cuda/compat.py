"""This plugin's one adapter over Triton's NVIDIA compiler API (triton 3.6 through 3.9)."""

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
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDAOptions
from triton.compiler import ASTSource

TRITON_VERSION = triton.__version__
OPTION_NAMES = frozenset(CUDAOptions.__dataclass_fields__)


class TTIRSource(ASTSource):
    """A source that is already TTIR text, so ``triton.compile`` runs every back-end stage.

    Subclassing ``ASTSource`` (rather than compiling a ``.ttir`` file) keeps the TTIR
    optimisation stage, which ``triton.compile`` skips for IR files.
    """

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
    """Keep Triton's own cache out of the way: tritonplug caches binaries itself."""
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


def compile_ttir(ttir: str, name: str, capability: int, options: dict[str, Any]) -> tuple[dict, dict]:
    """TTIR → (images, metadata) with Triton's own NVIDIA pipeline."""
    with private_triton_cache():
        kernel = triton.compile(TTIRSource(ttir, name), target=GPUTarget("cuda", capability, 32), options=options)
    asm = kernel.asm
    metadata = kernel.metadata._asdict()
    images = {"ptx": asm["ptx"].encode(), "cubin": bytes(asm["cubin"]), "ttir": ttir.encode()}
    keep = ("name", "num_warps", "num_ctas", "shared", "global_scratch_size", "global_scratch_align",
            "tmem_size", "arch")
    info = {k: metadata[k] for k in keep if k in metadata}
    info["triton_version"] = TRITON_VERSION
    return images, info
