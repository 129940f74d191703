"""``tritonplug info``, ``tritonplug cache stats|clear|prune [--max-bytes N]`` and ``tritonplug tune
list|export FILE|import FILE|clear``; ``--json`` for JSON output."""

from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    # --json is accepted before or after the command: each subcommand repeats it, with a default that
    # leaves the top-level value alone.
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON instead of text")
    parser = argparse.ArgumentParser(prog="tritonplug", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", parents=[json_flag], help="versions, plugins, platforms, targets, cache and workers")
    cache = commands.add_parser("cache", help="inspect or shrink the compiled-kernel cache")
    actions = cache.add_subparsers(dest="action", required=True)
    actions.add_parser("stats", parents=[json_flag], help="directory, entries and bytes")
    actions.add_parser("clear", parents=[json_flag], help="remove every entry")
    prune = actions.add_parser("prune", parents=[json_flag], help="evict least-recently-used entries")
    prune.add_argument("--max-bytes", type=int, default=None,
                       help="shrink to this many bytes (default: the cache's bound, TRITONPLUG_CACHE_MAX_BYTES)")
    from tritonplug.tuning_cli import add_parser

    add_parser(commands, json_flag)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "max_bytes", None) is not None and args.max_bytes < 0:
        parser.error("--max-bytes must be >= 0")
    if args.command == "info":
        from tritonplug.info import collect_info

        report, status = collect_info(), 0
    elif args.command == "tune":
        from tritonplug.tuning_cli import run

        report, status = run(args.action, getattr(args, "file", None))
        if not report:
            return status
    else:
        report, status = _cache_command(args.action, getattr(args, "max_bytes", None))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print(report)
    return status


def _cache_command(action: str, max_bytes: int | None) -> tuple[dict, int]:
    from tritonplug.cache import cache_from_env

    cache = cache_from_env()
    if cache is None:
        return {"cache": "disabled (TRITONPLUG_CACHE=0) or unusable (see the warning above)"}, 1
    if action == "clear":
        return {"removed_entries": cache.clear(), **vars(cache.stats())}, 0
    if action == "prune":
        return {"removed_entries": cache.prune(max_bytes), **vars(cache.stats())}, 0
    return dict(vars(cache.stats())), 0


def _print(report: dict, indent: int = 0) -> None:
    for key, value in report.items():
        if isinstance(value, dict):
            print(" " * indent + f"{key}:")
            _print(value, indent + 2)
        else:
            print(" " * indent + f"{key}: {value}")
    sys.stdout.flush()
