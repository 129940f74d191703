"""Sharding rules of partitioned launchers, without JAX: parsing, binding to shapes, resolving to mesh axes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonplug.calls import sharding_rules as rules
from tritonplug.calls.sharding_rules import OPERANDS, RESULTS


def bound(text, operands, results, **kinds):
    rule = rules.parse(text, **kinds)
    return rules.bind(rule, operands, results, [f"op{i}" for i in range(len(operands))],
                      [f"result {i}" for i in range(len(results))])


def test_ellipsis_dimensions_align_from_the_right_and_share_factors():
    b = bound("... d, d -> ... d, ...", [(4, 8, 16), (16,)], [(4, 8, 16), (4, 8)], need_replication=("d",))
    assert b.operands[0][:2] == b.results[0][:2] == b.results[1]
    assert b.sizes[b.operands[0][0]] == 4 and not b.shardable("d") and b.shardable(b.operands[0][0])


@pytest.mark.parametrize("text, kinds, message", [
    ("a b, a b", {}, "one '->'"),
    ("a ((b c)) -> a", {}, "do not nest"),
    ("a (b) -> a", {}, "two or more names"),
    ("(... b) -> b", {}, "outside parentheses"),
    ("a (b a) -> a", {}, "names a factor twice"),
    ("a ... -> a", {}, "only at the front"),
    ("a 1b -> a", {}, "not a factor name"),
    ("a a -> a", {}, "names a factor twice"),
    ("a b -> a", {"need_replication": ("c",)}, "does not use"),
    ("a b -> a", {"need_replication": ("b",), "reduction": ("b",)}, "both kept whole"),
    ("a b -> a", {"need_replication": "b"}, "tuple of factor names"),
])
def test_malformed_rules_are_refused_saying_why(text, kinds, message):
    with pytest.raises((ValueError, TypeError), match=message):
        rules.parse(text, **kinds)


def test_a_factor_only_in_operands_or_results_is_kept_whole_unless_a_reduction():
    b = bound("r c -> c, r k", [(8, 4)], [(4,), (8, 3)])
    assert b.kept_whole() == ("k",)
    assert bound("r c -> c", [(8, 4)], [(4,)]).kept_whole() == ("r",)
    reduced = bound("r c -> c", [(8, 4)], [(4,)], reduction=("r",))
    assert reduced.shardable("r") and reduced.kept_whole() == ()
    assert rules.reduced_axes(reduced, {"r": ("x",)}) == (("x",),)


def test_results_prefer_their_requested_split_and_operands_fill_the_rest():
    b = bound("r c, r c -> r c", [(8, 4), (8, 4)], [(8, 4)])
    chosen = rules.assign(b, {"x": 4, "y": 2}, (RESULTS, [((), ("y",))]), (OPERANDS, [(("x",), ()), None]))
    assert chosen == {"c": ("y",), "r": ("x",)}


def test_the_first_operand_decides_a_factor_two_operands_split_differently():
    b = bound("r c, r c -> r c", [(8, 4), (8, 4)], [(8, 4)])
    mesh = {"x": 4, "y": 2}
    assert rules.assign(b, mesh, (OPERANDS, [(("x",), ()), (("y",), ())])) == {"r": ("x",)}
    assert rules.assign(b, mesh, (OPERANDS, [(("y",), ()), (("x",), ())])) == {"r": ("y",)}
    # an operand that cannot have its split (4 columns over x) does not decide, and leaves x to the one after it
    assert rules.assign(b, {"x": 8}, (OPERANDS, [((), ("x",)), (("x",), ())])) == {"r": ("x",)}
    # a requested result split comes before both operands
    assert rules.assign(b, mesh, (RESULTS, [(("y",), ())]), (OPERANDS, [(("x",), ()), None])) == {"r": ("y",)}


def test_uneven_and_conflicting_splits_are_dropped():
    b = bound("r c, r c -> r c", [(6, 4), (6, 4)], [(6, 4)])
    assert rules.assign(b, {"x": 4}, (OPERANDS, [(("x",), ()), None])) == {}  # 6 rows over 4 devices
    assert rules.assign(b, {"x": 2}, (OPERANDS, [(("x",), ("x",)), None])) == {"r": ("x",)}  # one axis, one factor


def test_suggest_gives_a_rule_that_binds_to_the_shapes():
    shapes_in, shapes_out = [(8, 64), (64,)], [(8, 64), (8,)]
    text = rules.suggest(shapes_in, shapes_out)
    assert text == "a b, b -> a b, c"
    bound(text, shapes_in, shapes_out)


MESH = {"x": 2, "y": 4, "z": 3}
factor_names = st.sampled_from("abcdef")


@settings(max_examples=200, deadline=None)  # the same examples each run unless HYPOTHESIS_PROFILE=explore
@given(data=st.data())
def test_assigned_splits_are_always_sound(data):
    """Whatever the incoming specs: every split factor is shardable, no mesh axis serves two factors, and each
    factor's size is divisible by its axes' product."""
    sizes = {f: data.draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12])) for f in "abcdef"}
    groups = data.draw(st.lists(st.lists(factor_names, min_size=0, max_size=3, unique=True), min_size=1, max_size=3))
    result = data.draw(st.lists(factor_names, max_size=3, unique=True))
    text = ", ".join(" ".join(g) for g in groups) + " -> " + " ".join(result)
    used = sorted({f for g in groups for f in g} | set(result))
    whole = tuple(data.draw(st.lists(st.sampled_from(used), unique=True, max_size=2))) if used else ()
    b = bound(text, [tuple(sizes[f] for f in g) for g in groups], [tuple(sizes[f] for f in result)],
              need_replication=whole)
    axes = st.lists(st.sampled_from(sorted(MESH)), unique=True, max_size=2).map(tuple)
    specs = [tuple(data.draw(axes) for _ in g) for g in groups]
    chosen = rules.assign(b, MESH, (OPERANDS, specs))
    taken = [a for split in chosen.values() for a in split]
    assert len(taken) == len(set(taken))
    for factor, split in chosen.items():
        assert b.shardable(factor) and factor not in whole
        assert sizes[factor] % math.prod(MESH[a] for a in split) == 0


@pytest.mark.parametrize("text, operands, results, message", [
    ("r c -> r c", [(8, 4), (8, 4)], [(8, 4)],
     r"has 1 operand group\(s\), but the function has 2 array operand\(s\) \(op0, op1\)"),
    ("r c -> r c, r", [(8, 4)], [(8, 4)], r"has 2 result group\(s\), but the function has 1 array result\(s\)"),
    ("r c -> r c", [(8,)], [(8, 4)], r"operand 0 \(op0\) has rank 1 \(shape \(8,\)\), but its group 'r c' names 2"),
    ("... r c -> r c", [(8,)], [(8, 4)], r"has rank 1 \(shape \(8,\)\), but its group '...0 r c' names 2 dimensions"),
    ("r c, r c -> r c", [(8, 4), (8, 5)], [(8, 4)],
     r"factor 'c' has two sizes: 4 in operand 0 \(op0\) dimension 1 and 5 in operand 1 \(op1\) dimension 1"),
    ("... c, ... c -> ... c", [(2, 3, 4), (5, 3, 4)], [(2, 3, 4)],
     r"factor '...' \(its dimension 2 before the named ones\) has two sizes: 2 in operand 0 \(op0\) dimension 0"),
    ("...1 c, ...1 c -> c", [(2, 4), (5, 4)], [(4,)], r"factor '...1' \(its dimension 1 before the named ones\)"),
    ("... c, ... c -> ... c", [(4, 8, 16), (4, 16)], [(4, 8, 16)], r"has two sizes: 8 in operand 0"),
    ("r n_cols, r n_cols -> r", [(8, 4), (8, 5)], [(8,)], r"factor 'n_cols' has two sizes"),
])
def test_a_rule_that_does_not_fit_the_shapes_is_refused_naming_the_array(text, operands, results, message):
    with pytest.raises(ValueError, match=message):
        bound(text, operands, results)


def test_an_ellipsis_may_cover_no_dimension_and_aligns_groups_of_other_ranks_from_the_right():
    b = bound("... d, ... d -> ... d", [(4, 8, 16), (8, 16)], [(16,)])
    assert b.operands[1][0] == b.operands[0][1] != b.operands[0][0] and b.results[0] == ("d",)
    assert [b.sizes[f] for f in b.operands[0]] == [4, 8, 16]


def test_ellipses_kept_whole_or_reduced_by_name():
    b = bound("... a -> ... a", [(4, 8)], [(4, 8)], need_replication=("...",))
    dots = b.operands[0][0]
    assert not b.shardable(dots) and b.shardable("a") and b.kept_whole() == (dots,)
    numbered = bound("...1 a, ...2 a -> ...1 a, ...2 a", [(3, 8), (5, 8)], [(3, 8), (5, 8)],
                     need_replication=("...1",))
    first, second = numbered.operands[0][0], numbered.operands[1][0]
    assert (numbered.sizes[first], numbered.sizes[second]) == (3, 5)
    assert not numbered.shardable(first) and numbered.shardable(second)
    reduced = bound("... a -> a", [(4, 8)], [(8,)], reduction=("...",))
    assert reduced.shardable(reduced.operands[0][0]) and reduced.kept_whole() == ()
    assert rules.reduced_axes(reduced, {reduced.operands[0][0]: ("x",)}) == (("x",),)
    with pytest.raises(ValueError, match="does not use"):  # '...' is the unnumbered ellipsis only
        rules.parse("...1 a -> ...1 a", need_replication=("...",))


@pytest.mark.parametrize("text", ["a (b c -> a", "a b) -> a"])
def test_a_parenthesis_is_refused(text):
    with pytest.raises(ValueError, match="compound factors"):
        rules.parse(text)


def test_an_operand_without_a_spec_or_with_an_uneven_split_leaves_the_rest_to_decide():
    b = bound("r c, r c -> r c", [(6, 4), (6, 4)], [(6, 4)])
    assert rules.assign(b, {"x": 2}, (OPERANDS, [None, (("x",), ())])) == {"r": ("x",)}
    # rows 6 over 4 devices: dropped, and the columns of the same operand still split
    assert rules.assign(b, {"x": 4, "y": 2}, (OPERANDS, [(("x",), ("y",)), None])) == {"c": ("y",)}


@pytest.mark.parametrize("operands, results, grid, whole", [
    ([(8, 64), (64,)], [(8, 64), (8,)], (8,), ["b"]),   # rows: a grid axis; the 64 columns: whole in each program
    ([(1, 64)], [(1, 64)], (4,), ["b"]),                 # a factor of size 1 is not worth keeping whole
    ([(2, 64)], [(2, 64)], (1,), ["a", "b"]),
    ([(8, 64)], [(8,)], (8,), []),                       # the 64 columns are reduced away: not in a result
])
def test_whole_per_program_names_the_factors_no_grid_axis_covers(operands, results, grid, whole):
    rule = rules.suggest(operands, results)
    assert rules.whole_per_program(rule, operands, results, grid) == whole


def test_a_compound_factor_is_one_dimension_and_a_factor_only_there_takes_its_size_from_it():
    b = bound("b (k g) d, b k d -> b (k g) d", [(2, 12, 8), (2, 4, 8)], [(2, 12, 8)])
    assert b.sizes == {"b": 2, "k": 4, "g": 3, "d": 8}
    assert b.operands[0] == ("b", "k", "g", "d") and b.operand_dims[0] == (("b",), ("k", "g"), ("d",))
    assert b.compounds() == [("k", "g"), ("k", "g")]
    assert rules.text_of(b.rule.operand_dims, b.rule.result_dims) == "b (k g) d, b k d -> b (k g) d"


@pytest.mark.parametrize("text, operands, message", [
    ("(k g), k -> (k g)", [(10,), (4,)], "not a multiple of 4"),
    ("(k g), k, g -> (k g)", [(12,), (4,), (2,)], "product 8"),
    ("(k g) -> (k g)", [(12,)], "are unknown"),
])
def test_a_compound_whose_size_does_not_fit_is_refused_naming_the_dimension(text, operands, message):
    with pytest.raises(ValueError, match=message):
        bound(text, operands, [operands[0]])


def test_a_compound_dimension_splits_its_major_factor_first():
    b = bound("(k g) d, k d -> (k g) d", [(12, 8), (4, 8)], [(12, 8)])
    assert rules.assign(b, {"x": 2, "y": 2}, (OPERANDS, [(("x",), ()), None])) == {"k": ("x",)}
    # k in pieces of one element: the rest of the dimension's axes go to g
    assert rules.assign(b, {"x": 4, "y": 3}, (OPERANDS, [(("x", "y"), ()), None])) == {"k": ("x",), "g": ("y",)}
    assert rules.specs_of(b.operand_dims, {"k": ("x",), "g": ("y",)})[0] == (("x", "y"), ())
    # g split by itself while k is whole would give a device a strided part of the dimension: dropped
    g = bound("(k g) d, g d -> (k g) d", [(12, 8), (3, 8)], [(12, 8)])
    assert rules.assign(g, {"x": 3}, (OPERANDS, [None, (("x",), ())])) == {}
    assert rules.assign(g, {"x": 4}, (OPERANDS, [(("x",), ()), None])) == {"k": ("x",)}


SPECS = [None, ((), ()), (("x",), ()), (("y",), ()), (("x", "y"), ()), (("y", "x"), ()), ((), ("x",))]


@settings(max_examples=100, deadline=None)
@given(k=st.sampled_from([1, 2, 4, 8]), g=st.sampled_from([1, 2, 3, 4]), x=st.sampled_from([2, 4]),
       y=st.sampled_from([1, 2, 3]), specs=st.lists(st.sampled_from(SPECS), min_size=3, max_size=3))
def test_every_compound_split_assign_makes_is_one_block_per_device(k, g, x, y, specs):
    """Whatever the operands' splits (g's own operand split while k is whole included), a compound dimension's
    minor factor g is split only under k in pieces of one head, and every split divides its factor."""
    b = bound("(k g) d, k d, g d -> (k g) d", [(k * g, 8), (k, 8), (g, 8)], [(k * g, 8)])
    mesh = {"x": x, "y": y}
    chosen = rules.assign(b, mesh, (OPERANDS, specs))
    pieces = {f: math.prod(mesh[a] for a in chosen.get(f, ())) for f in ("k", "g", "d")}
    assert all(b.sizes[f] % pieces[f] == 0 for f in pieces)
    assert pieces["g"] == 1 or pieces["k"] == b.sizes["k"]


def test_a_compound_dimension_gives_its_minor_factor_all_the_axes_left_or_none():
    """``_compound_axes``: the major factor takes the longest run of the dimension's axes that divides it, the
    minor one the axes left all together or none; no run that divides gives no split (not an empty one)."""
    b = bound("(k g) d, k d -> (k g) d", [(4, 8), (2, 8)], [(4, 8)])  # k = 2, g = 2
    mesh = {"x": 2, "y": 2, "z": 2}
    assert rules.assign(b, mesh, (OPERANDS, [(("x", "y", "z"), ()), None])) == {"k": ("x",)}  # y z: 4 ∤ g
    assert rules.assign(b, mesh, (OPERANDS, [(("x", "y"), ()), None])) == {"k": ("x",), "g": ("y",)}
    odd = bound("(k g) d, k d -> (k g) d", [(6, 8), (3, 8)], [(6, 8)])  # k = 3: no run of x (2) divides it
    assert rules.assign(odd, {"x": 2}, (OPERANDS, [(("x",), ()), None])) == {}
    # g split in part (2 of its 4) under k in pieces of one element: one block per device, kept
    part = bound("(k g) d, k d -> (k g) d", [(8, 8), (2, 8)], [(8, 8)])  # k = 2, g = 4
    assert rules.assign(part, {"x": 2, "y": 2}, (OPERANDS, [(("x", "y"), ()), None])) == {"k": ("x",), "g": ("y",)}


def test_a_compound_factor_known_elsewhere_as_one_or_zero_elements():
    """The unknown factor of ``(k g)`` is the dimension's size over the known ones: with ``k`` of one element,
    ``g`` is the whole dimension; with ``k`` of none, nothing divides and the rule is refused, saying so."""
    assert bound("(k g), k -> (k g)", [(5,), (1,)], [(5,)]).sizes == {"k": 1, "g": 5}
    with pytest.raises(ValueError, match="not a multiple of 0"):
        bound("(k g), k -> (k g)", [(0,), (0,)], [(0,)])


def test_a_factor_after_a_compound_dimension_is_bound_and_sizes_resolve_in_any_order():
    """``bind`` goes on past a compound dimension to the array's next ones; a compound with two unknown
    factors waits for one resolved later; of compounds that never resolve, the first is named."""
    assert bound("(a b) c, a -> a b", [(6, 5), (2,)], [(2, 3)]).sizes == {"a": 2, "b": 3, "c": 5}
    assert bound("(a b), (b c), c -> (a b)", [(6,), (15,), (5,)], [(6,)]).sizes == {"a": 2, "b": 3, "c": 5}
    with pytest.raises(ValueError, match=r"\['a', 'b'\] in operand 0 \(op0\)"):
        bound("(a b) d, (c e) d -> d", [(6, 2), (6, 2)], [(2,)])


def test_a_compound_whose_major_factor_takes_every_axis_leaves_the_minor_one_free():
    """``(a b)`` split over ``x`` gives ``a`` all of it (pieces of one element) and ``b`` nothing from it, so a
    later array's split of ``b`` decides ``b``."""
    b = bound("(a b) d, b d -> (a b) d", [(6, 4), (3, 4)], [(6, 4)])
    chosen = rules.assign(b, {"x": 2, "y": 3}, (OPERANDS, [(("x",), ()), (("y",), ())]))
    assert chosen == {"a": ("x",), "b": ("y",)}


def test_contiguous_drops_a_minor_split_whose_major_factor_lost_its_own_in_a_later_dimension():
    """``a`` is major in ``(a b)`` and minor in ``(c a)``: dropping ``a``'s split there (``c`` whole) leaves
    ``a`` whole, so ``b``'s split in ``(a b)`` must go too, whichever dimension comes first."""
    for text in ("(a b) d, (c a) d, a -> d", "(c a) d, (a b) d, a -> d"):  # a = 2, b = 4, c = 3
        shapes = [(8, 2), (6, 2), (2,)] if text.startswith("(a b)") else [(6, 2), (8, 2), (2,)]
        b = bound(text, shapes, [(2,)], reduction=["a", "b", "c"])
        assert rules.contiguous(b, {"a": ("x",), "b": ("y",)}, {"x": 2, "y": 2}) == {}, text
