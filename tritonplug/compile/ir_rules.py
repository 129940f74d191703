"""Rules every backend applies to a kernel's IR, and MLIR locations mapped back to the kernel's source.

Some kernels pass Triton's front end but fail in a GPU back end with ``PassManager::run failed`` and no
Python line: a kernel that returns a tensor, or fp8 arithmetic (``arith.addf`` on ``f8E4M3FN``, which
neither the NVIDIA nor the AMD back end lowers). The CPU backend, which runs the same front end but
compiles the TTIR through XLA, would accept them. :func:`check` refuses them on every backend alike, right
after the front end, with one message naming the kernel's file and line; nothing is compiled or cached.

:func:`source_location` reads an op's location (``loc(#loc5)``, resolved through named, call-site and
fused locations to ``"file":line:col``); :func:`first_diagnostic` finds the first MLIR error a compiler
printed (``k.py:12:5: error: ...``), so a back-end failure names the line too.
"""

from __future__ import annotations

import re

from tritonplug.errors import KernelSourceError

_ALIAS = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$", re.MULTILINE)
_FILE_LOC = re.compile(r'^"((?:[^"\\]|\\.)*)":(\d+):(\d+)')
_NESTED = re.compile(r"(#loc\d*)|\"((?:[^\"\\]|\\.)*)\":(\d+):(\d+)")
_OP_LOC = re.compile(r"loc\((#loc\d*|\"[^\"]*\":\d+:\d+)\)\s*$")
_DIAGNOSTIC = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?P<col>\d+): (?P<kind>error|note): "
                         r"(?P<message>.*)$", re.MULTILINE)
#: MLIR's closing error of any failed pipeline, at the kernel's ``def``: the error before it says more.
_PIPELINE_FAILED = "Failures have been detected while processing an MLIR pass pipeline"
#: Where Triton's own library lives in a path (an op of ``tl.sort`` is located in ``standard.py``).
_TRITON_LIBRARY = re.compile(r"[/\\]triton[/\\](language|compiler|runtime|experimental)[/\\]")

#: fp8 element types of the ``tt``/``arith`` dialects.
_FP8 = r"f8E\w+"
#: Element-wise fp8 arithmetic that no GPU back end of Triton lowers (measured on sm_90 and gfx942, Triton 3.9:
#: add, sub, mul, neg, fma, compare, max and min fail in the conversion to LLVM; div, abs and reductions upcast).
_FP8_ARITHMETIC = re.compile(
    rf"=\s*(arith\.(?:addf|subf|mulf|negf|cmpf|maximumf|minimumf|maxnumf|minnumf)|math\.fma)\b[^\n]*:\s*"
    rf"(?:tensor<[^>]*?x)?({_FP8})\b")
_PUBLIC_FUNC = re.compile(r"tt\.func public @(\w+)\((.*)\)\s*->\s*([^{]+?)\s*(?:attributes|\{)")
_RETURN_VALUE = re.compile(r"^\s*tt\.return %")


def check(kernel_name: str, ir: str) -> None:
    """Refuse a kernel that no backend can compile, naming the kernel's file and line."""
    lines = ir.splitlines()
    aliases = _aliases(ir)
    for i, line in enumerate(lines):
        match = _PUBLIC_FUNC.search(line)
        if match:
            returned = next((ln for ln in lines[i:] if _RETURN_VALUE.match(ln)), "")
            raise KernelSourceError(
                f"Triton could not compile kernel {kernel_name!r}{_where(returned, aliases)}: the kernel returns a "
                f"value ({match.group(3).strip()}); a kernel launched from the host cannot return one: store it "
                f"through an output pointer (a @triton.jit helper called from the kernel may return values)")
    for line in lines:
        match = _FP8_ARITHMETIC.search(line)
        if match:
            op, dtype = match.groups()
            raise KernelSourceError(
                f"Triton could not compile kernel {kernel_name!r}{_where(line, aliases)}: fp8 arithmetic "
                f"({op} on {dtype}) is not supported by Triton's GPU back ends (NVIDIA and AMD alike), so "
                f"no backend accepts it; convert to a wider type first, e.g. x.to(tl.float32), and back when "
                f"storing")


def _aliases(ir: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in _ALIAS.finditer(ir)}


def source_location(op_line: str, aliases: dict[str, str]) -> tuple[str, int, int] | None:
    """``(file, line, column)`` of the op on ``op_line`` (its trailing ``loc(...)``), or None."""
    match = _OP_LOC.search(op_line)
    return _resolve(match.group(1), aliases, 0) if match else None


def _resolve(text: str, aliases: dict[str, str], depth: int) -> tuple[str, int, int] | None:
    if depth > 32:
        return None
    text = text.strip()
    if text in aliases:
        return _resolve(aliases[text], aliases, depth + 1)
    direct = _FILE_LOC.match(text)
    if direct:
        return direct.group(1), int(direct.group(2)), int(direct.group(3))
    for match in _NESTED.finditer(text):  # loc("name"(#loc3)), callsite(#loc1 at #loc2), fused[...]: first found
        if match.group(1):
            found = _resolve(match.group(1), aliases, depth + 1)
            if found is not None:
                return found
        elif match.group(2) is not None:
            return match.group(2), int(match.group(3)), int(match.group(4))
    return None


def _where(op_line: str, aliases: dict[str, str]) -> str:
    found = source_location(op_line, aliases) if op_line else None
    return f' (File "{found[0]}", line {found[1]})' if found else ""


def first_diagnostic(text: str) -> str:
    """`` (File "k.py", line 12): <message>`` for the first MLIR error in a compiler's output; "" if none.

    The message is the first specific error's; the line is the first of its location and its ``called from``
    notes that lies outside Triton's own library (an op of ``tl.sort`` is located in Triton's ``standard.py``)."""
    found = list(_DIAGNOSTIC.finditer(text or ""))
    errors = [i for i, m in enumerate(found) if m.group("kind") == "error"]
    if not errors:
        return ""
    first = next((i for i in errors if _PIPELINE_FAILED not in found[i].group("message")), errors[0])
    chain = [found[first]] + [m for m in found[first + 1:] if m.group("kind") == "note"
                              and m.group("message").startswith("called from")]
    place = next((m for m in chain if not _TRITON_LIBRARY.search(m.group("file"))), found[first])
    return f' (File "{place.group("file")}", line {place.group("line")}): {found[first].group("message").strip()}'
