"""Where tuning records live: the cache directory, and a read-only file laid over it.

Records tuned on this machine are entries of a :class:`tritonplug.cache.disk.DiskCache` rooted at
``<cache dir>/tuning`` (so they get the kernel cache's atomic publication, sha256 checksums, file
locks and ownership checks), one entry per record identity holding the record's canonical JSON
(``Binary(format="tuning", images={"record.json": ...})``). ``tritonplug cache clear`` leaves them
alone; ``tritonplug tune clear`` removes them.

``TRITONPLUG_TUNING_FILE=path`` lays a tuning file (format in :mod:`tritonplug.tuning.records`) over
them: its records win where both have one, and it is never written. A file that cannot be read or is
not a valid tuning file is a ``RuntimeWarning`` and contributes nothing; lowering never fails over it.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

from tritonplug import settings
from tritonplug.cache.disk import DiskCache, default_directory
from tritonplug.calls import user_warnings
from tritonplug.records import Binary
from tritonplug.tuning.records import TuningRecord, decode_entry, decode_file, encode_entry

log = logging.getLogger("tritonplug.tuner")

FILE_VARIABLE = settings.TUNING_FILE.name
_IMAGE = "record.json"
_KEY = re.compile(r"[0-9a-f]{64}")


def tuning_directory() -> Path:
    return default_directory() / "tuning"


class TuningStore:
    """This process's view of the tuning records; ``stats["tuned_hits"]`` counts lowerings that used one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memory: dict[str, TuningRecord] = {}
        self._disk: DiskCache | None = None
        self._disk_ready = False
        self._overlay_path: str | None = None
        self._overlay: dict[str, TuningRecord] = {}
        self.stats = {"tuned_hits": 0}

    def reset(self) -> None:
        with self._lock:
            self._memory.clear()
            self._disk, self._disk_ready = None, False
            self._overlay_path, self._overlay = None, {}

    @property
    def disk(self) -> DiskCache | None:
        """The records' cache directory, or None when the cache is disabled or unusable (then records
        made by ``tune`` last as long as the process); a bad ``TRITONPLUG_CACHE`` is a ``SettingError``."""
        with self._lock:
            if not self._disk_ready:
                enabled = settings.CACHE.get()  # before _disk_ready: a bad value is raised again next time
                self._disk_ready = True
                if enabled:
                    try:
                        self._disk = DiskCache(tuning_directory())
                        self._disk.on_damaged = _warn_damaged
                        self._disk.remade = ("the calls it tuned use every configuration again until `tritonplug.tune` "
                                             "records them anew")
                    except Exception as exc:  # CacheDirError and friends: tuning still works in memory
                        user_warnings.warn(f"tritonplug: tuning records are not persisted: {exc}", RuntimeWarning)
            return self._disk

    def overlay(self) -> dict[str, TuningRecord]:
        """The records of ``TRITONPLUG_TUNING_FILE`` by identity (read again when the variable changes)."""
        path = settings.TUNING_FILE.get()
        with self._lock:
            if path == self._overlay_path:
                return self._overlay
        records = _read_overlay(path) if path else {}
        with self._lock:
            self._overlay_path, self._overlay = path, records
        return records

    def lookup(self, identity: str) -> TuningRecord | None:
        """The record for ``identity``: the overlay file's, else one tuned here (memory, then disk)."""
        found = self.overlay().get(identity)
        if found is not None:
            return found
        with self._lock:
            found = self._memory.get(identity)
        if found is not None:
            return found
        disk = self.disk
        if disk is None:
            return None
        binary = disk.get(identity)
        if binary is None:
            return None
        try:
            record = decode_entry(binary.images[_IMAGE])
        except (KeyError, ValueError) as exc:
            log.info("ignoring unreadable tuning record %s: %s", identity[:12], exc)
            return None
        if record.identity != identity:
            log.info("ignoring tuning record %s: filed under another identity", identity[:12])
            return None
        with self._lock:
            self._memory[identity] = record
        return record

    def put(self, record: TuningRecord) -> bool:
        """Keep ``record`` (replacing one of the same identity); True if it reached the disk."""
        with self._lock:
            self._memory[record.identity] = record
        disk = self.disk
        if disk is None:
            return False
        binary = Binary(record.kernel, "tuning", {_IMAGE: encode_entry(record)}, {})
        with disk.key_lock(record.identity):
            return disk.put(record.identity, binary)

    def stored(self) -> list[TuningRecord]:
        """Every record in the cache directory (not the overlay file), for export."""
        disk = self.disk
        if disk is None:
            return []
        found = []
        for path in sorted((disk.directory / "entries").glob("*/*.bin")):
            if not _KEY.fullmatch(path.stem):
                continue
            binary = disk.get(path.stem)
            if binary is None:
                continue
            try:
                record = decode_entry(binary.images[_IMAGE])
            except (KeyError, ValueError) as exc:
                log.info("skipping unreadable tuning record %s: %s", path, exc)
                continue
            if record.identity == path.stem:
                found.append(record)
        return found

    def note_hit(self) -> None:
        with self._lock:
            self.stats["tuned_hits"] += 1


def _warn_damaged(path: Path, exc: Exception) -> None:
    user_warnings.warn(f"tritonplug: removed a damaged tuning record ({path}: {exc}); the calls it tuned use every "
                       f"configuration again until `tritonplug.tune` records them anew", RuntimeWarning)


def _read_overlay(path: str) -> dict[str, TuningRecord]:
    try:
        data = Path(path).expanduser().read_bytes()
        records = decode_file(data, f"{FILE_VARIABLE}={path}")
    except (OSError, ValueError) as exc:
        user_warnings.warn(f"tritonplug: ignoring the tuning file: {exc}", RuntimeWarning)
        return {}
    log.info("read %d tuning record(s) from %s", len(records), path)
    return {r.identity: r for r in records}
