"""``tritonplug tune list|export FILE|import FILE|clear``: the tuning records of the cache directory.

``export`` writes every record tuned on this machine to one tuning file (format in
:mod:`tritonplug.tuning.records`); ``import`` checks a whole file before it writes any record, so a bad
file changes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from tritonplug import settings
from tritonplug.tuning.records import decode_file, encode_file
from tritonplug.tuning.store import TuningStore

_DESCRIPTION = """The tuning records of the cache directory: which configuration of each autotuned call
`tritonplug.tune(fn, *args)` found fastest, per kernel source, autotune key values, target and backend.
A lowering that finds a record compiles and runs only that configuration. Path records (key "choice": "path")
say whether an inline="auto" call is launched or inlined as XLA ops (config "path")."""


def add_parser(commands: Any, json_flag: argparse.ArgumentParser) -> None:
    tune = commands.add_parser("tune", help="list, export, import or clear tuning records (tritonplug.tune)",
                               description=_DESCRIPTION)
    actions = tune.add_subparsers(dest="action", required=True)
    for name, text in (("list", "the records in the cache directory"), ("clear", "remove every record")):
        actions.add_parser(name, parents=[json_flag], help=text, description=text[0].upper() + text[1:] + ".")
    text = "write every record to a tuning file"
    export = actions.add_parser("export", parents=[json_flag], help=text, description=text.capitalize() + ".")
    export.add_argument("file", help="the tuning file to write ('-' for standard output)")
    text = "add a tuning file's records to the cache directory (a damaged file changes nothing)"
    imported = actions.add_parser("import", parents=[json_flag], help=text.split(" (")[0],
                                  description=text.capitalize() + ".")
    imported.add_argument("file", help="a tuning file written by `tritonplug tune export` (or by hand)")


def run(action: str, file: str | None) -> tuple[dict, int]:
    """Run one action; a failure is an ``error:`` line on stderr and status 1, never a traceback or a raw warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report, status = _run(action, file)
    problems = [str(w.message).removeprefix("tritonplug: ") for w in caught]
    if status and problems:
        report = {**report, "error": "; ".join([report["error"], *problems] if "error" in report else problems)}
    elif problems:
        for problem in problems:
            print(f"tritonplug: warning: {problem}", file=sys.stderr)
    if "error" in report:
        print(f"tritonplug: error: {report['error']}", file=sys.stderr)
    return report, status


def _run(action: str, file: str | None) -> tuple[dict, int]:
    store = TuningStore()
    try:
        disk = store.disk
    except settings.SettingError as exc:
        return {"error": str(exc)}, 1
    if disk is None:
        if not settings.CACHE.get():
            return {"error": "the cache is disabled (TRITONPLUG_CACHE=0): tuning records live in it"}, 1
        return {"tuning": "the cache directory is unusable"}, 1
    if action == "list":
        return {"directory": str(disk.directory),
                "records": [_summary(r) for r in sorted(store.stored(), key=lambda r: r.kernel)]}, 0
    if action == "clear":
        return {"directory": str(disk.directory), "removed_records": disk.clear()}, 0
    assert file is not None
    if action == "export":
        records = store.stored()
        data = encode_file(records)
        if file == "-":
            os.write(1, data)
            return {}, 0
        try:
            _write_atomically(Path(file), data)
        except OSError as exc:
            folder = Path(file).expanduser().absolute().parent
            hint = f" (the folder {folder} does not exist)" if not folder.is_dir() else ""
            return {"error": f"nothing exported: cannot write {file}{hint}: {exc.strerror or exc}"}, 1
        return {"file": file, "exported_records": len(records)}, 0
    try:
        records = decode_file(Path(file).read_bytes(), file)
    except (OSError, ValueError) as exc:
        return {"error": f"nothing imported: {exc}"}, 1
    written = sum(store.put(r) for r in records)
    report = {"file": file, "imported_records": written, "directory": str(disk.directory)}
    if written != len(records):
        return {**report, "error": f"imported {written} of {len(records)} records: cannot write to "
                                   f"{disk.directory}"}, 1
    return report, 0


def _summary(record: Any) -> dict[str, Any]:
    return {"kernel": record.kernel, "backend": record.backend, "target": dict(record.target),
            "key": dict(record.key), "config": dict(record.config)}


def _write_atomically(path: Path, data: bytes) -> None:
    path = path.expanduser().absolute()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
