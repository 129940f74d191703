"""Random signatures and call spellings for partitioned functions (``test_partitioned_keywords.py``,
``keyword_suite.py``).

A drawn signature has positional-only, positional-or-keyword and keyword-only parameters, maybe ``*rest`` and
``**extra``, each an array or a number, with or without a default. Every array is a "row" array (rule group
``r c``: its rows may be split) or a "whole" array (``k c``: ``k`` is only in operands, so it is kept whole);
the function returns ``sum(coef * row) + sum(coef * whole.sum(0)) + sum(coef * number)``, one distinct
``coef`` per argument, so an array matched to another's group gives an error or a different sum. The rule
names the operands in the signature's order (``*rest`` in its order, ``**extra`` by sorted keyword), as
``tritonplug.partitioned`` documents. A drawn call spells the same arguments positionally where Python
allows, by keyword in any order otherwise, and leaves out some defaults.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

KINDS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
NAMES = tuple("abcdefghpqxyzw")


@dataclass
class Param:
    name: str
    kind: inspect._ParameterKind
    role: str  # "row", "whole" or "number"
    default: Any = inspect.Parameter.empty


@dataclass
class Case:
    params: list[Param]
    rest: list[str] = field(default_factory=list)  # roles of the *rest arguments given (None: no *rest)
    extra: dict[str, str] = field(default_factory=dict)  # keyword → role of the **extra arguments given
    has_rest: bool = False
    has_extra: bool = False
    positional: list[str] = field(default_factory=list)  # the parameters given by position, in order
    keywords: list[str] = field(default_factory=list)  # the parameters given by keyword, in the call's order
    values: dict[str, Any] = field(default_factory=dict)  # label → the value given ("*0", "**k" for var ones)

    def operands(self) -> list[tuple[str, str]]:
        """(label, role) of every array operand, in the order the rule names them: the signature's."""
        rest = [(f"*{i}", r) for i, r in enumerate(self.rest)]
        keyword_only = [i for i, p in enumerate(self.params) if p.kind == inspect.Parameter.KEYWORD_ONLY]
        at = keyword_only[0] if keyword_only else len(self.params)
        labelled = [(p.name, p.role) for p in self.params[:at]] + rest + [(p.name, p.role) for p in self.params[at:]]
        labelled += [(f"**{k}", self.extra[k]) for k in sorted(self.extra)]
        return [(label, role) for label, role in labelled if role != "number"]

    def rule(self) -> str:
        groups = ["r c" if role == "row" else "k c" for _, role in self.operands()]
        return ", ".join(groups) + " -> r c"

    def coefs(self) -> dict[str, float]:
        labels = [p.name for p in self.params] + [f"*{i}" for i in range(len(self.rest))] + \
            [f"**{k}" for k in self.extra]
        return {label: float(i + 1) for i, label in enumerate(labels)}

    def source(self) -> str:
        """The function's ``def``: its body hands every argument, by label, to ``BODY``."""
        def spelled(kind: inspect._ParameterKind) -> list[str]:
            return [p.name if p.default is inspect.Parameter.empty else f"{p.name}=DEFAULTS[{p.name!r}]"
                    for p in self.params if p.kind == kind]
        only, either, keyword = (spelled(kind) for kind in KINDS)
        star = ["*rest"] if self.has_rest else ["*"] if keyword else []
        parts = only + ["/"] * bool(only) + either + star + keyword + ["**extra"] * self.has_extra
        named = ", ".join(f"{p.name!r}: {p.name}" for p in self.params)
        rest, extra = ("rest" if self.has_rest else "()"), ("extra" if self.has_extra else "{}")
        return f"def fn({', '.join(parts)}):\n    return BODY({{{named}}}, {rest}, {extra})\n"

    def function(self) -> Any:
        """The function and the ``BODY`` it calls (also the NumPy reference, given the call's values)."""
        coefs = self.coefs()
        roles = {p.name: p.role for p in self.params}

        def body(named: dict, rest: tuple, extra: dict) -> Any:
            items = [(k, v, roles[k]) for k, v in named.items()] + \
                [(f"*{i}", v, self.rest[i]) for i, v in enumerate(rest)] + \
                [(f"**{k}", v, self.extra[k]) for k, v in extra.items()]
            rows = [coefs[k] * v for k, v, r in items if r == "row"]
            rest_terms = [coefs[k] * (v.sum(0) if r == "whole" else v) for k, v, r in items if r != "row"]
            return sum(rest_terms, start=sum(rows[1:], start=rows[0]))

        namespace = {"BODY": body, "DEFAULTS": {p.name: p.default for p in self.params}}
        exec(self.source(), namespace)  # noqa: S102 - a signature drawn by the test
        return namespace["fn"], body

    def call(self, fn: Any, values: dict[str, Any]) -> Any:
        """``fn`` called with the drawn spelling, ``values`` by label."""
        args = [values[name] for name in self.positional] + [values[f"*{i}"] for i in range(len(self.rest))]
        kwargs = {name: values[name] for name in self.keywords}
        kwargs.update({k: values[f"**{k}"] for k in self.extra})
        return fn(*args, **kwargs)

    def reference(self, values: dict[str, Any]) -> Any:
        named = {p.name: values.get(p.name, p.default) for p in self.params}
        return self.function()[1](named, [values[f"*{i}"] for i in range(len(self.rest))],
                                  {k: values[f"**{k}"] for k in self.extra})


