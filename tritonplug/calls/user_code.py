"""Calls into the user's own callables (grids, heuristics, config pruning), guarded.

A grid lambda that reads a misspelt metaparameter raises a bare ``KeyError: 'BLOK'`` from deep inside
tritonplug; one that takes no argument a ``TypeError`` about ``<lambda>()``. Neither says which callable
of which kernel failed, nor what it could have read. :func:`call_user` runs the callable and re-raises
what it raises with that said: the callable (its name, file and line), the kernel, and the missing or
wrong name, with the original exception as the cause.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from tritonplug.errors import TritonplugError


class MissingNameError(TritonplugError, KeyError):
    """A user callable read a name (a metaparameter, an argument) that the call does not have.

    A ``KeyError`` still, so code catching the bare one keeps working, but printed as a sentence."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def describe(fn: Any) -> str:
    """``<lambda> (File "k.py", line 12)``: how an error names a user callable."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    name = str(name).rsplit(".<locals>.", 1)[-1]  # where it was defined is the file and line
    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    if code is None:
        return repr(name)
    return f"{name} (File \"{code.co_filename}\", line {code.co_firstlineno})"


def call_user(role: str, fn: Callable[..., Any], kernel: str, args: tuple = (), kwargs: dict | None = None,
              available: Iterable[str] = (), expects: str = "", unavailable: Iterable[str] = ()) -> Any:
    """``fn(*args, **kwargs)``; what it raises is re-raised naming ``role`` (``"grid callable"``), ``fn``,
    the ``kernel``, and, for a ``KeyError``, the missing name among ``available`` (with the closest one), or,
    when it is one of ``unavailable`` (a runtime argument a grid callable is not given), saying so.
    ``expects`` describes the arguments ``fn`` is given, for an error about its signature."""
    kwargs = kwargs or {}
    try:
        return fn(*args, **kwargs)
    except TritonplugError:
        raise
    except KeyError as exc:
        raise _missing(role, fn, kernel, exc, sorted(set(available)), set(unavailable)) from exc
    except TypeError as exc:
        head = f"{role} {describe(fn)} of kernel {kernel!r}"
        problem = _signature_problem(fn, args, kwargs)
        if problem is not None:
            raise TypeError(f"{head} cannot be called {expects or 'with its arguments'}: {problem}") from exc
        raise TypeError(f"{head} raised TypeError: {exc}") from exc
    except Exception as exc:
        message = f"{role} {describe(fn)} of kernel {kernel!r} raised {type(exc).__name__}: {exc}"
        try:
            wrapped = type(exc)(message)
        except Exception:
            wrapped = TritonplugError(message)
        raise wrapped from exc


def _missing(role: str, fn: Any, kernel: str, exc: KeyError, available: list[str], unavailable: set[str]
             ) -> Exception:
    name = exc.args[0] if exc.args else None
    if isinstance(name, str) and name in unavailable:
        return MissingNameError(f"{role} {describe(fn)} of kernel {kernel!r} reads {name!r}, a runtime argument of "
                                f"the kernel; it is given only the metaparameters (the tl.constexprs: "
                                f"{', '.join(map(repr, available)) or 'none'}), as in jax-triton: compute the grid "
                                f"from the sizes you pass instead (grid=lambda meta: (cdiv(n, meta['BLOCK']),))")
    listed = ", ".join(map(repr, available)) or "nothing"
    close = difflib.get_close_matches(name, available, n=1) if isinstance(name, str) else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if name in available:  # the KeyError comes from something else the callable looked up
        return MissingNameError(f"{role} {describe(fn)} of kernel {kernel!r} raised KeyError: {name!r}")
    return MissingNameError(f"{role} {describe(fn)} of kernel {kernel!r} reads {name!r}, which the call does not "
                            f"have (it has {listed}){hint}")


def _signature_problem(fn: Any, args: tuple, kwargs: dict) -> str | None:
    """Why ``fn`` cannot take these arguments at all (``None`` when it can, or its signature is unknown)."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    except ValueError:
        return None
    return None
