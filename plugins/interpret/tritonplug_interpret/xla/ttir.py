"""Read TTIR text (as ``str(module)`` / ``str_nodebug()`` print it) into a small op tree.

Why our own reader: Triton's Python IR bindings (``triton._C.libtriton.ir``) parse and print
modules and run passes, but their op API cannot reach a region's blocks, block arguments or
dense constants on every Triton 3.6–3.9; jaxlib's MLIR bindings have every accessor but parse
the ``tt`` dialect only in MLIR's generic form, which Triton's bindings never print. The text
Triton prints after its own canonicalisation passes is regular: one op per line, regions
opened by a trailing ``{`` and closed by a line starting with ``}``. This reader keeps what
the translator needs (results, op name, operand names in order, attributes, the type text,
regions with their block arguments) and leaves op-specific syntax to the op's handler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_VALUE = re.compile(r"%[\w.$-]+(?:#\d+)?")
_RESULTS = re.compile(r"^((?:%[\w.$-]+(?::\d+)?)(?:\s*,\s*%[\w.$-]+(?::\d+)?)*)\s*=\s*(.*)$")
_BLOCK_LABEL = re.compile(r"^\^[\w]+(?:\((.*)\))?:")


class TtirSyntaxError(ValueError):
    """The text is not TTIR this reader understands."""


@dataclass
class Block:
    args: list[tuple[str, str]] = field(default_factory=list)  # (name, type text)
    ops: list[Op] = field(default_factory=list)
    label: str = ""                 # ``^bb1`` (empty for a region's entry block printed without one)


@dataclass
class Op:
    name: str
    results: list[str]
    header: str                     # text after the op name, before any region (generic: its operand list)
    operands: list[str]
    attrs: dict[str, str]
    type_text: str                  # text after the top-level ':' (after the regions for generic ops)
    regions: list[list[Block]] = field(default_factory=list)
    callee: Function | None = None  # a ``tt.call``'s target, resolved once the module is read

    def result_types(self) -> list[str]:
        """Result types as printed: after a top-level ``->`` when there is one, else the type text."""
        text = self.type_text
        parts = split_top(text, "->")
        if len(parts) == 1:
            parts = split_top(text, " to ")
        tail = parts[-1].strip()
        if tail.startswith("(") and matching(tail, 0) == len(tail) - 1:
            tail = tail[1:-1]
        return [t.strip() for t in split_top(tail, ",") if t.strip()]


@dataclass
class Function:
    name: str
    args: list[tuple[str, str]]
    body: Block
    public: bool
    n_results: int = 0


_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}


def matching(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``start`` (``->`` is not a bracket; strings skipped)."""
    stack = []
    i = start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1) + 1 if '"' in text[i + 1:] else len(text)
            continue
        if c == "-" and text[i + 1:i + 2] == ">":
            i += 2
            continue
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i
        i += 1
    raise TtirSyntaxError(f"unbalanced brackets in {text!r}")


def split_top(text: str, sep: str) -> list[str]:
    """Split at ``sep`` outside brackets and strings."""
    parts, depth, i, last = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = text.find('"', i + 1)
            i = len(text) if j < 0 else j + 1
            continue
        if text.startswith("->", i) and sep != "->":
            i += 2
            continue
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[last:i])
            i += len(sep)
            last = i
            continue
        if c in _OPEN:
            depth += 1
        elif c in ")]}>":
            depth = max(0, depth - 1)
        i += 1
    parts.append(text[last:])
    return parts


