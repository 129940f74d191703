"""Tuning records and the file that carries them: the format, checked on the way in.

A record says which autotune configuration was fastest for one autotuned call: for the kernel whose
source key (Triton's ``JITFunction.cache_key``, a hash of its source and of every ``@triton.jit``
function and global it uses) is ``source``, called with the autotune key values ``key``, on
``target`` of ``backend``, configuration ``config`` won. A record is one JSON object::

    {"kernel": "matmul_kernel",                  the kernel's name (informational)
     "source": "<JITFunction.cache_key>",        an edited kernel has another: its records never match
     "backend": "cuda",                          the tritonplug backend
     "target": {"platform": "cuda", "arch": "90", "warp_size": 32},
     "key": {"args": {"M": 512, "N": 512, "K": 512},   the values of the autotuner's ``key`` arguments
             "dtypes": ["float16", "float16", "float16"],  every array argument's dtype, in order
             "constexprs": {}},                  metaparameters the call fixes (``BLOCK=...``), repr'd
     "config": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8,
                "num_warps": 4, "num_stages": 3, "num_ctas": 1},   a triton.Config's kwargs and options
     "times_us": {"<config description>": 12.5, ...},   optional: what tune() measured
     "device": "NVIDIA H200", "triton": "3.6.0", "tritonplug": "0.1.0", "created": "2026-05-01T12:00:00Z"}

A *path record* says whether an ``inline="auto"`` call is inlined: its ``key`` holds every argument by name
(``args``: arrays as ``"float16[512,512]"``, scalars by value), ``dtypes``, ``constexprs`` and ``"choice": "path"``;
its ``backend`` and ``target`` are the launching backend's; its ``config`` is ``{"path": "inline"}`` or
``{"path": "launch"}``; ``times_us`` holds ``launch`` and ``inline`` where both were measured, ``timed``:
``"program"`` (they are times of the whole program ``program``, the function given to ``tune``, with this call
launched and inlined and the calls before it as already chosen: :mod:`tritonplug.tuning.program_paths`), and
``reason`` why it launches (inlining did not make the program faster beyond noise; the translation holds
gathers, scatters or while loops, or there is none).

``arch`` is compared as a string; array values in ``key.args`` are written ``"float16[512,512]"``.
The identity of a record (:func:`identity`) is the sha256 of the canonical JSON (sorted keys, no spaces)
of ``[source, backend, target, key]``; the on-disk store files records under it.

A tuning file (``tritonplug tune export``, ``TRITONPLUG_TUNING_FILE``) is one JSON object::

    {"format": "tritonplug-tuning", "version": 1, "records": [record, ...],
     "sha256": "<sha256 of the canonical JSON of records>"}

``sha256`` is optional (a hand-written file may leave it out); when present it must match.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FILE_FORMAT = "tritonplug-tuning"
FILE_VERSION = 1
#: Fields that are informational: kept and exported, never part of the identity.
INFO_FIELDS = ("kernel", "times_us", "device", "triton", "tritonplug", "created", "reason", "timed", "program")
#: ``key.choice`` of a path record (whether an ``inline="auto"`` call is inlined), and the paths it names.
PATH_CHOICE = "path"
PATHS = ("inline", "launch")


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces; values JSON cannot hold are written as their ``repr``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def normalized(value: Any) -> Any:
    """``value`` as it reads back from canonical JSON (tuples become lists, odd objects their repr)."""
    return json.loads(canonical(value))


@dataclass(frozen=True)
class TuningRecord:
    """One tuning record (see the module docstring); ``info`` holds the informational fields."""

    source: str
    backend: str
    target: Mapping[str, Any]
    key: Mapping[str, Any]
    config: Mapping[str, Any]
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def identity(self) -> str:
        return identity(self.source, self.backend, self.target, self.key)

    @property
    def kernel(self) -> str:
        return str(self.info.get("kernel", "?"))

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.info.items() if k in INFO_FIELDS}
        out.update({"source": self.source, "backend": self.backend, "target": dict(self.target),
                    "key": dict(self.key), "config": dict(self.config)})
        return out


def target_fields(platform: str, arch: Any, warp_size: int) -> dict[str, Any]:
    return {"platform": str(platform), "arch": str(arch), "warp_size": int(warp_size)}


def identity(source: str, backend: str, target: Mapping[str, Any], key: Mapping[str, Any]) -> str:
    """What the store files a record under: a hash of everything that must match for it to apply."""
    payload = canonical([source, backend, normalized(dict(target)), normalized(dict(key))])
    return hashlib.sha256(payload.encode()).hexdigest()


def parse_record(raw: Any, where: str = "record") -> TuningRecord:
    """A record from its JSON object; ``ValueError`` naming ``where`` and the field if it is malformed."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    for name, kind in (("source", str), ("backend", str), ("target", Mapping), ("key", Mapping),
                       ("config", Mapping)):
        if not isinstance(raw.get(name), kind):
            raise ValueError(f"{where}: field {name!r} must be a {'string' if kind is str else 'JSON object'}, "
                             f"got {raw.get(name)!r:.80}")
    target = raw["target"]
    try:
        target = target_fields(target["platform"], target["arch"], target["warp_size"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{where}: 'target' needs 'platform', 'arch' and an integer 'warp_size', "
                         f"got {raw['target']!r:.120}") from None
    key = dict(raw["key"])
    if not isinstance(key.get("args", {}), Mapping) or not isinstance(key.get("dtypes", []), list):
        raise ValueError(f"{where}: 'key' must hold an 'args' object and a 'dtypes' list, got {key!r:.120}")
    choice = key.get("choice")
    if choice is not None and choice != PATH_CHOICE:
        raise ValueError(f"{where}: 'key.choice' must be {PATH_CHOICE!r} (a path record) or absent, got {choice!r}")
    key = {"args": dict(key.get("args", {})), "dtypes": list(key.get("dtypes", [])),
           "constexprs": dict(key.get("constexprs", {})), **({"choice": choice} if choice else {})}
    if not raw["config"]:
        raise ValueError(f"{where}: 'config' is empty")
    if choice and raw["config"].get("path") not in PATHS:
        raise ValueError(f"{where}: a path record's 'config' must be {{\"path\": one of {list(PATHS)}}}, "
                         f"got {raw['config']!r:.120}")
    info = {k: raw[k] for k in INFO_FIELDS if k in raw}
    return TuningRecord(raw["source"], raw["backend"], target, key, dict(raw["config"]), info)


def records_digest(records: Sequence[Any]) -> str:
    return hashlib.sha256(canonical(list(records)).encode()).hexdigest()


def encode_file(records: Sequence[TuningRecord]) -> bytes:
    """A tuning file holding ``records``, with its checksum."""
    body = [r.to_json() for r in sorted(records, key=lambda r: (r.kernel, r.identity))]
    document = {"format": FILE_FORMAT, "version": FILE_VERSION, "records": body, "sha256": records_digest(body)}
    return (json.dumps(document, indent=1, sort_keys=True, default=repr) + "\n").encode()


def decode_file(data: bytes, where: str = "tuning file") -> list[TuningRecord]:
    """The records of a tuning file; ``ValueError`` saying what is wrong if it is not a valid one."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(document, Mapping) or document.get("format") != FILE_FORMAT:
        raise ValueError(f"{where} is not a tritonplug tuning file (expected a JSON object with "
                         f"\"format\": \"{FILE_FORMAT}\")")
    if document.get("version") != FILE_VERSION:
        raise ValueError(f"{where} has format version {document.get('version')!r}; this tritonplug reads "
                         f"version {FILE_VERSION}")
    raw = document.get("records")
    if not isinstance(raw, list):
        raise ValueError(f"{where}: 'records' must be a list")
    digest = document.get("sha256")
    if digest is not None and digest != records_digest(raw):
        raise ValueError(f"{where}: checksum mismatch (the records were changed or damaged after export)")
    return [parse_record(r, f"{where}, record {i}") for i, r in enumerate(raw)]


def encode_entry(record: TuningRecord) -> bytes:
    """One record as stored in the cache directory (the cache entry adds the checksum)."""
    return canonical(record.to_json()).encode()


def decode_entry(data: bytes) -> TuningRecord:
    return parse_record(json.loads(data), "stored tuning record")
