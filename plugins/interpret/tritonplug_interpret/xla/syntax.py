"""The bracket-aware text primitives of TTIR's printed form, for :mod:`.ttir`'s reader (and nothing else).

MLIR prints nested types and attributes (``tensor<16x!tt.ptr<f32>>``, ``dense<[1, 2]>``, ``{a = 1 : i32}``)
whose commas and colons are not separators; these split and match outside brackets and strings.
"""

from __future__ import annotations


class TtirSyntaxError(ValueError):
    """The text is not TTIR this reader understands."""


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


def strip_attr_dicts(text: str) -> tuple[str, dict[str, str]]:
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