def parse_attr_dict(text: str) -> dict[str, str]:
    """``{a = 1 : i32, b}`` (without the braces) → {"a": "1 : i32", "b": "unit"}."""
    attrs = {}
    for item in split_top(text, ","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        attrs[key.strip().strip('"')] = value.strip() if sep else "unit"
    return attrs


def _strip_attr_dicts(text: str) -> tuple[str, dict[str, str]]:
    """Remove ``<{...}>`` and ``{...}`` attribute dictionaries from ``text``; return them parsed."""
    attrs: dict[str, str] = {}
    out, i = [], 0
    while i < len(text):
        if text.startswith("<{", i):
            end = matching(text, i)
            attrs.update(parse_attr_dict(text[i + 2:end - 1]))
            i = end + 1
            continue
        if text[i] == "{":
            end = matching(text, i)
            attrs.update(parse_attr_dict(text[i + 1:end]))
            i = end + 1
            continue
        if text[i] in "<[(" and i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_>"):
            end = matching(text, i)  # a type or attribute body such as dense<...> or array<...>
            out.append(text[i:end + 1])
            i = end + 1
            continue
        out.append(text[i])
        i += 1
    return "".join(out), attrs


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
        name = re.match(r"[\w.]+", text).group(0)
        rest = text[len(name):]
    body, attrs = _strip_attr_dicts(rest)
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
                block = Block(_block_args(label.group(1) or ""), label=re.match(r"\^\w+", line).group(0))
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


_FUNC = re.compile(r"^tt\.func\s+(public\s+|private\s+)?@([\w.$-]+)\((.*?)\)(\s*->\s*.*?)?"
                   r"\s*(attributes\s*\{.*\})?\s*\{$")


def parse_module(text: str) -> dict[str, Function]:
    """The module's functions by name."""
    reader = _Reader(text)
    functions: dict[str, Function] = {}
    while reader.i < len(reader.lines):
        line = _drop_loc(reader.lines[reader.i])
        reader.i += 1
        if not line.startswith("tt.func"):
            continue
        m = _FUNC.match(re.sub(r"\s+loc\([^()]*(?:\([^()]*\))?[^()]*\)", "", line))
        if not m:
            raise TtirSyntaxError(f"cannot read the function header {line!r}")
        args = []
        for item in split_top(m.group(3), ","):
            if item.strip():
                name, _, ty = item.partition(":")
                ty, _ = _strip_attr_dicts(ty)
                args.append((name.strip(), ty.strip()))
        blocks, _ = reader.region()
        n_results = len(_result_list(m.group(4) or ""))
        if len(blocks) == 1:
            body = blocks[0]
        else:
            from tritonplug_interpret.xla import cfg  # it builds ops of this module

            body = cfg.structured(m.group(2), blocks, n_results)
        functions[m.group(2)] = Function(m.group(2), args, body, (m.group(1) or "").strip() != "private", n_results)
    if not functions:
        raise TtirSyntaxError("no tt.func in the module")
    for fn in functions.values():
        for op in walk(fn.body):
            if op.name == "tt.call":
                target = re.match(r"@([\w.$-]+)", op.header.strip())
                op.callee = functions.get(target.group(1)) if target else None
                if op.callee is None:
                    raise TtirSyntaxError(f"tt.call of an unknown function: {op.header!r}")
    return functions


def _result_list(text: str) -> list[str]:
    """``-> f32`` / ``-> (f32, i32)`` → the result types."""
    text = text.strip().removeprefix("->").strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    return [t.strip() for t in split_top(text, ",") if t.strip()]


_FOR = re.compile(r"^(%[\w.$-]+)\s*=\s*(%[\w.$#-]+)\s+to\s+(%[\w.$#-]+)\s+step\s+(%[\w.$#-]+)"
                  r"(?:\s+iter_args\((.*)\))?")
_BINDING = re.compile(r"(%[\w.$-]+)\s*=\s*(%[\w.$#-]+)")


def for_header(op: Op) -> tuple[str, str, str, str, list[tuple[str, str]]] | None:
    """``scf.for``'s (induction variable, lower, upper, step, [(iter_arg, initial value)]); None if unreadable."""
    m = _FOR.match(op.header)
    if not m:
        return None
    iv, lb, ub, step, iter_text = m.groups()
    return iv, lb, ub, step, _BINDING.findall(iter_text or "")


def while_bindings(op: Op) -> list[tuple[str, str]]:
    """``scf.while``'s [(argument, initial value)]."""
    header = op.header
    return _BINDING.findall(header[:header.find(")") + 1] if header.startswith("(") else "")


def walk(block: Block) -> Any:
    """Every op of ``block`` and of its nested regions, in order."""
    for op in block.ops:
        yield op
        for region in op.regions:
            for b in region:
                yield from walk(b)


def int_constant(op: Op) -> int | None:
    """The value of an integer ``arith.constant`` (a scalar, or a splat ``dense<…>``); None for anything else."""
    text = op.header.strip()
    if text.startswith("dense<"):
        text = text[len("dense<"):-1]
    try:
        return int(text)
    except ValueError:
        return None
