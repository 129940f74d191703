"""Find tritonplug's kernel calls in lowered StableHLO text and decode their payloads.

For tests, debugging and ``jax.export`` users who want to see which kernels a program
carries: ``kernel_calls(jax.jit(f).lower(...).as_text())``. Also what the process decided: the partitioning of
partitioned launchers (``partitions``), the path each call's lowering took, launched or inlined, and why
(``paths``), and the generated function that runs a kernel's eager repeats (``eager_runner_source``).
"""

from __future__ import annotations

import math
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


# ``%x = TYPE op(`` where TYPE may be a tuple with spaces. XLA's combiners make one collective of several operands,
# whose TYPE is then a tuple of their results. GPU programs use the async ``-start`` forms: all-gather-start and
# collective-permute-start give ``(operand(s), result(s)[, contexts])``, all-reduce-start the result(s) alone.
_COLLECTIVE = re.compile(r"^\s*(?:ROOT\s+)?\S+\s*=\s*(?P<type>.*?)\s(?P<op>all-gather|all-reduce|reduce-scatter|"
                         r"all-to-all|collective-permute)(?P<start>-start)?\(", re.MULTILINE)
_TYPE_TOKEN = re.compile(r"\(|\)|(?P<dtype>[a-z]+[0-9]*)\[(?P<dims>[0-9,]*)\]")
_BITS = {"pred": 8, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "s32": 32, "u32": 32, "f32": 32,
         "s64": 64, "u64": 64, "f64": 64, "f8e4m3fn": 8, "f8e5m2": 8}


def _parse_type(text: str) -> list | tuple[str, tuple[int, ...]]:
    """An HLO type, ``f32[8,4]{1,0}`` or a tuple ``(f32[8,4]{1,0}, (s32[], u32[]))``, as ``(dtype, dims)`` or a
    list of such (nested); layouts and ``/*index=5*/`` comments are skipped."""
    stack: list[list] = [[]]
    for token in _TYPE_TOKEN.finditer(text):
        if token.group(0) == "(":
            stack.append([])
        elif token.group(0) == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append((token.group("dtype"), tuple(int(d) for d in token.group("dims").split(",") if d)))
    top = stack[0]
    return top[0] if len(top) == 1 else top


def _arrays(parsed: list | tuple) -> list[tuple[str, tuple[int, ...]]]:
    return [parsed] if isinstance(parsed, tuple) else [a for item in parsed for a in _arrays(item)]


def collectives(compiled_text: str) -> list[dict]:
    """The collectives in a compiled (partitioned) HLO module's text, ``jax.jit(f).lower(...).compile().as_text()``:
    each with its ``op`` (``all-gather``, ``all-reduce``, ...), result ``shape``, ``dtype`` and ``bytes`` per
    device; a collective XLA combined from several operands gives one entry per operand. What a partitioned
    launcher's rule costs: a factor it keeps whole shows up here as an all-gather."""
    found = []
    for match in _COLLECTIVE.finditer(compiled_text):
        parsed = _parse_type(match.group("type"))
        if match.group("start") and match.group("op") != "all-reduce" and isinstance(parsed, list) \
                and len(parsed) >= 2:
            parsed = parsed[1]  # (operands, results[, contexts]): the results
        for dtype, dims in _arrays(parsed):
            found.append({"op": match.group("op"), "shape": dims, "dtype": dtype,
                          "bytes": math.prod(dims) * _BITS.get(dtype, 0) // 8})
    return found


def partitions() -> list:
    """The latest decisions of partitioned launchers in this process, oldest first: per partitioning, the
    function, its rule, the path (``custom_partitioning`` under automatic mesh axes, ``shard_map`` under
    explicit ones), the mesh, each split factor's axes, and every operand XLA had to gather or move
    (``transfers``, with the bytes each device then holds)."""
    from tritonplug.process.state import state

    return list(state.partitions)


def paths() -> list:
    """The latest lowerings' paths in this process, oldest first (``lowering.inline_choice.PathChoice``): per
    lowering of a call, the kernel, the platform, the path (``"launched"`` or ``"inlined"``), the call's inline mode
    and who set it (``"call"``, ``"kernel"``, ``"setting"``, ``"default"``), the reason in words (under ``"auto"``:
    the path record says faster or slower, no record, untranslatable, its translation holds gathers...), the
    translation's gathers, scatters and while loops where one was checked (``unfusible``), the record's
    ``times_us``, and the autotune configurations left out because they do not fit the target (``skipped``: each
    ``"[config] needs N B of shared memory, more than ..."``, as Triton's autotuner skips them)."""
    from tritonplug.process.state import state

    return list(state.paths)


def unfusible_ops(fn: object, *args: object) -> dict[str, int]:
    """How many gathers, scatters and while loops the jaxpr of ``fn`` at ``args`` holds (sub-jaxprs included): the
    check ``inline="auto"`` applies to a kernel's translation (``paths()`` reports a call's), for a function of your
    own, such as the XLA op a kernel replaces."""
    from tritonplug.lowering import fusion

    return fusion.unfusible_ops(fn, *args)  # type: ignore[arg-type]


def eager_runner_source(kernel: object) -> str | None:
    """The source of ``kernel``'s eager *runner*, or None where none of its eager calls is recorded (since the
    memo was last cleared): the function, generated from the guards of the kernel's recent calls, that recognises
    a repeat of one of them and runs its program. Each guard is one boolean expression per recorded call, written
    from the table of argument kinds (``tritonplug/eager/kinds.py``); a traceback through the runner shows the
    same lines, and ``TRITONPLUG_LOG=debug`` logs each version as it is written."""
    from tritonplug.eager import runners
    from tritonplug.process.state import state

    return runners.runner_source(state.memo, kernel)
