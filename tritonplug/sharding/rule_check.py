"""``tritonplug.check_rule``: run a partitioned function with each factor of its rule split, and see what holds.

A rule that lets XLA split a factor the kernel reduces over is silently wrong (a softmax's rows sum to 2.0 on two
devices). No reading of the kernel decides that for every kernel; running it does. For each factor, the example
inputs are placed split along it over the devices (CPU devices included) and the function runs in a sharded
jit: under the rule checked (its result against the unsharded call, and the collectives its layout costs), and,
where that rule keeps the factor whole, under the same rule letting it split (could it be split?). The factors
whose split changes the result make the rule that holds: kept whole (``need_replication``), or, for a factor that
only operands have, summed over (``reduction_factors``) where that gives the unsharded result.

Several factors split at once are not tried: each is checked alone. A factor that only a compound dimension's
minor place holds (``g`` in ``(k g)``) cannot be laid out alone and is reported as not tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from tritonplug import inspection
from tritonplug.adapters import jax_compat
from tritonplug.calls import sharding_rules as rules
from tritonplug.process.state import state
from tritonplug.sharding.per_shard import is_array

_AXIS = "check"


@dataclass(frozen=True)
class FactorCheck:
    """One factor split alone over ``devices`` devices (0: not tried, ``note`` says why)."""

    factor: str  # as the rule names it ('...' for an ellipsis dimension: '...' and its place)
    size: int
    devices: int
    split_by_rule: bool  # the rule checked lets it split (else XLA gathered it: see collectives)
    changes_result: bool | None  # whether splitting it changes the result (None: not tried)
    max_error: float  # under the rule checked, the largest difference from the unsharded result
    collectives: tuple[str, ...]  # what the rule's layout costs: the compiled program's collectives
    note: str = ""


@dataclass(frozen=True)
class RuleCheck:
    """What ``check_rule`` found: per factor, and the rule that holds."""

    function: str
    rule: str  # the rule checked, as the decorator spells it
    factors: tuple[FactorCheck, ...]
    unsafe: tuple[str, ...]  # factors the rule splits whose split changes the result
    could_split: tuple[str, ...]  # factors the rule keeps whole whose split gives the unsharded result
    proposed: str  # a rule that holds, as the decorator spells it

    @property
    def holds(self) -> bool:
        return not self.unsafe

    def __str__(self) -> str:
        lines = [f"check_rule {self.function}: rule {self.rule} " + ("holds" if self.holds else
                 f"is WRONG: splitting {list(self.unsafe)} changes the result")]
        for f in self.factors:
            verdict = {None: "not tried", True: "split changes the result", False: "split is exact"}[f.changes_result]
            lines.append(f"  {f.factor} (size {f.size}, {f.devices} devices): {verdict}; rule "
                         f"{'splits' if f.split_by_rule else 'keeps it whole'}; collectives {list(f.collectives)}"
                         + (f"; {f.note}" if f.note else ""))
        lines.append(f"  a rule that holds: {self.proposed}")
        return "\n".join(lines)


def check(fn: Callable[..., Any], args: tuple, kwargs: dict, rule: Any, rtol: float, atol: float,
          partition: Any) -> RuleCheck:
    """``tritonplug.check_rule`` (``tritonplug.sharding.launcher``, whose docstring says what it does);
    ``partition``: the class of partitioned functions, ``partition(fn, rule)`` one under ``rule``."""
    plain = fn.fn if isinstance(fn, partition) else fn
    if not callable(plain):
        raise TypeError(f"check_rule: fn is the partitioned function or the function making the Triton calls, "
                        f"got {type(fn).__name__}")
    devices = _devices()
    with jax_compat.eval_context():  # called while a jit traces (TRITONPLUG_CHECK_RULES): run, do not stage
        name = getattr(plain, "__name__", type(plain).__name__)
        probe = partition(plain, rules.parse("->"), checked=True)
        operands, names = probe.operands(args, kwargs)
        run = _Runner(plain, args, kwargs, operands, devices, partition)
        if rule is None and isinstance(fn, partition):
            rule = fn.rule
        if rule is None:  # propose one from the shapes
            shapes = jax.eval_shape(run.call(plain), *run.arrays())
            chosen = rules.parse(rules.suggest([tuple(a.shape) for a in operands], [tuple(r.shape) for r in shapes]))
        else:
            chooser = callable(rule) and not isinstance(rule, rules.Rule)
            chosen = _rule_of(partition(plain, rule, checked=True) if chooser else None, rule, args, kwargs)
        want = run.unsharded(chosen)  # under the rule on one device: shard_offset is 0 there
        bound = rules.bind(chosen, [tuple(a.shape) for a in operands], [tuple(r.shape) for r in want], names,
                           [f"result {k}" for k in range(len(want))])
        checks = [_check_factor(run, bound, factor, want, rtol, atol)
                  for factor in dict.fromkeys(f for g in bound.operands + bound.results for f in g)]
    unsafe = tuple(c.factor for c in checks if c.split_by_rule and c.changes_result)
    could = tuple(c.factor for c in checks if not c.split_by_rule and c.changes_result is False)
    return RuleCheck(name, spelled(chosen), tuple(checks), unsafe, could, spelled(_proposed(bound, checks)))


def _check_factor(run: _Runner, bound: rules.BoundRule, factor: str, want: list[Any], rtol: float,
                  atol: float) -> FactorCheck:
    shown = _shown(factor)
    in_operand = any(factor in g for g in bound.operands)
    pieces = pieces_of(bound.sizes[factor], len(run.devices))
    placed = [_spec_along(dims, factor) for dims in bound.operand_dims]
    why = ("only results have it (a kernel's result cannot be split along it)" if not in_operand else
           f"no device count divides its size {bound.sizes[factor]}" if not pieces else
           "only a compound dimension's minor place holds it" if not any(any(s) for s in placed) else "")
    if why:
        return FactorCheck(shown, bound.sizes[factor], 0, False, None, 0.0, (), why)
    got, collectives, split = run.sharded(bound.rule, placed, pieces)
    error = _max_error(got, want)
    failed = f"split, the function fails: {got}" if isinstance(got, str) else ""
    if split or failed:
        return FactorCheck(shown, bound.sizes[factor], pieces, split, not _close(got, want, rtol, atol), error,
                           collectives, failed)
    got_free, _, split_free = run.sharded(_letting_split(bound, factor), placed, pieces)
    if isinstance(got_free, str):
        return FactorCheck(shown, bound.sizes[factor], pieces, False, True, error, collectives,
                           f"split, the function fails: {got_free}")
    changes = None if not split_free else not _close(got_free, want, rtol, atol)
    return FactorCheck(shown, bound.sizes[factor], pieces, False, changes, error, collectives,
                       "" if split_free else "XLA did not split it even where the rule let it")


def _letting_split(bound: rules.BoundRule, factor: str) -> rules.Rule:
    """The rule checked, letting ``factor`` split: not kept whole; a reduction factor if only operands have it."""
    rule = bound.rule
    keep = {f for f in rule.need_replication if f != _named(factor)}
    reduce = set(rule.reduction)
    if not any(factor in g for g in bound.results):
        reduce.add(_named(factor))  # '...' names every dimension of its ellipsis: they all may split then
    return rules.parse(rule.text, need_replication=sorted(keep), reduction=sorted(reduce - keep))


def _proposed(bound: rules.BoundRule, checks: list[FactorCheck]) -> rules.Rule:
    """The rule checked with each factor whose split changes the result kept whole (or no longer a reduction
    factor), and each operand-only factor whose split sums to the result made a reduction factor."""
    rule = bound.rule
    keep, reduce = set(rule.need_replication), set(rule.reduction)
    for check, factor in zip(checks, dict.fromkeys(f for g in bound.operands + bound.results for f in g),
                             strict=True):
        named = _named(factor)
        only_operands = not any(factor in g for g in bound.results)
        if check.changes_result:
            reduce.discard(named)
            if not only_operands:
                keep.add(named)
        elif check.changes_result is False:
            if only_operands:
                reduce.add(named)
            elif named != "..." or all(c.changes_result is False for c in checks if c.factor.startswith("...")):
                keep.discard(named)
    return rules.parse(rule.text, need_replication=sorted(keep), reduction=sorted(reduce - keep))


def spelled(rule: rules.Rule) -> str:
    """The decorator's spelling of ``rule``."""
    extra = "".join(f", {k}={tuple(sorted(v))!r}" for k, v in (("need_replication", rule.need_replication),
                                                                 ("reduction_factors", rule.reduction)) if v)
    return f"@tritonplug.partitioned({rule.text!r}{extra})"


