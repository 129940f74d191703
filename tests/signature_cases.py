"""Random kernel signatures for the binding's property tests (``test_binding_properties.py``).

A case is a kernel whose parameters are, in any order, inputs, outputs, in-place buffers, int and float
scalars, a ``None`` argument and constexprs, plus the way a caller passes them: a positional prefix and
the rest by keyword in any order, in-place buffers as ``jax.new_ref`` or through ``input_output_aliases``.
Every buffer has a length of its own and every scalar a value of its own, so a lowered payload shows which
argument reached which parameter. The kernel source is written to a file (Triton reads kernels from files).
"""

from __future__ import annotations

import importlib.util
import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

BLOCK = 16
KINDS = ("in", "out", "inout", "int", "float", "none", "const")
_DIRECTORY = Path(tempfile.mkdtemp(prefix="tritonplug-signatures-"))
_KERNELS: dict[tuple[str, ...], object] = {}
_COUNTER = itertools.count()


@dataclass(frozen=True)
class Case:
    kinds: tuple[str, ...]
    positional: int  # how many leading parameters are passed by position
    keyword_order: tuple[int, ...]  # the order of the keyword arguments (a permutation)
    inout_as_ref: bool  # in-place buffers as jax.new_ref, else input_output_aliases
    jit: bool
    out_tuple: bool = False  # out_type as a tuple (an eager repeat of such a call can be recorded), else a list

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"{kind}{i}" for i, kind in enumerate(self.kinds))

    def length(self, i: int) -> int:
        """Each buffer's own length: a payload's buffer shapes name the parameter they reached."""
        return BLOCK * (i + 1)

    def scalar(self, i: int) -> int | float:
        return i + 3 if self.kinds[i] == "int" else 0.25 * (i + 1)

    def const(self, i: int) -> int:
        return 7 * (i + 1)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=2, max_size=7))
    if not any(k in ("out", "inout") for k in kinds):
        kinds[draw(st.integers(0, len(kinds) - 1))] = draw(st.sampled_from(["out", "inout"]))
    first_out = next((i for i, k in enumerate(kinds) if k == "out"), len(kinds))
    positional = draw(st.integers(0, first_out))  # outputs are never passed: what follows one goes by keyword
    passed = [i for i in range(positional, len(kinds)) if kinds[i] != "out"]
    order = tuple(draw(st.permutations(passed)))
    return Case(tuple(kinds), positional, order, draw(st.booleans()), draw(st.booleans()), draw(st.booleans()))


@st.composite
def repeatable_cases(draw: st.DrawFn) -> Case:
    """A case whose eager repeats can be recorded and run by their kernel's runner (``eager.runners``): inputs, ints,
    floats and constexprs by position (an input among them), then inputs, ints, floats, constexprs and ``None`` by
    keyword in any order, the outputs last, as a tuple, no in-place buffer, no ``jit``."""
    prefix = draw(st.lists(st.sampled_from(("in", "int", "float", "const")), min_size=1, max_size=4))
    if "in" not in prefix:
        prefix[draw(st.integers(0, len(prefix) - 1))] = "in"
    suffix = draw(st.lists(st.sampled_from(("in", "int", "float", "const", "none")), max_size=2))
    outputs = ["out"] * draw(st.integers(1, 2))
    by_keyword = range(len(prefix), len(prefix) + len(suffix))
    return Case(tuple(prefix + suffix + outputs), len(prefix), tuple(draw(st.permutations(by_keyword))),
                inout_as_ref=False, jit=False, out_tuple=True)


