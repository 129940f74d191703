"""``tritonplug.partitioned``: a function that makes Triton calls, run on each device's shard in a sharded jit.

::

    @tritonplug.partitioned("b n, b n -> b n")
    def add(x, y):
        n = x.shape[-1]
        return tritonplug.triton_call(x, y, n, kernel=add_kernel, out_type=jax.typeof(x),
                                      grid=(x.shape[0], tritonplug.cdiv(n, 256)), BLOCK=256)

The function's array arguments (``jax.Array``/NumPy arrays, at any depth of its arguments' pytrees) are the
rule's operands, in the order of the function's parameters however a call spells them (by position or by
keyword, in any order): a call is bound to the signature first, its omitted parameters taking their defaults
(an array default is an operand); the arrays of a ``*args`` come in their order, those of a ``**kwargs`` in
sorted keyword order. Its other arguments (Python numbers, strings, ``None``, ...) are constants of the call.
Its array results (at any depth of the pytree it returns) are the rule's results; a result that is not an
array (a block size a launcher returns) is passed through as the function computed it on the whole arrays.
On one device the function runs as it is.
In a jit partitioned over several devices the function is traced again on each shard's shapes
(``tritonplug.sharding.paths``). Under ``jax.vmap`` the batched function is partitioned under the rule with
a leading batch factor, so the batch may be split too.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from tritonplug import settings
from tritonplug.calls import sharding_rules as rules
from tritonplug.sharding import paths, rule_check
from tritonplug.sharding.per_shard import call, is_array

_EAGER_JITS = 64
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def sharding_rule(rule: str, *, need_replication: Sequence[str] = (), need_replication_factors: Sequence[str] = (),
                  reduction_factors: Sequence[str] = ()) -> rules.Rule:
    """A parsed rule, for ``partitioned`` or for a function that picks each call's rule (see ``partitioned``).

    ``rule``: ``custom_partitioning``'s ``sharding_rule`` notation, one group of factors per array operand
    and per array result of the function (``"b n, b n -> b n"``, ``"... d, d -> ... d"``).
    ``need_replication`` (or JAX's name, ``need_replication_factors``): factors the kernel needs whole, e.g.
    the dimension it reduces over; XLA gathers operands split along them. A factor that is only in operands
    or only in results is kept whole too. ``reduction_factors``: factors whose shards give partial sums of the
    results that lack them (each shard's such results are added with ``psum``); ``"..."`` names the ellipsis.
    A malformed rule is a ``ValueError`` saying what is wrong.
    """
    if need_replication and need_replication_factors:
        raise TypeError("partitioned: give need_replication or need_replication_factors (the same thing), not both")
    for keyword, factors in (("need_replication", need_replication),
                             ("need_replication_factors", need_replication_factors),
                             ("reduction_factors", reduction_factors)):
        _check_factor_names(keyword, factors)
    return _parse(_rule_text(rule), tuple(need_replication or need_replication_factors), tuple(reduction_factors))


def _rule_text(rule: Any) -> str:
    """``rule`` if it is a str; else a ``TypeError`` saying what a rule is (a list of groups is the usual slip)."""
    if isinstance(rule, str):
        return rule
    if isinstance(rule, (list, tuple)) and all(isinstance(r, str) for r in rule):
        hint = f"; write it as one str: {', '.join(rule)!r}" if len(rule) > 1 else ""
        raise TypeError(f"partitioned: the rule is one str such as 'b n, b n -> b n', got the {type(rule).__name__} "
                        f"{list(rule)!r}{hint}")
    raise TypeError(f"partitioned: the rule is a str such as 'b n, b n -> b n', a tritonplug.sharding_rule(...), or "
                    f"a function of the call's arguments returning one; got {type(rule).__name__}: {rule!r:.100}")


def _check_factor_names(keyword: str, factors: Any) -> None:
    """A tuple of factor names; a str alone (``need_replication="d"``, which iterates as its letters) or anything
    else is a ``TypeError`` naming the keyword and the tuple meant."""
    if isinstance(factors, str):
        raise TypeError(f"partitioned: {keyword} takes a tuple of factor names, got the str {factors!r}; for the "
                        f"factor {factors!r} write {keyword}=({factors!r},)")
    if not isinstance(factors, (tuple, list, set, frozenset)) or not all(isinstance(f, str) for f in factors):
        raise TypeError(f"partitioned: {keyword} takes a tuple of factor names such as ('d',), got "
                        f"{type(factors).__name__}: {factors!r:.100}")


@functools.lru_cache(maxsize=256)
def _parse(rule: str, need_replication: tuple[str, ...], reduction: tuple[str, ...]) -> rules.Rule:
    return rules.parse(rule, need_replication=need_replication, reduction=reduction)


_NO_RULE: Any = object()
_EXAMPLE = "@tritonplug.partitioned('b n, b n -> b n')"


def partitioned(rule: str | rules.Rule | Callable[..., str | rules.Rule] = _NO_RULE, *,
                need_replication: Sequence[str] = (), need_replication_factors: Sequence[str] = (),
                reduction_factors: Sequence[str] = ()) -> Callable[..., Any]:
    """Decorate a function that makes Triton calls so that a sharded ``jit`` runs it per shard.

    ``rule`` and the keywords: as :func:`sharding_rule`. Where the rule depends on the call (which optional
    arrays are given, whether two arrays share a dimension), ``rule`` may instead be a function that takes the
    decorated function's arguments (bound to its signature, defaults filled in) and returns the call's rule (a
    string, or a ``tritonplug.sharding_rule`` with its keywords); it is called at every call, with arrays or
    their tracers.
    """
    if rule is _NO_RULE:
        raise TypeError(f"partitioned() needs a sharding rule, one group of factors per array argument and result: "
                        f"{_EXAMPLE} (docs/partitioned.md, 'The rule')")
    if callable(rule) and not isinstance(rule, rules.Rule):
        if need_replication or need_replication_factors or reduction_factors:
            raise TypeError("partitioned: with a function choosing the rule, give the keywords to the "
                            "tritonplug.sharding_rule(...) it returns")
        parsed: rules.Rule | Callable[..., Any] = rule
    elif isinstance(rule, rules.Rule):
        parsed = rule
    else:
        parsed = sharding_rule(rule, need_replication=need_replication,
                               need_replication_factors=need_replication_factors, reduction_factors=reduction_factors)

    def decorate(*args: Any, **kwargs: Any) -> Partitioned:
        if len(args) == 1 and not kwargs and callable(args[0]) and not is_array(args[0]):
            return Partitioned(args[0], parsed)
        if callable(rule) and not isinstance(rule, rules.Rule):  # the rule function was the decorated function
            raise TypeError(f"{getattr(rule, '__name__', rule)!s} was decorated with a bare @tritonplug.partitioned, "
                            f"which takes a sharding rule: write {_EXAMPLE} above it (docs/partitioned.md)")
        got = ", ".join([type(a).__name__ for a in args] + [f"{k}=" for k in kwargs])
        raise TypeError(f"partitioned({getattr(parsed, 'text', rule)!r}) decorates one function, got ({got})")
    return decorate


class Partitioned:
    """A function under a sharding rule; calling it runs it per shard (see the module's docstring)."""

    def __init__(self, fn: Callable[..., Any], rule: rules.Rule | Callable[..., Any], checked: bool = False) -> None:
        """``checked``: its rule needs no check at its first call (``check_rule``'s own runs)."""
        self.fn, self.rule = fn, rule
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        functools.update_wrapper(self, fn)
        try:
            self._signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None
        params = list(self._signature.parameters.values()) if self._signature is not None else []
        self._params = params
        # a call that gives every parameter by position binds as it is (the common case, no inspect.bind)
        self._plain = self._signature is not None and all(p.kind in _POSITIONAL for p in params)
        self._eager: dict[Any, Callable[..., Any]] = {}
        self._rule_checked = checked  # TRITONPLUG_CHECK_RULES: checked at the first call

    def __repr__(self) -> str:
        rule = self.rule.text if isinstance(self.rule, rules.Rule) else getattr(self.rule, "__name__", self.rule)
        return f"partitioned({rule!r})({self.__name__})"

    def _rule_for(self, args: tuple, kwargs: dict) -> rules.Rule:
        """The call's rule; a rule function is called as the function is (``args``, ``kwargs``: the call's own
        spelling, positional and keyword arguments as given, omitted parameters' defaults by keyword)."""
        if isinstance(self.rule, rules.Rule):
            return self.rule
        try:
            chosen = self.rule(*args, **kwargs)
        except TypeError as exc:  # most often its parameters do not take the call's arguments
            given = ", ".join([_shown(a) for a in args] + [f"{k}={_shown(v)}" for k, v in kwargs.items()])
            raise TypeError(f"partitioned {self.__name__}: its rule function "
                            f"{getattr(self.rule, '__qualname__', self.rule)!s} is called as the function is, "
                            f"({given}), and raised: {exc}") from exc
        if isinstance(chosen, str):
            return _parse(chosen, (), ())
        if not isinstance(chosen, rules.Rule):
            raise TypeError(f"partitioned {self.__name__}: the rule function {self.rule!r} returned {chosen!r} "
                            f"({type(chosen).__name__}); it returns a rule string or a tritonplug.sharding_rule(...)")
        return chosen

    def rule_for_call(self, args: tuple, kwargs: dict) -> rules.Rule:
        """The rule of a call with these arguments (a rule function is called as the function is)."""
        return self._rule_for(*self._spelled(self._bind(args, kwargs), len(args)))

    def operands(self, args: tuple, kwargs: dict) -> tuple[list[Any], list[str]]:
        """A call's array operands in the rule's order, and the argument each came in (``x``, ``params['w']``)."""
        leaves, _ = jax.tree_util.tree_flatten_with_path(self._bind(args, kwargs))
        return ([leaf for _, leaf in leaves if is_array(leaf)],
                [self._name(path) for path, leaf in leaves if is_array(leaf)])

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self if instance is None else functools.partial(self, instance)

    def _bind(self, args: tuple, kwargs: dict) -> tuple:
        """The call's arguments in the signature's order, one entry per parameter, defaults filled in: the
        operands' order is the signature's however the call spells them (by position or keyword, in any order).
        A ``*args`` entry is the tuple given, a ``**kwargs`` entry the dict (flattened by sorted keyword)."""
        if self._plain and not kwargs and len(args) == len(self._params):
            return args
        if self._signature is None:  # no signature to order keywords by: positional arrays only
            if any(is_array(leaf) for leaf in jax.tree.leaves(kwargs)):
                raise TypeError(f"partitioned {self.__name__}: its signature cannot be read, so the order of "
                                f"array arguments given by keyword ({sorted(kwargs)}) is unknown; pass them "
                                f"by position")
            return (args, kwargs)
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:  # Python's own message for the call ("missing a required argument: 'x'")
            raise TypeError(f"{self.__name__}(): {exc}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _unbind(self, arguments: tuple) -> tuple[tuple, dict]:
        """``(args, kwargs)`` that call the function with ``arguments`` (``_bind``'s order)."""
        if self._signature is None:
            return arguments
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for p, value in zip(self._params, arguments, strict=True):
            if p.kind in _POSITIONAL:
                args.append(value)
            elif p.kind == inspect.Parameter.VAR_POSITIONAL:
                args.extend(value)
            elif p.kind == inspect.Parameter.KEYWORD_ONLY:
                kwargs[p.name] = value
            else:
                kwargs.update(value)
        return tuple(args), kwargs

    def _spelled(self, arguments: tuple, positional: int) -> tuple[tuple, dict]:
        """``(args, kwargs)`` as the call spelled them (``positional``: how many it gave by position), with
        ``arguments`` (``_bind``'s order) in them: what a rule function is called with."""
        if self._signature is None:
            return arguments
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for index, (p, value) in enumerate(zip(self._params, arguments, strict=True)):
            if p.kind == inspect.Parameter.POSITIONAL_ONLY or (p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
                                                               and index < positional):
                args.append(value)
            elif p.kind == inspect.Parameter.VAR_POSITIONAL:
                args.extend(value)
            elif p.kind == inspect.Parameter.VAR_KEYWORD:
                kwargs.update(value)
            else:
                kwargs[p.name] = value
        return tuple(args), kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._rule_checked and settings.CHECK_RULES.get():
            self._rule_checked = True
            _check_first_call(self, args, kwargs)
        leaves, treedef = jax.tree_util.tree_flatten_with_path(self._bind(args, kwargs))
        where = [i for i, (_, leaf) in enumerate(leaves) if is_array(leaf)]
        arrays = [leaves[i][1] for i in where]
        names = [self._name(leaves[i][0]) for i in where]
        values = [None if i in where else leaf for i, (_, leaf) in enumerate(leaves)]  # the constants alone
        if any(isinstance(a, jax.core.Tracer) for a in arrays):
            return self._traced(arrays, values, where, treedef, names, len(args))
        key = self._eager_key(values, where, treedef, len(args))
        run = self._eager.get(key) if key is not None else None
        if run is None:
            run = jax.jit(lambda *arrs: self._traced(list(arrs), values, where, treedef, names, len(args)))
            if key is not None:
                if len(self._eager) >= _EAGER_JITS:
                    self._eager.clear()
                self._eager[key] = run
        paths.take_failure()
        try:
            return run(*arrays)
        except jax.errors.JaxRuntimeError:
            failure = paths.take_failure()  # the per-shard error XLA wrapped: say it as it is
            if failure is None:
                raise
            raise failure from failure.__cause__

    def _traced(self, arrays: list[Any], values: list[Any], where: list[int], treedef: Any,
                names: list[str], positional: int) -> Any:
        out: dict[str, Any] = {}  # the first (whole-array) trace's result tree and non-array results

        def body(*arrs: Any) -> tuple[Any, ...]:
            args, kwargs = self._unbind(_rebuild(treedef, values, where, arrs))
            flat, tree = jax.tree.flatten(self.fn(*args, **kwargs))
            out.setdefault("tree", tree)
            out.setdefault("values", flat)
            return tuple(leaf for leaf in flat if is_array(leaf))

        rule = self._rule_for(*self._spelled(_rebuild(treedef, values, where, arrays), positional))
        arrays_out = iter(call(rule, body, arrays, names, self.__name__, self._closed_over))
        return jax.tree.unflatten(out["tree"], [next(arrays_out) if is_array(v) else v for v in out["values"]])

    def _closed_over(self) -> list[str]:
        """The names of the arrays the function reads from its closure or its module's globals."""
        code = getattr(self.fn, "__code__", None)
        if code is None:
            return []
        cells = {name: cell.cell_contents for name, cell in zip(code.co_freevars, self.fn.__closure__ or (),
                                                                strict=False) if _filled(cell)}
        scope = {**{n: getattr(self.fn, "__globals__", {}).get(n) for n in code.co_names}, **cells}
        return [name for name, value in scope.items()
                if any(is_array(leaf) or isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(value))]

    def _name(self, path: tuple) -> str:
        """``x``, ``params['w']``, ``rest[0]``, ``w`` (a ``**kwargs`` keyword): the argument an operand came in."""
        if self._signature is None:  # (args, kwargs): only args hold arrays
            _, position, *rest = path
            return f"args[{position.idx}]" + jax.tree_util.keystr(tuple(rest))
        position, *rest = path
        param = self._params[position.idx]
        if param.kind == inspect.Parameter.VAR_KEYWORD:
            key, *rest = rest
            return str(key.key) + jax.tree_util.keystr(tuple(rest))
        return param.name + jax.tree_util.keystr(tuple(rest))

    @staticmethod
    def _eager_key(values: list[Any], where: list[int], treedef: Any, positional: int) -> Any:
        statics = tuple(v for i, v in enumerate(values) if i not in set(where))
        try:
            key = (treedef, tuple(where), positional, tuple((type(v), v) for v in statics))
            hash(key)
        except TypeError:
            return None
        return key


def _rebuild(treedef: Any, values: list[Any], where: list[int], arrays: Sequence[Any]) -> tuple:
    """The call's bound arguments (``Partitioned._bind``): its constants with ``arrays`` put back where the
    operands were."""
    leaves = list(values)
    for i, a in zip(where, arrays, strict=True):
        leaves[i] = a
    return jax.tree.unflatten(treedef, leaves)


def _filled(cell: Any) -> bool:
    try:
        return cell.cell_contents is not cell
    except ValueError:  # a closure variable not yet assigned
        return False


def _shown(value: Any) -> str:
    return f"{value.dtype}{list(value.shape)}" if hasattr(value, "shape") and hasattr(value, "dtype") else \
        f"{value!r:.40}"


def check_rule(fn: Callable[..., Any], *example_args: Any, rule: Any = None, rtol: float = 1e-5, atol: float = 1e-5,
               **example_kwargs: Any) -> rule_check.RuleCheck:
    """Run ``fn`` on the example arguments unsharded and with each factor of its rule split over the devices
    (CPU devices included), and report what holds (docs/partitioned.md, 'Checking a rule').

    ``fn``: a ``@tritonplug.partitioned`` function, whose rule is checked unless ``rule`` is given, or the plain
    function that makes the Triton calls. ``rule``: a rule string, a ``tritonplug.sharding_rule(...)``, a function
    choosing one, or ``None`` for a plain function: one is proposed from the arrays' shapes, and checked. Each
    factor is split alone over the most devices that divide it, under the rule (the result against the unsharded
    call's, within ``rtol``/``atol``; the compiled program's collectives) and, where the rule keeps it whole,
    letting it split. The returned ``RuleCheck`` (a frozen record; ``str()`` is a report) lists per factor
    whether its split changes the result, the factors the rule splits unsafely (``unsafe``; ``holds`` is whether
    there are none), those it could split, and ``proposed``: a rule that holds, as the decorator spells it.
    Needs two or more devices (on the CPU: ``XLA_FLAGS=--xla_force_host_platform_device_count=8``).
    """
    return rule_check.check(fn, example_args, example_kwargs, rule, rtol, atol, Partitioned)


def _check_first_call(fn: Partitioned, args: tuple, kwargs: dict) -> None:
    """``TRITONPLUG_CHECK_RULES``: check the rule once, on the call's arrays (inside a jit, made-up values of their
    shapes: normal floats, zero integers), and refuse the call if a split the rule allows changes the result."""
    def example(leaf: Any) -> Any:
        if not isinstance(leaf, jax.core.Tracer):
            return leaf
        kind = jax.typeof(leaf)
        if np.issubdtype(kind.dtype, np.floating):
            return np.random.default_rng(0).standard_normal(kind.shape).astype(kind.dtype)
        return np.zeros(kind.shape, kind.dtype)
    found = check_rule(fn, *jax.tree.map(example, args), **jax.tree.map(example, kwargs))
    if not found.holds:
        raise ValueError(f"partitioned {fn.__name__} (TRITONPLUG_CHECK_RULES=1): its rule lets XLA split "
                         f"{list(found.unsafe)}, and a split along them changes the result; a rule that holds: "
                         f"{found.proposed}\n{found}")