def _rule_of(chooser: Any, rule: Any, args: tuple, kwargs: dict) -> rules.Rule:
    if chooser is not None:  # a rule function: called as the function is
        return chooser.rule_for_call(args, kwargs)
    if isinstance(rule, str):
        return rules.parse(rule)
    if isinstance(rule, rules.Rule):
        return rule
    raise TypeError(f"check_rule: rule is a str such as 'r c -> r c', a tritonplug.sharding_rule(...), a function "
                    f"choosing one, or None (propose one), got {type(rule).__name__}")


def _spec_along(dims: rules.Dims, factor: str) -> tuple[str | None, ...]:
    """An operand split along ``factor`` where a dimension has it alone or in a compound's major place."""
    return tuple(_AXIS if dim[0] == factor else None for dim in dims)


def _named(factor: str) -> str:
    return "..." if factor.startswith(("dots0_", "xdots0_")) else \
        f"...{factor.lstrip('x')[4:].split('_')[0]}" if factor.startswith(("dots", "xdots")) else factor


def _shown(factor: str) -> str:
    if factor.startswith(("dots", "xdots")):
        return f"{_named(factor)}[{factor.rsplit('_', 1)[1]}]"
    return factor


def _devices() -> list[Any]:
    for devices in (jax.devices(), jax.devices("cpu")):
        if len(devices) > 1:
            return list(devices)
    raise RuntimeError("check_rule splits each factor over several devices, and this process sees one: on the "
                       "CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=8 before JAX starts")


