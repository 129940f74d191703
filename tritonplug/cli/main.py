"""The tritonplug command: what is installed, the compiled-kernel cache and tuning records.

  tritonplug info                                      versions, backends, targets, cache, workers
  tritonplug settings [--markdown]                     every TRITONPLUG_* setting: owner, value, meaning
  tritonplug cache stats|clear|prune [--max-bytes N]   inspect or shrink the cache
  tritonplug tune list|export FILE|import FILE|clear   persisted autotuning records

Add --json (before or after the command) for JSON output. TRITONPLUG_CACHE_DIR chooses the cache.
"""

from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    # --json is accepted before or after the command: each subcommand repeats it, with a default that
    # leaves the top-level value alone.
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON instead of text")
    parser = argparse.ArgumentParser(prog="tritonplug", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    commands = parser.add_subparsers(dest="command", required=True)
    _command(commands, "info", "versions, plugins, platforms, targets, cache and workers", json_flag)
    table = _command(commands, "settings", "every TRITONPLUG_* setting the host and the installed plugins declare: "
                                           "its owner, its value now and its meaning", json_flag)
    table.add_argument("--markdown", action="store_true", help="print the configuration table (README.md's)")
    cache = _command(commands, "cache", "inspect or shrink the compiled-kernel cache")
    actions = cache.add_subparsers(dest="action", required=True)
    _command(actions, "stats", "directory, entries and bytes", json_flag)
    _command(actions, "clear", "remove every entry, damaged item, dead writer's temp file and unheld lock file; "
                               "exits with 1 if something could not be removed (a read-only cache)", json_flag)
    prune = _command(actions, "prune", "evict least-recently-used entries until the rest fit; exits with 1 if "
                                       "they cannot be brought within the bound", json_flag)
    prune.add_argument("--max-bytes", type=_byte_count, default=None, metavar="N",
                       help="shrink to this many bytes (default: the cache's bound, TRITONPLUG_CACHE_MAX_BYTES)")
    from tritonplug.cli.tune import add_parser

    add_parser(commands, json_flag)
    return parser


def _byte_count(text: str) -> int:
    """``--max-bytes``: a whole number of bytes, 0 or more (argparse reports the error with the subcommand's usage)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _command(commands, name: str, text: str, *parents: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A subcommand whose one-line help is also the description its own --help prints."""
    description = text[0].upper() + text[1:] + "."
    return commands.add_parser(name, parents=list(parents), help=text.split(";")[0], description=description)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "info":
        from tritonplug.cli.info import collect_info

        report, status = collect_info(), 0
    elif args.command == "settings":
        from tritonplug.cli import settings_table
        from tritonplug.cli.info import collect_settings, loaded_plugins

        if args.markdown:
            loaded_plugins()
            print(settings_table.markdown())
            return 0
        report, status = collect_settings(), 0
    elif args.command == "tune":
        from tritonplug.cli.tune import run

        report, status = run(args.action, getattr(args, "file", None))
        if not report:
            return status
    else:
        report, status = _cache_command(args.action, getattr(args, "max_bytes", None))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print({k: v for k, v in report.items() if k != "error"})  # the error went to stderr already
    return status


def _cache_command(action: str, max_bytes: int | None) -> tuple[dict, int]:
    """Run one cache action; a cache that cannot be used or changed is reported (status 1), never raised."""
    from tritonplug.cache.disk import CacheDirError, open_cache_from_env

    try:
        cache = open_cache_from_env()
    except (CacheDirError, ValueError) as exc:
        return _failure(f"cannot use the kernel cache: {exc}"), 1
    if cache is None:
        return {"cache": "disabled (TRITONPLUG_CACHE=0)"}, 1
    try:
        if action == "clear":
            return {"removed_entries": cache.clear(), **vars(cache.stats())}, 0
        if action == "prune":
            return {"removed_entries": cache.prune(max_bytes), **vars(cache.stats())}, 0
    except (CacheDirError, OSError) as exc:
        return {**_failure(str(exc)), **vars(cache.stats())}, 1
    return dict(vars(cache.stats())), 0


def _failure(message: str) -> dict:
    print(f"tritonplug: {message}", file=sys.stderr)
    return {"error": message}


def _print(report: dict, indent: int = 0) -> None:
    for key, value in report.items():
        if isinstance(value, dict):
            print(" " * indent + f"{key}:")
            _print(value, indent + 2)
        elif isinstance(value, list) and all(isinstance(item, dict) for item in value):
            print(" " * indent + f"{key}: {len(value)}")
            for item in value:
                print(" " * (indent + 2) + _inline(item))
        else:
            print(" " * indent + f"{key}: {value}")
    sys.stdout.flush()


def _inline(value: object) -> str:
    """A record on one line: ``kernel=k backend=cuda target=(platform=cuda arch=90) ...``."""
    if isinstance(value, dict):
        return " ".join(f"{k}={_inline(v) if not isinstance(v, dict) else '(' + _inline(v) + ')'}"
                        for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(map(_inline, value))
    return str(value)
