"""The tree TTIR is read into (:mod:`.ttir` reads the text): functions of blocks of typed ops.

Each op's header is read once, when the op is made, into typed fields (results and their types, operands,
attributes, a loop's header, a branch's successors, a leading keyword such as a comparison's predicate); the
translator's passes and handlers read those fields, never the text. Both the reader and :mod:`.cfg` (which
rebuilds a function of several blocks as one) make these ops, so the tree is a module of its own below both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tritonplug_interpret.xla.syntax import matching, split_top

__all__ = ["Block", "Function", "Loop", "Op", "prefixed", "program_axis", "walk"]

_CALLEE = re.compile(r'@("[^"]*"|[\w.$-]+)')  # Triton 3.6 quotes a helper's mangled name: @"mod.f__(0,)c..."
_ARRAY = re.compile(r"array<i32:?(.*)>")
_FOR = re.compile(r"^(%[\w.$-]+)\s*=\s*(%[\w.$#-]+)\s+to\s+(%[\w.$#-]+)\s+step\s+(%[\w.$#-]+)"
                  r"(?:\s+iter_args\((.*)\))?")
_BINDING = re.compile(r"(%[\w.$-]+)\s*=\s*(%[\w.$#-]+)")


@dataclass
class Block:
    args: list[tuple[str, str]] = field(default_factory=list)  # (name, type text)
    ops: list[Op] = field(default_factory=list)
    label: str = ""                 # ``^bb1`` (empty for a region's entry block printed without one)


@dataclass(frozen=True)
class Loop:
    """An ``scf.for`` header (induction variable, bounds, step) or an ``scf.while`` one (``iv`` None)."""

    iv: str | None
    lower: str | None
    upper: str | None
    step: str | None
    iter_args: tuple[tuple[str, str], ...]     # (region argument, initial value)


@dataclass(eq=False)
class Op:
    """One op. Its header is parsed once, when the op is made, into the typed fields after ``callee``;
    ops hash by identity, so the plan's maps are keyed by the op itself."""

    name: str
    results: list[str]
    header: str                     # text after the op name, before any region (generic: its operand list)
    operands: list[str]
    attrs: dict[str, str]
    type_text: str                  # text after the top-level ':' (after the regions for generic ops)
    regions: list[list[Block]] = field(default_factory=list)
    callee: Function | None = None  # a ``tt.call``'s target, resolved once the module is read
    result_types: tuple[str, ...] = field(init=False)   # as printed (an scf.for's: after its ``->``)
    words: tuple[str, ...] = field(init=False)          # the header split at top-level commas
    keyword: str = field(init=False)    # a leading bare word: predicate, axis, atomic kind ("" if none)
    loop: Loop | None = field(init=False)               # scf.for / scf.while (None: unreadable or another op)
    int_value: int | None = field(init=False)           # an integer arith.constant (scalar or splat)
    callee_name: str | None = field(init=False)         # tt.call
    successors: tuple[tuple[str, tuple[str, ...]], ...] = field(init=False)  # cf.br / cf.cond_br targets

    def __post_init__(self) -> None:
        header = self.header.strip()
        self.words = tuple(w.strip() for w in split_top(header, ",")) if header else ()
        first = self.words[0].split()[0] if self.words and self.words[0] else ""
        self.keyword = first if first[:1].isalpha() else ""
        self.loop = _loop(self.name, header) if self.name in ("scf.for", "scf.while") else None
        self.result_types = tuple(_result_types(self.name, self.header, self.type_text))
        self.int_value = _int_constant(header) if self.name == "arith.constant" else None
        target = _CALLEE.match(header) if self.name == "tt.call" else None
        self.callee_name = target.group(1).strip('"') if target else None
        self.successors = tuple(_successor(w) for w in self.words if w.startswith("^"))

    def int_attr(self, name: str) -> int | None:
        """An integer attribute (``axis = 1 : i32`` → 1), None when absent."""
        text = self.attrs.get(name)
        return None if text is None else int(text.split(":")[0].strip())

    def array_attr(self, name: str) -> tuple[int, ...] | None:
        """An ``array<i32: 1, 0>`` attribute, None when absent or of another form."""
        m = _ARRAY.match(self.attrs.get(name, ""))
        return None if m is None else tuple(int(v) for v in m.group(1).split(",") if v.strip())


@dataclass
class Function:
    name: str
    args: list[tuple[str, str]]
    body: Block
    public: bool
    n_results: int = 0


_AXES = {"x": 0, "y": 1, "z": 2}


def program_axis(op: Op) -> int | None:
    """``tt.get_program_id``/``tt.get_num_programs``'s axis (``x``/``y``/``z``, or an ``axis`` attribute)."""
    if op.keyword in _AXES:
        return _AXES[op.keyword]
    axis = op.int_attr("axis")
    return 0 if axis is None and not op.header.strip() else axis


def _result_types(name: str, header: str, type_text: str) -> list[str]:
    """After a top-level ``->`` when there is one (an ``scf.for``'s is in its header), else the type text."""
    text = header if name == "scf.for" else type_text
    parts = split_top(text, "->")
    if len(parts) == 1:
        if name == "scf.for":
            return []
        parts = split_top(text, " to ")
    tail = parts[-1].strip()
    if tail.startswith("(") and matching(tail, 0) == len(tail) - 1:
        tail = tail[1:-1]
    return [t.strip() for t in split_top(tail, ",") if t.strip()]


def _loop(name: str, header: str) -> Loop | None:
    if name == "scf.while":
        bindings = _BINDING.findall(header[:header.find(")") + 1] if header.startswith("(") else "")
        return Loop(None, None, None, None, tuple(bindings))
    m = _FOR.match(header)
    if not m:
        return None
    iv, lb, ub, step, iter_text = m.groups()
    return Loop(iv, lb, ub, step, tuple(_BINDING.findall(iter_text or "")))


def _int_constant(text: str) -> int | None:
    if text.startswith("dense<"):
        text = text[len("dense<"):-1]
    try:
        return int(text)
    except ValueError:
        return None


def _successor(text: str) -> tuple[str, tuple[str, ...]]:
    """``^bb1(%a, %b : i32, f32)`` → ("^bb1", ("%a", "%b"))."""
    if "(" not in text:
        return text.strip(), ()
    label, inner = text[:text.index("(")], text[text.index("(") + 1:text.rindex(")")]
    values = split_top(inner, " : ")[0]
    return label.strip(), tuple(v.strip() for v in split_top(values, ",") if v.strip())


_NAME = re.compile(r"%([\w.$-]+)")


def prefixed(text: str, prefix: str) -> str:
    """``text`` with every SSA name ``%x`` renamed ``%<prefix>x`` (an inlined copy's names, see :mod:`.inline`)."""
    return _NAME.sub(lambda m: f"%{prefix}{m.group(1)}", text)


def walk(block: Block) -> Any:
    """Every op of ``block`` and of its nested regions, in order."""
    for op in block.ops:
        yield op
        for region in op.regions:
            for b in region:
                yield from walk(b)