def value(role: str, label: str, rows: int, whole_rows: int, cols: int) -> Any:
    """A value for an argument of ``role``, fixed by its label (the same in a call and its reference)."""
    rng = np.random.default_rng(sum(map(ord, label)) * 7919 + len(label))
    if role == "number":
        return float(rng.integers(1, 9)) / 4
    return rng.standard_normal((rows if role == "row" else whole_rows, cols)).astype(np.float32)


@st.composite
def cases(draw: Any, rows: int = 4, whole_rows: int = 3, cols: int = 8) -> Case:
    """A signature with at least one row array, and a call of it."""
    names = draw(st.permutations(NAMES))[:draw(st.integers(1, 6))]
    kinds = sorted(draw(st.lists(st.sampled_from(KINDS), min_size=len(names), max_size=len(names))))
    roles = draw(st.lists(st.sampled_from(("row", "whole", "number")), min_size=len(names), max_size=len(names)))
    if "row" not in roles:
        roles[draw(st.integers(0, len(roles) - 1))] = "row"
    params, defaulted = [], False
    for name, kind, role in zip(names, kinds, roles, strict=True):
        positional = kind != inspect.Parameter.KEYWORD_ONLY
        default = draw(st.booleans()) or (positional and defaulted)
        defaulted |= default and positional
        params.append(Param(name, kind, role, value(role, name, rows, whole_rows, cols) if default
                            else inspect.Parameter.empty))
    case = Case(params, has_rest=draw(st.booleans()), has_extra=draw(st.booleans()))
    # the call: a prefix of the positional parameters by position (then *rest), the others by keyword or left out
    positional = [p for p in params if p.kind != inspect.Parameter.KEYWORD_ONLY]
    must = max((i + 1 for i, p in enumerate(positional) if p.kind == inspect.Parameter.POSITIONAL_ONLY
                and p.default is inspect.Parameter.empty), default=0)
    n_pos = draw(st.integers(must, len(positional)))
    if case.has_rest and draw(st.booleans()):
        n_pos = len(positional)  # *rest is reached only after every positional parameter
        case.rest = draw(st.lists(st.sampled_from(("row", "whole", "number")), max_size=3))
    case.positional = [p.name for p in positional[:n_pos]]
    later = [p for p in params[n_pos:] if p.kind != inspect.Parameter.POSITIONAL_ONLY]
    given = [p.name for p in later if p.default is inspect.Parameter.empty or draw(st.booleans())]
    case.keywords = draw(st.permutations(given))
    if case.has_extra:
        keys = draw(st.lists(st.sampled_from([n * 2 for n in NAMES]), unique=True, max_size=3))
        case.extra = {k: draw(st.sampled_from(("row", "whole", "number"))) for k in keys}
    # positional-only parameters with defaults left out after the prefix stay out (Python cannot name them)
    labels = [(name, next(p.role for p in params if p.name == name)) for name in [*case.positional, *case.keywords]]
    labels += [(f"*{i}", r) for i, r in enumerate(case.rest)] + [(f"**{k}", r) for k, r in case.extra.items()]
    case.values = {label: value(role, label, rows, whole_rows, cols) for label, role in labels}
    return case
