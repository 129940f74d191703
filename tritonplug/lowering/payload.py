"""What an emitted kernel call carries: only what the runtime reads, and nothing that differs by process.

Two properties of the lowered module matter for startup:

* **Lean.** jaxlib hashes the whole opaque payload of a GPU kernel call when it looks the call up
  (``GetKernelCall``), so the payload carries only what the installed jaxlib reads: the TTIR (never
  read; kept for debugging) only with ``debug=True``; and where jaxlib loads a ready binary from
  ``module_image`` (0.11+), it reads ``ptx`` only as part of its module-cache key, so the PTX text is
  replaced by a short tag naming the binary's sha256 (as unique as the binary, a few dozen bytes).
* **The same in every process.** JAX's persistent compilation cache keys executables by the lowered
  module. A host kernel is called through an id registered in this process; the id is derived from
  everything that determines the kernel's behaviour (:func:`host_kernel_key`), so another process
  lowering the same program registers its own function under the same id and emits the same module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from tritonplug.adapters import jaxlib_compat, triton_compat
from tritonplug.records import ArrayParam, ConstexprParam, GpuKernel, HostKernel, ScalarParam

MODULE_IMAGE_TAG = "// tritonplug: module_image sha256 "


def lean_gpu_kernels(kernels: Sequence[GpuKernel], debug: bool) -> list[GpuKernel]:
    """The kernels as the installed jaxlib should receive them (see the module docstring)."""
    keep_image = jaxlib_compat.accepts_module_image()
    lean = []
    for k in kernels:
        changes: dict[str, Any] = {}
        if not debug and k.ttir:
            changes["ttir"] = ""
        if not keep_image and k.module_image is not None:
            changes["module_image"] = None
        elif keep_image and k.module_image is not None and not debug:
            changes["image"] = MODULE_IMAGE_TAG + hashlib.sha256(k.module_image).hexdigest()
        lean.append(dataclasses.replace(k, **changes) if changes else k)
    return lean


def _param(p: Any) -> Any:
    if isinstance(p, tuple):
        return [_param(q) for q in p]
    if isinstance(p, ArrayParam):
        return ["array", p.buffer, p.bytes_to_zero, p.divisibility]
    if isinstance(p, ScalarParam):
        return ["scalar", p.dtype, p.value.hex() if isinstance(p.value, float) else repr(p.value)]
    if isinstance(p, ConstexprParam):
        return ["constexpr", triton_compat.source_key(p.value)]
    return ["other", repr(p)]


def host_kernel_key(kernel: HostKernel, zeroed_buffers: Sequence[int],
                    environment: Sequence[tuple[str, str]]) -> str:
    """A string that determines what ``kernel`` does when run: the source key of the Triton kernel (its
    source and everything it uses), the launch (grid, parameters, buffers, aliases, configuration), the
    buffers zeroed first, and the TRITONPLUG_* variables a backend may read (``environment``: all but the
    host-only settings, e.g. a backend's checking mode, as the lowering read them, ``pipeline.fingerprint``)."""
    launch = kernel.launch
    return json.dumps({
        "kernel": [launch.kernel_name, kernel.kernel_name, triton_compat.source_key(launch.kernel)],
        "configuration": launch.description, "grid": list(launch.grid), "params": _param(launch.params),
        "names": list(launch.arg_names), "operands": [[list(b.shape), b.dtype] for b in launch.operands],
        "results": [[list(b.shape), b.dtype] for b in launch.results], "aliases": [list(a) for a in launch.aliases],
        "zeroed": list(zeroed_buffers), "environment": [list(pair) for pair in environment],
        "runner": getattr(kernel.run, "__qualname__", type(kernel.run).__qualname__),
    }, sort_keys=True, default=repr)
