"""``tritonplug tune list|export FILE|import FILE|clear``: the tuning records of the cache directory.

``export`` writes every record tuned on this machine to one tuning file (format in
:mod:`tritonplug.tuning_records`); ``import`` checks a whole file before it writes any record, so a bad
file changes nothing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from tritonplug.tuning_records import decode_file, encode_file
from tritonplug.tuning_store import TuningStore


def add_parser(commands: Any, json_flag: argparse.ArgumentParser) -> None:
    tune = commands.add_parser("tune", help="list, export, import or clear tuning records (tritonplug.tune)")
    actions = tune.add_subparsers(dest="action", required=True)
    actions.add_parser("list", parents=[json_flag], help="the records in the cache directory")
    export = actions.add_parser("export", parents=[json_flag], help="write every record to a tuning file")
    export.add_argument("file", help="the tuning file to write ('-' for standard output)")
    imported = actions.add_parser("import", parents=[json_flag], help="add a tuning file's records")
    imported.add_argument("file", help="a tuning file written by `tritonplug tune export` (or by hand)")
    actions.add_parser("clear", parents=[json_flag], help="remove every record")


def run(action: str, file: str | None) -> tuple[dict, int]:
    store = TuningStore()
    disk = store.disk
    if disk is None:
        return {"tuning": "the cache is disabled (TRITONPLUG_CACHE=0) or unusable (see the warning above)"}, 1
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
        _write_atomically(Path(file), data)
        return {"file": file, "exported_records": len(records)}, 0
    try:
        records = decode_file(Path(file).read_bytes(), file)
    except (OSError, ValueError) as exc:
        return {"error": f"nothing imported: {exc}"}, 1
    written = sum(store.put(r) for r in records)
    return {"file": file, "imported_records": written, "directory": str(disk.directory)}, 0 if written == len(
        records) else 1


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
