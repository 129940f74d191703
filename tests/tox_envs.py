"""What each env of ``tox.ini``'s envlist runs, read from ``tox.ini`` itself: the backends its deps install and, for
each pytest command, the paths, ``--ignore`` options and ``-m`` expression. ``test_env_coverage.py`` checks with it
that every test runs in some env; ``helpers.requires_backend`` names the envs that install a backend.

Only what ``tox.ini`` uses is understood (``{[section]key}`` substitutions, ``{posargs}``, ``env VAR=…`` prefixes,
continuation lines, ``-n``, ``-m``, ``--ignore``); a pytest option outside that raises, so the check cannot silently
misread a command.
"""

from __future__ import annotations

import configparser
import functools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
TOX_INI = ROOT / "tox.ini"

_SUBSTITUTION = re.compile(r"\{\[([^\]]+)\]([\w-]+)\}")


@dataclass(frozen=True)
class PytestRun:
    """One pytest command of an env: what it collects (``paths`` less ``ignores``) and its ``-m`` expression."""

    paths: tuple[str, ...]
    ignores: tuple[str, ...]
    markexpr: str | None

    def collects(self, path: str) -> bool:
        """Whether a test file (a path relative to the repository's root) is collected by this command."""
        def under(root: str) -> bool:
            root = root.rstrip("/")
            return path == root or path.startswith(root + "/")
        return any(under(p) for p in self.paths) and not any(under(i) for i in self.ignores)


@dataclass(frozen=True)
class Env:
    name: str
    projects: frozenset[str]  # the repository's projects its deps install: ".", "plugins/cuda" …
    backends: frozenset[str]  # the entry points of group tritonplug.backends that those install
    runs: tuple[PytestRun, ...]


def _config() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(TOX_INI)
    return parser


def _value(config: configparser.ConfigParser, section: str, key: str) -> str:
    """``section``'s ``key`` (falling back to ``[testenv]``) with ``{[section]key}`` substitutions made."""
    for name in (section, "testenv"):
        if config.has_option(name, key):
            raw = config.get(name, key)
            return _SUBSTITUTION.sub(lambda m: _value(config, m.group(1), m.group(2)), raw)
    return ""


def _lines(text: str) -> list[str]:
    """``text``'s logical lines: continuations joined, comments and blank lines dropped."""
    lines, current = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#"):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip():
            lines.append(current.strip())
        current = ""
    return lines


def parse_pytest(command: str) -> PytestRun | None:
    """The pytest run of a command line, or None if it does not run pytest."""
    words = shlex.split(command.replace("{posargs}", ""))
    if words and words[0] == "env":
        words = words[1:]
        while words and "=" in words[0]:
            words = words[1:]
    if words[:3] == ["python", "-m", "pytest"]:
        words = words[3:]
    elif words[:1] == ["pytest"]:
        words = words[1:]
    else:
        return None
    paths, ignores, markexpr = [], [], None
    while words:
        word = words.pop(0)
        if word in ("-n", "-m"):
            value = words.pop(0)
            if word == "-m":
                markexpr = value
        elif word.startswith("--ignore="):
            ignores.append(word.split("=", 1)[1])
        elif word == "--ignore":
            ignores.append(words.pop(0))
        elif word.startswith("-"):
            raise ValueError(f"tox_envs does not know pytest's {word} (in {command!r}): teach parse_pytest")
        else:
            paths.append(word)
    return PytestRun(tuple(paths), tuple(ignores), markexpr)


def _project_of(dep: str) -> str | None:
    """The repository's project a requirement line installs (``-e plugins/cuda``, ``./tests/plugins/x``,
    ``-e .[examples]``), as a path relative to the root, or None for a package from an index."""
    target = re.sub(r"\[.*\]$", "", dep.removeprefix("-e").strip())
    if not target.startswith((".", "plugins/", "tests/")) or not (ROOT / target / "pyproject.toml").is_file():
        return None
    return (ROOT / target).resolve().relative_to(ROOT).as_posix()


def _backends_of(project: str) -> frozenset[str]:
    """The entry points of group ``tritonplug.backends`` that a project of the repository declares."""
    declared = tomllib.loads((ROOT / project / "pyproject.toml").read_text()).get("project", {})
    return frozenset(declared.get("entry-points", {}).get("tritonplug.backends", {}))


@functools.cache
def _envlist() -> tuple[tuple[str, frozenset[str]], ...]:
    """Each env of the envlist, in order, with the repository's projects its deps install."""
    config = _config()
    names = [n.strip() for n in config.get("tox", "envlist").split(",") if n.strip()]
    deps = {name: _lines(_value(config, f"testenv:{name}", "deps")) for name in names}
    return tuple((name, frozenset(p for p in map(_project_of, deps[name]) if p is not None)) for name in names)


@functools.cache
def envs() -> tuple[Env, ...]:
    """The envs of ``tox.ini``'s envlist, in order."""
    config = _config()
    found = []
    for name, projects in _envlist():
        runs = [parse_pytest(c) for c in _lines(_value(config, f"testenv:{name}", "commands"))]
        backends = frozenset().union(*map(_backends_of, projects))
        found.append(Env(name, projects, backends, tuple(r for r in runs if r is not None)))
    return tuple(found)


def envs_installing(*backends: str) -> list[str]:
    """The envlist's envs, in order, that install one of the backends ``backends`` (read from their deps only)."""
    return [name for name, projects in _envlist() if any(set(backends) & _backends_of(p) for p in projects)]
