"""Find tritonplug's kernel calls in lowered StableHLO text and decode their payloads.

For tests, debugging and ``jax.export`` users who want to see which kernels a program
carries: ``kernel_calls(jax.jit(f).lower(...).as_text())``.
"""

from __future__ import annotations

import re
import zlib

from tritonplug.adapters.jaxlib_compat import FFI_TARGET, LEGACY_TARGET
from tritonplug.lowering.kernel_call import decode_kernel_call

_CALL = re.compile(rf"custom_call @(?P<target>{FFI_TARGET}|{LEGACY_TARGET})\(")
_PAYLOAD = re.compile(r'(?:opaque = |backend_config = )"((?:[^"\\]|\\.)+)"')


def unescape_mlir_string(text: str) -> bytes:
    """MLIR prints non-printable bytes of a string attribute as ``\\XX`` hex escapes."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1]
            if nxt in '\\"':
                out.append(ord(nxt))
                i += 2
            elif nxt == "n":
                out.append(10)
                i += 2
            elif nxt == "t":
                out.append(9)
                i += 2
            else:
                out.append(int(text[i + 1:i + 3], 16))
                i += 3
        else:
            out.extend(c.encode())
            i += 1
    return bytes(out)


def kernel_calls(module_text: str) -> list[dict]:
    """Every Triton kernel call in a lowered module, decoded, with its ``target`` name."""
    found = []
    for match in _CALL.finditer(module_text):
        line_end = module_text.find("\n", match.end())
        line = module_text[match.start(): line_end if line_end != -1 else None]
        payload = _PAYLOAD.search(line)
        if payload is None:
            continue
        decoded = decode_kernel_call(zlib.decompress(unescape_mlir_string(payload.group(1))))
        decoded["target"] = match.group("target")
        found.append(decoded)
    return found