def kernel_for(kinds: tuple[str, ...]) -> object:
    """A @triton.jit kernel with these parameter kinds (one per signature, written once)."""
    if kinds not in _KERNELS:
        names = [f"{kind}{i}" for i, kind in enumerate(kinds)]
        params = [f"{n}: tl.constexpr" if k == "const" else n for n, k in zip(names, kinds, strict=True)]
        body = ["    offs = tl.arange(0, BLOCK)", "    acc = tl.zeros([BLOCK], tl.float32)"]
        for i, (name, kind) in enumerate(zip(names, kinds, strict=True)):
            if kind in ("in", "inout"):
                body.append(f"    acc += tl.load({name} + offs).to(tl.float32) * {i + 1}")
            elif kind in ("int", "float", "const"):
                body.append(f"    acc += {name}")
            elif kind == "none":
                body.append(f"    if {name} is not None:\n        acc += 100000.0")
        for i, (name, kind) in enumerate(zip(names, kinds, strict=True)):
            if kind == "out":
                body.append(f"    tl.store({name} + offs, acc + {1000 * i})")
            elif kind == "inout":
                body.append(f"    tl.store({name} + offs, tl.load({name} + offs) + acc + {1000 * i})")
        _KERNELS[kinds] = kernel_from_source(
            f"@triton.jit\ndef kernel({', '.join(params)}, BLOCK: tl.constexpr):\n" + "\n".join(body) + "\n")
    return _KERNELS[kinds]


def kernel_from_source(source: str) -> object:
    """The ``kernel`` defined by ``source`` (Triton imported as ``triton`` and ``tl``), from a file of its own."""
    path = _DIRECTORY / f"signature_{next(_COUNTER)}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel


def inputs(case: Case, seed: int = 0) -> dict[int, np.ndarray]:
    """A float32 array of its own length for every input and in-place parameter (``seed``: another call's)."""
    rng = np.random.default_rng((len(case.kinds), seed))
    return {i: rng.standard_normal(case.length(i)).astype(np.float32)
            for i, k in enumerate(case.kinds) if k in ("in", "inout")}


def reference(case: Case, arrays: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """What the kernel leaves in every output and in-place buffer, computed with NumPy."""
    acc = np.zeros(BLOCK, np.float32)
    for i, kind in enumerate(case.kinds):
        if kind in ("in", "inout"):
            acc += arrays[i][:BLOCK] * (i + 1)
        elif kind in ("int", "float"):
            acc += np.float32(case.scalar(i))
        elif kind == "const":
            acc += np.float32(case.const(i))
    expected = {}
    for i, kind in enumerate(case.kinds):
        if kind == "out":  # the kernel writes the first BLOCK elements only
            expected[i] = acc + 1000 * i
        elif kind == "inout":
            expected[i] = arrays[i].copy()
            expected[i][:BLOCK] += acc + 1000 * i
    return expected


def call(case: Case, arrays: dict[int, object], **options: object) -> dict[int, object]:
    """Call the case's kernel through ``tritonplug.triton_call`` as the case says; returns the value of
    every output and in-place buffer afterwards (outputs' first BLOCK elements)."""
    import jax

    import tritonplug

    values: dict[int, object] = {}
    out_type, aliases, written = [], {}, {}
    for i, kind in enumerate(case.kinds):
        if kind == "out":
            written[i] = ("output", len(out_type))
            out_type.append(jax.ShapeDtypeStruct((case.length(i),), np.float32))
            continue
        if kind in ("in", "inout"):
            values[i] = arrays[i]
        elif kind in ("int", "float"):
            values[i] = case.scalar(i)
        elif kind == "none":
            values[i] = None
        else:
            values[i] = case.const(i)
    for i, kind in enumerate(case.kinds):
        if kind == "inout" and case.inout_as_ref:
            values[i] = jax.new_ref(values[i])
            written[i] = ("ref", values[i])
        elif kind == "inout":
            flat = sum(1 for k in case.kinds[:i] if k not in ("out", "const"))
            aliases[flat] = len(out_type)
            written[i] = ("output", len(out_type))
            out_type.append(jax.ShapeDtypeStruct((case.length(i),), np.float32))
    args = [values[i] for i in range(case.positional)]
    keywords = {case.names[i]: values[i] for i in case.keyword_order}
    if aliases:
        keywords["input_output_aliases"] = aliases
    results = tritonplug.triton_call(*args, **keywords, kernel=kernel_for(case.kinds),
                                     out_type=tuple(out_type) if case.out_tuple else out_type, grid=(1,), BLOCK=BLOCK,
                                     **options)
    found = {}
    for i, (how, where) in written.items():
        value = results[where] if how == "output" else where[...]
        found[i] = value[:BLOCK] if case.kinds[i] == "out" else value
    return found
