"""``tritonplug info`` and ``tritonplug cache stats|clear|prune``."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tritonplug", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="versions, plugins, platforms, targets, cache and workers")
    cache = commands.add_parser("cache", help="inspect or shrink the compiled-kernel cache")
    cache_commands = cache.add_subparsers(dest="action", required=True)
    cache_commands.add_parser("stats")
    cache_commands.add_parser("clear")
    prune = cache_commands.add_parser("prune")
    prune.add_argument("--max-bytes", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    if args.command == "info":
        from tritonplug.info import collect_info

        report = collect_info()
    else:
        report = _cache_command(args.action, getattr(args, "max_bytes", None))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print(report)
    return 0


def _cache_command(action: str, max_bytes: int | None) -> dict:
    from tritonplug.cache import cache_from_env

    cache = cache_from_env()
    if cache is None:
        return {"cache": "disabled or unusable (see the warning above)"}
    if action == "clear":
        return {"removed_entries": cache.clear(), "directory": str(cache.directory)}
    if action == "prune":
        return {"removed_entries": cache.prune(max_bytes), **vars(cache.stats())}
    return dict(vars(cache.stats()))


def _print(report: dict, indent: int = 0) -> None:
    for key, value in report.items():
        if isinstance(value, dict):
            print(" " * indent + f"{key}:")
            _print(value, indent + 2)
        else:
            print(" " * indent + f"{key}: {value}")
    sys.stdout.flush()
