"""Find tritonplug's kernel calls in lowered StableHLO text and decode their payloads.

For tests, debugging and ``jax.export`` users who want to see which kernels a program
carries: ``kernel_calls(jax.jit(f).lower(...).as_text())``. Also what the process decided: the partitioning of
partitioned launchers (``partitions``) and the generated function that runs a kernel's eager repeats
(``eager_runner_source``).
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


# ``%x = TYPE op(`` where TYPE may be a tuple with spaces: GPU programs use the async ``-start`` forms, whose
# result is ``(operand, result)``; the last array of TYPE is the collective's result.
_COLLECTIVE = re.compile(r"^\s*(?:ROOT\s+)?\S+\s*=\s*(?P<type>.*?)\s(?P<op>all-gather|all-reduce|reduce-scatter|"
                         r"all-to-all|collective-permute)(?:-start)?\(", re.MULTILINE)
_ARRAY_TYPE = re.compile(r"(?P<dtype>[a-z]+[0-9]*)\[(?P<dims>[0-9,]*)\]")
_BITS = {"pred": 8, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "s32": 32, "u32": 32, "f32": 32,
         "s64": 64, "u64": 64, "f64": 64, "f8e4m3fn": 8, "f8e5m2": 8}


def collectives(compiled_text: str) -> list[dict]:
    """The collectives in a compiled (partitioned) HLO module's text, ``jax.jit(f).lower(...).compile().as_text()``:
    each with its ``op`` (``all-gather``, ``all-reduce``, ...), result ``shape``, ``dtype`` and ``bytes`` per
    device. What a partitioned launcher's rule costs: a factor it keeps whole shows up here as an all-gather."""
    found = []
    for match in _COLLECTIVE.finditer(compiled_text):
        for array in list(_ARRAY_TYPE.finditer(match.group("type")))[-1:]:
            dims = tuple(int(d) for d in array.group("dims").split(",") if d)
            bits = _BITS.get(array.group("dtype"), 0)
            size = 1
            for d in dims:
                size *= d
            found.append({"op": match.group("op"), "shape": dims, "dtype": array.group("dtype"),
                          "bytes": size * bits // 8})
    return found


def partitions() -> list:
    """The latest decisions of partitioned launchers in this process, oldest first: per partitioning, the
    function, its rule, the path (``custom_partitioning`` under automatic mesh axes, ``shard_map`` under
    explicit ones), the mesh, each split factor's axes, and every operand XLA had to gather or move
    (``transfers``, with the bytes each device then holds)."""
    from tritonplug.process.state import state

    return list(state.partitions)


def eager_runner_source(kernel: object) -> str | None:
    """The source of ``kernel``'s eager *runner*, or None where none of its eager calls is recorded (since the
    memo was last cleared): the function, generated from the guards of the kernel's recent calls, that recognises
    a repeat of one of them and runs its program. Each guard is one boolean expression per recorded call, written
    from the table of argument kinds (``tritonplug/eager/kinds.py``); a traceback through the runner shows the
    same lines, and ``TRITONPLUG_LOG=debug`` logs each version as it is written."""
    from tritonplug.eager import runners
    from tritonplug.process.state import state

    return runners.runner_source(state.memo, kernel)
