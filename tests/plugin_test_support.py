"""What the bundled plugins' tests (``plugins/<name>/tests``) share: the import rule every plugin
keeps, its distribution's metadata, and the TTIR of a small kernel for a compile hook to build."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

import tritonplug
from tritonplug.adapters import triton_compat

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

#: The host modules a plugin may import (declared once, in ``tritonplug/__init__.py``).
HOST_MODULES_FOR_PLUGINS = frozenset(tritonplug.PLUGIN_API)


def imported_modules(where: Path) -> Iterator[tuple[str, str]]:
    """(file name, module) for each absolute import in a module, or in each module of a package
    directory, function-level ones included; ``from tritonplug import x`` counts as ``tritonplug.x``."""
    for path in [where] if where.is_file() else sorted(where.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield path.name, alias.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                if node.module == "tritonplug":
                    for alias in node.names:
                        yield path.name, f"tritonplug.{alias.name}"
                else:
                    yield path.name, node.module


#: What a plugin may import from JAX when ``jax`` is among its third-party imports: the array API a
#: :class:`~tritonplug.records.JaxKernel` is built from, never the tracing/lowering machinery.
JAX_ARRAY_API = frozenset({"jax", "jax.numpy", "jax.lax", "jax.tree_util"})


def assert_plugin_imports(package_dir: Path, third_party: set[str]) -> None:
    """The plugin imports no jaxlib (nor torch) and JAX only if ``third_party`` names it (then only
    :data:`JAX_ARRAY_API`), of the host only :data:`HOST_MODULES_FOR_PLUGINS`, and otherwise only
    itself, the standard library and ``third_party``."""
    seen = set()
    for file, name in imported_modules(package_dir):
        top = name.split(".")[0]
        seen.add(top)
        assert top not in ("jaxlib", "torch"), f"{file} imports {name}"
        if top == "jax":  # only a plugin that builds JaxKernels, and only JAX's public array API
            assert "jax" in third_party and name in JAX_ARRAY_API, f"{file} imports {name}"
        if top == "tritonplug":
            assert name in HOST_MODULES_FOR_PLUGINS, f"{file} imports {name}"
        assert top in {"tritonplug", package_dir.name, "__future__", *third_party} or \
            top in sys.stdlib_module_names, f"{file} imports {name}"
    assert "tritonplug" in seen, f"found no import of the host in {package_dir}: the check read nothing"


def distribution_metadata(plugin_root: Path) -> dict[str, Any]:
    """The plugin's ``pyproject.toml``, parsed (needs Python 3.11+'s ``tomllib``)."""
    return tomllib.loads((plugin_root / "pyproject.toml").read_text())


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


SCALE_KERNEL_BLOCK = 128


def scale_kernel_ttir(triton_backend: str, arch: int | str, warp_size: int) -> str:
    """:func:`scale_kernel` through Triton's front end for one target, as the host hands it to a
    compile hook: fp32 pointers divisible by 16, ``n`` an i32, ``BLOCK`` 128."""
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    return triton_compat.frontend_ir(scale_kernel, (triton_backend, arch, warp_size), {"num_warps": 4},
                                       signature, {(3,): SCALE_KERNEL_BLOCK}, attrs)
