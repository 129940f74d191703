"""Phase 1 only: the kernel's TTIR, from Triton's front end run here on the launch.

Once the host runs the front end for this backend (``BackendInfo.ir_stages=("ttir",)``) the
TTIR arrives as the compiled binary's image and this module goes away.
"""

from __future__ import annotations

from typing import Any

from tritonplug.records import ArrayParam, ConstexprParam, Launch, ScalarParam
from tritonplug_interpret import compat

_POINTEE = {"bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
            "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "fp16", "bfloat16": "bf16",
            "float32": "fp32", "float64": "fp64", "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


def launch_ttir(launch: Launch) -> str:
    specs = list(launch.operands) + list(launch.results)
    signature: dict[str, Any] = {}
    constexprs: dict[tuple, Any] = {}
    attrs: dict[tuple, list] = {}
    names = compat.parameter_names(launch.kernel)

    def visit(p: Any, path: tuple[int, ...]) -> Any:
        if isinstance(p, tuple):
            return tuple(visit(q, path + (i,)) for i, q in enumerate(p))
        if isinstance(p, ArrayParam):
            if p.divisibility:
                attrs[path] = [["tt.divisibility", p.divisibility]]
            return "*" + _POINTEE[str(specs[p.buffer].dtype)]
        if isinstance(p, ScalarParam):
            return p.dtype
        if isinstance(p, ConstexprParam):
            constexprs[path] = p.value
            return "constexpr"
        raise TypeError(p)

    for i, (name, p) in enumerate(zip(names, launch.params, strict=True)):
        signature[name] = visit(p, (i,))
    return compat.frontend_ttir(launch.kernel, signature, constexprs, attrs)