def _close(got: Sequence[Any] | str, want: Sequence[Any], rtol: float, atol: float) -> bool:
    if isinstance(got, str):
        return False
    return all(np.allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=rtol, atol=atol)
               for g, w in zip(got, want, strict=True))


def _max_error(got: Sequence[Any] | str, want: Sequence[Any]) -> float:
    if isinstance(got, str):
        return math.inf
    return max((float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)), initial=0.0))
                for g, w in zip(got, want, strict=True)), default=0.0)


class _Runner:
    """Runs the plain function on the example arguments: on one device, and under a rule with its operands placed
    over a line of devices."""

    def __init__(self, plain: Callable[..., Any], args: tuple, kwargs: dict, operands: Sequence[Any],
                 devices: list[Any], partition: Any) -> None:
        self.plain, self.devices, self.partition = plain, devices, partition
        self.leaves, self.tree = jax.tree.flatten((args, kwargs))
        self.where = [i for i, leaf in enumerate(self.leaves) if is_array(leaf)]
        # each array leaf's operand index (the rule's order is the signature's, not the call's)
        order = {id(a): k for k, a in reversed(list(enumerate(operands)))}
        self.operand_of = [order[id(self.leaves[i])] for i in self.where]

    def arrays(self) -> list[Any]:
        return [self.leaves[i] for i in self.where]

    def call(self, fn: Callable[..., Any]) -> Callable[..., list[Any]]:
        def run(*arrays: Any) -> list[Any]:
            leaves = list(self.leaves)
            for i, a in zip(self.where, arrays, strict=True):
                leaves[i] = a
            args, kwargs = jax.tree.unflatten(self.tree, leaves)
            return [r for r in jax.tree.leaves(fn(*args, **kwargs)) if is_array(r)]
        return run

    def unsharded(self, rule: rules.Rule) -> list[Any]:
        arrays = [jax.device_put(self.leaves[i], self.devices[0]) for i in self.where]
        return [np.asarray(r) for r in jax.jit(self.call(self.partition(self.plain, rule, checked=True)))(*arrays)]

    def sharded(self, rule: rules.Rule, specs: Sequence[tuple[str | None, ...]],
                pieces: int) -> tuple[list[Any] | str, tuple[str, ...], bool]:
        """The results under ``rule`` with the operands placed as ``specs`` over ``pieces`` devices (or, where
        the function fails on that split, the error's first line), the compiled program's collectives, and
        whether the call split the factor (``_AXIS`` in its decision)."""
        mesh = jax.make_mesh((pieces,), (_AXIS,), axis_types=(jax.sharding.AxisType.Auto,),
                             devices=self.devices[:pieces])
        arrays = [jax.device_put(self.leaves[i], NamedSharding(mesh, PartitionSpec(*specs[k])))
                  for i, k in zip(self.where, self.operand_of, strict=True)]
        jitted = jax.jit(self.call(self.partition(self.plain, rule, checked=True)))
        state.partitions.clear()
        try:
            got: list[Any] | str = [np.asarray(r) for r in jitted(*arrays)]
            text = jitted.lower(*arrays).compile().as_text() or ""
        except Exception as exc:  # a kernel that cannot run on the split (a block too small): it must stay whole
            got, text = f"{type(exc).__name__}: {_first_line(exc)}", ""
        split = any(axes for r in inspection.partitions() for _, axes in r.factors)
        return got, tuple(sorted({c["op"] for c in inspection.collectives(text)})), split


def _first_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    kernel = next((line for line in lines if "could not compile" in line or "Error" in line), lines[0] if lines else "")
    return kernel[:200]


def pieces_of(size: int, devices: int) -> int:
    """The most devices (two or more, dividing ``devices``) that divide ``size``; 0 if none."""
    return max((d for d in range(2, devices + 1) if devices % d == 0 and size % d == 0), default=0)

