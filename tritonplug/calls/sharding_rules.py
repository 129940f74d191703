"""Sharding rules of partitioned launchers: parsed, bound to a call's shapes, and resolved per mesh.

A rule is written as ``jax.experimental.custom_partitioning``'s ``sharding_rule`` (Shardy's einsum-like
notation): one group of factors per array operand, ``->``, one group per result, e.g. ``"b n, n -> b n"``.
``...`` (or ``...0``, ``...1``) at the front of a group stands for the leading dimensions that the group's
array has beyond its named ones; groups align them from the right, as NumPy broadcasting does. A compound
factor ``(a b)`` (Shardy's notation) is one dimension holding the flattened ``a`` × ``b`` (``a`` major): grouped
heads ``(k g)`` beside ``k`` kv heads. A compound dimension splits its factors major to minor: a minor factor is
split only where every factor before it is split into pieces of one element (else a device's shard of the
dimension would not be one block).

Pure Python, no JAX: the lowering names a rule that would fit a refused call (:func:`suggest`), and the
partitioner (``tritonplug.sharding``) resolves factors to mesh axes (:func:`assign`) with what XLA hands its callbacks.

A spec here is what a sharding says of one array: per dimension, the tuple of mesh axes it is split over
(``()``: whole). :func:`assign` decides, per factor, the axes every array splits it over; a factor that
cannot be split (kept whole by the rule, in no operand or no result, not dividing evenly) gets none, and XLA
gathers the operands that came split along it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Spec = tuple[tuple[str, ...], ...]  # per dimension, the mesh axes it is split over
Dims = tuple[tuple[str, ...], ...]  # one array's group: per dimension, its factors (several: a compound factor)

_FACTOR = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_DOTS = re.compile(r"\.\.\.(\d*)\Z")
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def _flat(groups: Sequence[Dims]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(f for dim in dims for f in dim) for dims in groups)


class _FlatFactors:
    """``operands``/``results`` of a record holding ``operand_dims``/``result_dims`` (:class:`Rule`,
    :class:`BoundRule`)."""

    operand_dims: tuple[Dims, ...]
    result_dims: tuple[Dims, ...]

    @property
    def operands(self) -> tuple[tuple[str, ...], ...]:
        """Per operand, its factors in order (a compound's factors one after the other)."""
        return _flat(self.operand_dims)

    @property
    def results(self) -> tuple[tuple[str, ...], ...]:
        return _flat(self.result_dims)


@dataclass(frozen=True)
class Rule(_FlatFactors):
    """A parsed rule: per operand and per result, its dimensions' factor names (``...N``: a leading ellipsis)."""

    text: str
    operand_dims: tuple[Dims, ...]
    result_dims: tuple[Dims, ...]
    need_replication: frozenset[str] = frozenset()
    reduction: frozenset[str] = frozenset()


@dataclass(frozen=True)
class BoundRule(_FlatFactors):
    """A rule bound to one call's shapes: ellipses expanded, every factor with its size."""

    rule: Rule
    operand_dims: tuple[Dims, ...]
    result_dims: tuple[Dims, ...]
    sizes: Mapping[str, int]
    need_replication: frozenset[str] = frozenset()  # the rule's, '...' expanded to its dimensions' factors
    reduction: frozenset[str] = frozenset()

    def compounds(self) -> list[tuple[str, ...]]:
        """Every compound dimension's factors, major to minor."""
        return [dim for dims in self.operand_dims + self.result_dims for dim in dims if len(dim) > 1]

    def shardable(self, factor: str) -> bool:
        """Whether a shard of ``factor`` is a piece of the same problem: the factor is not kept whole, and it
        runs through an operand into a result (a reduction factor: its partial results are summed)."""
        if factor in self.need_replication:
            return False
        in_operand = any(factor in group for group in self.operands)
        if factor in self.reduction:
            return in_operand
        return in_operand and any(factor in group for group in self.results)

    def kept_whole(self) -> tuple[str, ...]:
        """Every factor XLA must not split, declared or implied (a factor that is only in operands and not a
        reduction, or only in results: the body cannot make a piece of it), as Shardy's rule lists them."""
        factors = dict.fromkeys(f for group in self.operands + self.results for f in group)
        return tuple(f for f in factors if not self.shardable(f) and f not in self.reduction)


def parse(text: str, *, need_replication: Sequence[str] = (), reduction: Sequence[str] = ()) -> Rule:
    """Parse ``text``; a malformed rule is a ``ValueError`` that quotes it and says what is wrong."""
    if not isinstance(text, str):
        raise TypeError(f"partitioned: the rule must be a str such as 'b n, b n -> b n', got {type(text).__name__}")
    if text.count("->") != 1:
        raise ValueError(f"partitioned: rule {text!r} needs one '->' between the operands' and the results' factors")
    left, right = text.split("->")
    operands, results = _groups(left, text, "operand"), _groups(right, text, "result")
    named = {f for group in _flat(operands + results) for f in group}
    named |= {"..." for f in named if f == "...0"}  # '...' names the unnumbered ellipsis's dimensions
    for kind, factors in (("need_replication", need_replication), ("reduction_factors", reduction)):
        if isinstance(factors, str):
            raise TypeError(f"partitioned: {kind} must be a tuple of factor names, got the str {factors!r}")
        unknown = sorted(set(factors) - named)
        if unknown:
            raise ValueError(f"partitioned: {kind} names {unknown}, which rule {text!r} does not use "
                             f"(its factors: {sorted(named)})")
    both = sorted(set(need_replication) & set(reduction))
    if both:
        raise ValueError(f"partitioned: factors {both} are both kept whole (need_replication) and reduction factors")
    return Rule(text, operands, results, frozenset(need_replication), frozenset(reduction))


def _groups(side: str, text: str, kind: str) -> tuple[Dims, ...]:
    side = side.strip()
    if not side:
        return ((),)  # as in Shardy's notation: an empty side is one scalar
    groups = []
    for index, group in enumerate(side.split(",")):
        where = f"partitioned: rule {text!r}, {kind} {index}"
        dims = _dims(group, where)
        for position, dim in enumerate(dims):
            for factor in dim:
                dots = _DOTS.match(factor)
                if dots and (position or len(dim) > 1):
                    raise ValueError(f"{where}: '...' stands only at the front of a group, outside parentheses")
                if dots:
                    dims[0] = (f"...{dots.group(1) or '0'}",)
                elif not _FACTOR.match(factor):
                    raise ValueError(f"{where}: {factor!r} is not a factor name (a letter, then letters, digits "
                                     f"or '_')")
        factors = [f for dim in dims for f in dim]
        if len(set(factors)) != len(factors):
            raise ValueError(f"{where} names a factor twice: {group.strip()}")
        groups.append(tuple(dims))
    return tuple(groups)


def _dims(group: str, where: str) -> list[tuple[str, ...]]:
    """A group's dimensions: a name, or a compound factor ``(a b)`` of two or more names."""
    dims: list[tuple[str, ...]] = []
    compound: list[str] | None = None
    for token in _TOKEN.findall(group):
        if token == "(":
            if compound is not None:
                raise ValueError(f"{where}: compound factors '(a b)' do not nest: {group.strip()!r}")
            compound = []
        elif token == ")":
            if compound is None:
                raise ValueError(f"{where}: a ')' closes no compound factors '(a b)': {group.strip()!r}")
            if len(compound) < 2:
                raise ValueError(f"{where}: compound factors '(a b)' hold two or more names, got "
                                 f"({' '.join(compound)}) in {group.strip()!r}")
            dims.append(tuple(compound))
            compound = None
        elif compound is not None:
            compound.append(token)
        else:
            dims.append((token,))
    if compound is not None:
        raise ValueError(f"{where}: a '(' opens compound factors '(a b)' that no ')' closes: {group.strip()!r}")
    return dims


def text_of(operands: Sequence[Dims], results: Sequence[Dims]) -> str:
    """A rule's text from its groups (compound dimensions in parentheses)."""
    def group(dims: Dims) -> str:
        return " ".join(dim[0] if len(dim) == 1 else f"({' '.join(dim)})" for dim in dims)
    return ", ".join(map(group, operands)) + " -> " + ", ".join(map(group, results))


def bind(rule: Rule, operand_shapes: Sequence[tuple[int, ...]], result_shapes: Sequence[tuple[int, ...]],
         operand_names: Sequence[str], result_names: Sequence[str]) -> BoundRule:
    """Bind ``rule`` to one call: arity, ranks and each factor's size are checked, naming the array. A factor
    that only compound dimensions hold takes its size from them (the dimension's size over its other factors')."""
    sides = (("operand", rule.operand_dims, operand_shapes, operand_names),
             ("result", rule.result_dims, result_shapes, result_names))
    for kind, groups, shapes, names in sides:
        if len(groups) != len(shapes):
            raise ValueError(f"partitioned: rule {rule.text!r} has {len(groups)} {kind} group(s), but the function "
                             f"has {len(shapes)} array {kind}(s) ({', '.join(names) or 'none'})")
    used = {f for group in rule.operands + rule.results for f in group}
    expanded: dict[int, list[Dims]] = {0: [], 1: []}
    sizes: dict[str, int] = {}
    seen: dict[str, str] = {}
    compound: list[tuple[tuple[str, ...], int, str]] = []
    for side, (kind, groups, shapes, names) in enumerate(sides):
        for index, (group, shape, name) in enumerate(zip(groups, shapes, names, strict=True)):
            dims = _expand(rule, group, tuple(shape), f"{kind} {index} ({name})", used)
            expanded[side].append(dims)
            for dim, (factors, size) in enumerate(zip(dims, shape, strict=True)):
                where = f"{kind} {index} ({name}) dimension {dim}"
                if len(factors) > 1:
                    compound.append((factors, int(size), where))
                    continue
                factor = factors[0]
                if factor in sizes and sizes[factor] != size:
                    raise ValueError(f"partitioned: rule {rule.text!r}: factor {_shown(factor)} has two sizes: "
                                     f"{sizes[factor]} in {seen[factor]} and {size} in {where}")
                sizes.setdefault(factor, int(size))
                seen.setdefault(factor, where)
    _compound_sizes(rule, compound, sizes, seen)

    def resolve(factors: frozenset[str]) -> frozenset[str]:
        dots = {"..." + f[3:] if f != "..." else "...0" for f in factors if f.startswith("...")}
        return frozenset(f for f in factors if not f.startswith("...")) | frozenset(
            f for group in _flat(expanded[0] + expanded[1]) for f in group
            if f.startswith("dots") and any(f.lstrip("x").startswith(f"dots{d[3:]}_") for d in dots))
    return BoundRule(rule, tuple(expanded[0]), tuple(expanded[1]), sizes, resolve(rule.need_replication),
                     resolve(rule.reduction))


def _compound_sizes(rule: Rule, compound: list[tuple[tuple[str, ...], int, str]], sizes: dict[str, int],
                    seen: dict[str, str]) -> None:
    """Each compound dimension's size is the product of its factors': a factor unknown elsewhere gets the
    quotient (one unknown per dimension, resolved dimension by dimension); a size that does not fit is refused."""
    pending = list(compound)
    while pending:
        progress = False
        for item in list(pending):
            factors, size, where = item
            unknown = [f for f in factors if f not in sizes]
            known = math.prod(sizes[f] for f in factors if f in sizes)
            shown = f"({' '.join(factors)})"
            if len(unknown) > 1:
                continue
            if unknown and (known == 0 or size % known):
                raise ValueError(f"partitioned: rule {rule.text!r}: {where} has size {size}, which is not a "
                                 f"multiple of {known}, the size of {shown} without {unknown[0]!r}")
            if not unknown and known != size:
                raise ValueError(f"partitioned: rule {rule.text!r}: {where} has size {size}, but its factors "
                                 f"{shown} have sizes {[sizes[f] for f in factors]} (product {known})")
            if unknown:
                sizes[unknown[0]], seen[unknown[0]] = size // known, where
            pending.remove(item)
            progress = True
        if not progress:
            factors, size, where = pending[0]
            raise ValueError(f"partitioned: rule {rule.text!r}: the sizes of {[f for f in factors if f not in sizes]} "
                             f"in {where} ({' '.join(factors)}, size {size}) are unknown: name all but one of a "
                             f"compound's factors alone in another group")


def _expand(rule: Rule, group: Dims, shape: tuple[int, ...], where: str, used: set[str]) -> Dims:
    if group and group[0][0].startswith("..."):
        named = group[1:]
        extra = len(shape) - len(named)
        if extra < 0:
            raise ValueError(f"partitioned: rule {rule.text!r}: {where} has rank {len(shape)} (shape {shape}), "
                             f"but its group '{_group_text(group)}' names {len(named)} dimensions besides '...'")
        tag = group[0][0][3:]
        return tuple((_dots_factor(tag, extra - k, used),) for k in range(extra)) + named
    if len(group) != len(shape):
        raise ValueError(f"partitioned: rule {rule.text!r}: {where} has rank {len(shape)} (shape {shape}), but "
                         f"its group '{_group_text(group)}' names {len(group)} dimension(s)")
    return group


def _group_text(group: Dims) -> str:
    return text_of([group], []).split(" ->")[0]


def _dots_factor(tag: str, from_right: int, used: set[str]) -> str:
    """The factor of an ellipsis dimension ``from_right`` places before the named ones: shared by every group
    using the same ellipsis, as a broadcast dimension is."""
    name = f"dots{tag}_{from_right}"
    while name in used:
        name = f"x{name}"
    return name


def _shown(factor: str) -> str:
    if factor.startswith("dots") and "_" in factor:
        tag, back = factor.lstrip("x")[4:].split("_")
        return f"'...{tag if tag != '0' else ''}' (its dimension {back} before the named ones)"
    return repr(factor)


OPERANDS, RESULTS = 0, 1


def assign(bound: BoundRule, mesh_shape: Mapping[str, int],
           *sources: tuple[int, Sequence[Spec | None]]) -> dict[str, tuple[str, ...]]:
    """The mesh axes each shardable factor is split over, taken from ``sources`` in order: each is
    ``(OPERANDS or RESULTS, specs)``, one spec (or ``None``: unknown) per array of that side. The first array
    that splits a factor decides it, unless its axes are taken by another factor or do not divide the
    factor's size (XLA would pad the shard, and the kernel would see the padding). A compound dimension's axes
    go to its factors major to minor (:func:`_compound_axes`)."""
    groups = {OPERANDS: bound.operand_dims, RESULTS: bound.result_dims}
    chosen: dict[str, tuple[str, ...]] = {}
    taken: set[str] = set()
    for side, specs in sources:
        for dims, spec in zip(groups[side], specs, strict=True):
            if spec is None:
                continue
            for factors, axes in zip(dims, spec, strict=True):
                for factor, its in _compound_axes(bound, factors, tuple(axes), mesh_shape):
                    if factor in chosen or not bound.shardable(factor) or taken & set(its):
                        break
                    chosen[factor] = its
                    taken.update(its)
    return contiguous(bound, chosen, mesh_shape)


def _compound_axes(bound: BoundRule, factors: tuple[str, ...], axes: tuple[str, ...],
                   mesh_shape: Mapping[str, int]) -> list[tuple[str, tuple[str, ...]]]:
    """A dimension's ``axes`` given to its factors, major to minor: the last takes all that are left or none
    (they must divide it); one before it the longest run that divides it, and passes the rest on only if
    that splits it into pieces of one element."""
    given: list[tuple[str, tuple[str, ...]]] = []
    for position, factor in enumerate(factors):
        if not axes:
            break
        size = bound.sizes[factor]
        runs = [axes] if position == len(factors) - 1 else [axes[:k] for k in range(len(axes), 0, -1)]
        run = next((r for r in runs if size % math.prod(mesh_shape[a] for a in r) == 0), None)
        if run is None:
            break
        given.append((factor, run))
        if math.prod(mesh_shape[a] for a in run) != size:
            break
        axes = axes[len(run):]
    return given


def contiguous(bound: BoundRule, chosen: dict[str, tuple[str, ...]],
               mesh_shape: Mapping[str, int]) -> dict[str, tuple[str, ...]]:
    """``chosen`` without the splits of a compound's minor factor where a factor before it is not in pieces of
    one element (a device's part of the dimension would not be one block: XLA cannot lay it out)."""
    def pieces(f: str) -> int:
        return math.prod(mesh_shape[a] for a in chosen.get(f, ()))
    changed = True
    while changed:
        changed = False
        for dim in bound.compounds():
            for position, factor in enumerate(dim[1:], 1):
                if factor in chosen and any(pieces(m) != bound.sizes[m] for m in dim[:position]):
                    del chosen[factor]
                    changed = True
    return chosen


def specs_of(groups: Sequence[Dims], chosen: Mapping[str, tuple[str, ...]]) -> list[Spec]:
    """Each array's spec under ``chosen``: per dimension, its factors' axes, major to minor."""
    return [tuple(tuple(a for f in dim for a in chosen.get(f, ())) for dim in dims) for dims in groups]


def reduced_axes(bound: BoundRule, chosen: Mapping[str, tuple[str, ...]]) -> tuple[tuple[str, ...], ...]:
    """Per result, the mesh axes it is summed over: those of the split reduction factors it lacks (each
    shard's value of such a result is a partial sum; a result that has the factor is split along it)."""
    return tuple(tuple(a for f in sorted(bound.reduction) if f not in group for a in chosen.get(f, ()))
                 for group in bound.results)


def suggest(operand_shapes: Sequence[tuple[int, ...]], result_shapes: Sequence[tuple[int, ...]]) -> str:
    """A rule that fits a call's shapes: a dimension of the same size at the same place from the right as an
    earlier array's shares its factor (``b n, b n -> b n`` for an elementwise call), others get new ones."""
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    seen: dict[tuple[int, int], str] = {}

    def group(shape: tuple[int, ...]) -> str:
        names = []
        for dim, size in enumerate(shape):
            key = (len(shape) - dim, int(size))
            if key not in seen:
                seen[key] = next(letters, f"f{len(seen)}")
            names.append(seen[key])
        return " ".join(names)

    left = ", ".join(group(tuple(s)) for s in operand_shapes)
    right = ", ".join(group(tuple(s)) for s in result_shapes)
    return f"{left} -> {right}"


def whole_per_program(rule: str, operand_shapes: Sequence[tuple[int, ...]], result_shapes: Sequence[tuple[int, ...]],
                      grid: Sequence[int]) -> list[str]:
    """Factors of ``rule`` (one :func:`suggest` made for these shapes) that each program of a kernel launched over
    ``grid`` likely covers whole: in an operand and a result, larger than 1, and of a size no grid axis has. In a
    kernel that reduces, these are the factors it likely reduces over, which must stay whole (``need_replication``)."""
    bound = bind(parse(rule), operand_shapes, result_shapes, [f"operand {i}" for i in range(len(operand_shapes))],
                 [f"result {i}" for i in range(len(result_shapes))])
    in_results = {f for group in bound.results for f in group}
    return [f for f in dict.fromkeys(f for group in bound.operands for f in group)
            if f in in_results and bound.sizes[f] > 1 and bound.sizes[f] not in grid]
