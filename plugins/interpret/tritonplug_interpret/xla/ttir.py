"""Read TTIR text (as ``str(module)`` / ``str_nodebug()`` print it) into a tree of typed ops.

Why our own reader: Triton's Python IR bindings (``triton._C.libtriton.ir``) parse and print
modules and run passes, but their op API cannot reach a region's blocks, block arguments or
dense constants on every Triton 3.6–3.9; jaxlib's MLIR bindings have every accessor but parse
the ``tt`` dialect only in MLIR's generic form, which Triton's bindings never print. The text
Triton prints after its own canonicalisation passes is regular: one op per line, regions
opened by a trailing ``{`` and closed by a line starting with ``}``. The tree it is read into
(:class:`Op` with its typed fields, :class:`Block`, :class:`Function`) is :mod:`.ir`'s, re-exported
here; a function of several blocks is made one by :mod:`.cfg`.
"""

from __future__ import annotations

import re

from tritonplug_interpret.xla.cfg import structured
from tritonplug_interpret.xla.ir import Block, Function, Loop, Op, prefixed, program_axis, walk
from tritonplug_interpret.xla.syntax import TtirSyntaxError, split_top, strip_attr_dicts

__all__ = ["Block", "Function", "Loop", "Op", "TtirSyntaxError", "parse_module", "prefixed", "program_axis",
           "split_top", "walk"]

_VALUE = re.compile(r"%[\w.$-]+(?:#\d+)?")
_RESULTS = re.compile(r"^((?:%[\w.$-]+(?::\d+)?)(?:\s*,\s*%[\w.$-]+(?::\d+)?)*)\s*=\s*(.*)$")
_BLOCK_LABEL = re.compile(r"^(\^[\w]+)(?:\((.*)\))?:")
_OP_NAME = re.compile(r"[\w.]+")


def _parse_op(text: str) -> Op:
    m = _RESULTS.match(text)
    results: list[str] = []
    if m:
        for r in (p.strip() for p in m.group(1).split(",")):
            name, _, count = r.partition(":")
            results += [f"{name}#{i}" for i in range(int(count))] if count else [name]
        text = m.group(2)
    if text.startswith('"'):
        end = text.index('"', 1)
        name, rest = text[1:end], text[end + 1:]
    else:
        name = _OP_NAME.match(text).group(0)
        rest = text[len(name):]
    body, attrs = strip_attr_dicts(rest)
    parts = split_top(body, " : ")
    header = parts[0]
    type_text = " : ".join(parts[1:]).strip()
    if name in ("scf.for", ) and len(parts) > 1:  # `... -> (types)  : i32`: the step type is last
        header, type_text = " : ".join(parts[:-1]), parts[-1].strip()
    operands = _VALUE.findall(header)
    return Op(name, results, header.strip(), operands, attrs, type_text)


def _block_args(text: str) -> list[tuple[str, str]]:
    args = []
    for item in split_top(text, ","):
        if item.strip():
            name, _, ty = item.partition(":")
            args.append((name.strip(), ty.strip()))
    return args


class _Reader:
    def __init__(self, text: str) -> None:
        self.lines = [ln.strip() for ln in text.splitlines()]
        self.lines = [ln for ln in self.lines if ln and not ln.startswith(("#loc", "//"))]
        self.i = 0

    def region(self) -> tuple[list[Block], str]:
        """Read blocks up to the closing ``}``; returns them and the closing line."""
        blocks = [Block()]
        while self.i < len(self.lines):
            line = _drop_loc(self.lines[self.i])
            self.i += 1
            if line.startswith("}"):
                return [b for b in blocks if b.ops or b.args] or [Block()], line
            label = _BLOCK_LABEL.match(line)
            if label:
                block = Block(_block_args(label.group(2) or ""), label=label.group(1))
                if blocks[-1].ops or blocks[-1].args:
                    blocks.append(block)
                else:
                    blocks[-1] = block
                continue
            blocks[-1].ops.append(self.op(line))
        raise TtirSyntaxError("a region is not closed")

    def op(self, line: str) -> Op:
        if not line.endswith("{"):
            return _parse_op(line)
        head = line[:-1].rstrip()
        generic = head.endswith("(")
        if generic:
            head = head[:-1].rstrip()
        regions = []
        while True:
            blocks, closing = self.region()
            regions.append(blocks)
            rest = closing[1:].strip()
            if rest.endswith("{"):  # `} else {`, `} do {`, `}, {`
                continue
            break
        if generic:  # `}) : (types) -> type`
            head = head + rest[1:] if rest.startswith(")") else head + rest
        op = _parse_op(head)
        op.regions = regions
        return op


def _drop_loc(line: str) -> str:
    idx = line.rfind(" loc(")
    return line[:idx].rstrip() if idx >= 0 and line.endswith(")") else line


_FUNC = re.compile(r'^tt\.func\s+(public\s+|private\s+)?@("[^"]*"|[\w.$-]+)\((.*?)\)(\s*->\s*.*?)?'
                   r"\s*(attributes\s*\{.*\})?\s*\{$")  # Triton 3.6 quotes a helper's mangled name
_LOC = re.compile(r"\s+loc\([^()]*(?:\([^()]*\))?[^()]*\)")


def parse_module(text: str) -> dict[str, Function]:
    """The module's functions by name."""
    reader = _Reader(text)
    functions: dict[str, Function] = {}
    while reader.i < len(reader.lines):
        line = _drop_loc(reader.lines[reader.i])
        reader.i += 1
        if not line.startswith("tt.func"):
            continue
        m = _FUNC.match(_LOC.sub("", line))
        if not m:
            raise TtirSyntaxError(f"cannot read the function header {line!r}")
        func_name = m.group(2).strip('"')
        args = []
        for item in split_top(m.group(3), ","):
            if item.strip():
                name, _, ty = item.partition(":")
                ty, _ = strip_attr_dicts(ty)
                args.append((name.strip(), ty.strip()))
        blocks, _ = reader.region()
        n_results = len(_result_list(m.group(4) or ""))
        if len(blocks) == 1:
            body = blocks[0]
        else:
            body = structured(func_name, blocks, n_results)
        functions[func_name] = Function(func_name, args, body, (m.group(1) or "").strip() != "private", n_results)
    if not functions:
        raise TtirSyntaxError("no tt.func in the module")
    for fn in functions.values():
        for op in walk(fn.body):
            if op.name == "tt.call":
                op.callee = functions.get(op.callee_name) if op.callee_name else None
                if op.callee is None:
                    raise TtirSyntaxError(f"tt.call of an unknown function: {op.header!r}")
    return functions


def _result_list(text: str) -> list[str]:
    """``-> f32`` / ``-> (f32, i32)`` → the result types."""
    text = text.strip().removeprefix("->").strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    return [t.strip() for t in split_top(text, ",") if t.strip()]
