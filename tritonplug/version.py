"""tritonplug's version, as jax-triton exposes its own (``__version__``, ``__version_info__``), and the one
definition of the releases of its moving dependencies that CI tests.

The version policy (docs/versions.md): the lower bounds in ``pyproject.toml`` are the oldest releases CI
tests, and there are no upper bounds, so pip never refuses a newer jax, jaxlib or Triton. A release newer
(or older) than the tested range gets a one-line :class:`UntestedVersionWarning` when the host first loads
its JAX primitive (:func:`warn_if_untested`); only a release listed in :data:`KNOWN_BROKEN` is an error.
``tritonplug info`` prints each version and whether it was tested (:func:`tested_report`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

try:
    from importlib.metadata import version as _dist_version

    __version__: str = _dist_version("tritonplug")
except Exception:  # running from a source tree that pip did not install
    __version__ = "0+source"

#: The release numbers of ``__version__`` as ints, e.g. ``(0, 1, 0)``.
__version_info__: tuple[int, ...] = tuple(int(p) for p in re.findall(r"\d+", __version__.split("+")[0])[:3])

#: The releases CI runs, per distribution (tox.ini's envs; docs/versions.md's matrix table). The tested range of a
#: distribution runs from its oldest to its newest entry; ``pyproject.toml``'s lower bounds are the oldest.
TESTED: dict[str, tuple[str, ...]] = {
    "python": ("3.11", "3.12"),
    "jax": ("0.10.2", "0.11.2", "0.12.0.1"),
    "jaxlib": ("0.10.2", "0.11.2", "0.12.0.1"),
    "triton": ("3.6.0", "3.7.1", "3.9.0"),
}


@dataclass(frozen=True)
class KnownBreak:
    """Releases of ``distribution`` from ``first`` up to (not including) ``fixed`` that are known to break
    tritonplug (``fixed=None``: every later release too), and why."""

    distribution: str
    first: str
    fixed: str | None
    reason: str


#: Releases known to break tritonplug: importing its primitive raises :class:`IncompatibleVersionError`
#: naming the reason. Empty today: every release of the tested ranges passes, and no newer one is known to
#: fail. An entry goes here once a release is shown to break something that tritonplug cannot absorb.
KNOWN_BROKEN: tuple[KnownBreak, ...] = ()


class UntestedVersionWarning(UserWarning):
    """A jax, jaxlib or Triton release outside the range CI tests: it may work; report what does not."""


class IncompatibleVersionError(ImportError):
    """A jax, jaxlib or Triton release known to break tritonplug (:data:`KNOWN_BROKEN`)."""


def release(version: str) -> tuple[int, ...]:
    """The release numbers a version string starts with: ``"3.10.0+git1a2b"`` → ``(3, 10, 0)``,
    ``"0.12.0.1"`` → ``(0, 12, 0, 1)``; pre-release and local parts are ignored."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def _number(distribution: str, version: str) -> tuple[int, ...]:
    """The release numbers that matter: Python's major and minor, every number of the others."""
    number = release(version)
    return number[:2] if distribution == "python" else number


def _same_release(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) == b + (0,) * (width - len(b))


def tested_range(distribution: str) -> tuple[str, str]:
    """(oldest, newest) tested release of ``distribution``."""
    versions = sorted(TESTED[distribution], key=release)
    return versions[0], versions[-1]


def known_break(distribution: str, version: str,
                known: tuple[KnownBreak, ...] | None = None) -> KnownBreak | None:
    """The entry of ``known`` (default :data:`KNOWN_BROKEN`) that ``version`` of ``distribution`` falls in."""
    number = release(version)
    for entry in KNOWN_BROKEN if known is None else known:
        if (entry.distribution == distribution and number >= release(entry.first)
                and (entry.fixed is None or number < release(entry.fixed))):
            return entry
    return None


def status(distribution: str, version: str, known: tuple[KnownBreak, ...] | None = None) -> str:
    """Whether CI tested ``version`` of ``distribution``: ``"tested"``, ``"within the tested range ..."``,
    ``"newer than tested ..."``, ``"older than tested ..."`` or ``"known to break: ..."``."""
    broken = known_break(distribution, version, known)
    if broken is not None:
        return f"known to break: {broken.reason}"
    if distribution not in TESTED:
        return "not tracked"
    number, (oldest, newest) = _number(distribution, version), tested_range(distribution)
    if any(_same_release(number, release(t)) for t in TESTED[distribution]):
        return "tested"
    if number > release(newest):
        return f"newer than tested (the newest tested is {newest})"
    if number < release(oldest):
        return f"older than tested (the oldest tested is {oldest})"
    return f"within the tested range {oldest}–{newest}, not itself tested"


def check(versions: Mapping[str, str], known: tuple[KnownBreak, ...] | None = None) -> str | None:
    """Raise :class:`IncompatibleVersionError` for a release known to break tritonplug; return one warning
    line naming the tested ranges when some release is outside them, else ``None``."""
    for distribution, version in versions.items():
        broken = known_break(distribution, version, known)
        if broken is not None:
            fixed = f"; {broken.fixed} works again" if broken.fixed else ""
            raise IncompatibleVersionError(
                f"tritonplug {__version__} does not work with {distribution} {version}: {broken.reason}{fixed}. "
                f"Tested: {_ranges()}")
    outside = [f"{d} {v} ({status(d, v, known).split(' than')[0]})" for d, v in versions.items()
               if d in TESTED and status(d, v, known).startswith(("newer", "older"))]
    if not outside:
        return None
    return (f"tritonplug {__version__} is tested with {_ranges()}; this process has {', '.join(outside)}: it may "
            f"work; if something breaks, `tritonplug info` shows the versions (README: \"When a new release "
            f"breaks something\")")


def _ranges() -> str:
    return ", ".join(f"{d} {'–'.join(dict.fromkeys(tested_range(d)))}" for d in TESTED)


def installed() -> dict[str, str]:
    """The running Python's and the imported jax, jaxlib and Triton's versions."""
    import jax
    import jaxlib
    import triton

    return {"python": ".".join(map(str, sys.version_info[:3])), "jax": jax.__version__,
            "jaxlib": jaxlib.__version__, "triton": triton.__version__}


def tested_report(versions: Mapping[str, str] | None = None) -> dict[str, str]:
    """What ``tritonplug info`` shows: each version and whether CI tested it."""
    versions = installed() if versions is None else versions
    return {d: f"{v}: {status(d, v)}" for d, v in versions.items()}


_warned = False


def warn_if_untested() -> None:
    """Once per process: the warning of :func:`check` for the installed versions (or its error)."""
    global _warned
    if _warned:
        return
    _warned = True
    message = check(installed())
    if message is not None:
        from tritonplug.calls import user_warnings

        user_warnings.warn(message, UntestedVersionWarning)
