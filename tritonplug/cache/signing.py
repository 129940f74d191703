"""The fleet key: who may write cache entries that this process runs.

A checksum proves an entry intact, not who wrote it: whoever can write to the remote store (or to the disk
cache) could otherwise make every GPU of a fleet run their binary. With ``TRITONPLUG_FLEET_KEY`` naming a key
file, every entry written carries an HMAC-SHA256 over its cache key and its bytes, and an entry whose
signature is missing or does not verify is never run (:mod:`tritonplug.cache.entries` checks it on every read).
``TRITONPLUG_FLEET_KEY_PREVIOUS`` names the key before a rotation: entries it signed are still accepted, but
nothing is signed with it. The key never changes a kernel's cache key (both settings are host-only), so hosts
with different keys share keys and refuse each other's entries, and a rotation recompiles nothing that the
previous key signed.

A key is known by its fingerprint (a hash of the key, never the key), which each signed entry names, so a
refusal can tell "signed by an unknown key" from "bad signature", and ``tritonplug info`` can show which key signs.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from dataclasses import dataclass, field
from pathlib import Path

from tritonplug import settings

MIN_KEY_BYTES = 16
DIGEST_BYTES = 32  # HMAC-SHA256
_DOMAIN = b"tritonplug-entry\0"  # a signature of an entry is never the signature of anything else


@dataclass(frozen=True)
class FleetKey:
    """One key read from its file; ``secret`` is never shown (not in ``repr``)."""

    secret: bytes = field(repr=False)
    fingerprint: str
    variable: str  # the setting that names its file

    def sign(self, key: str, body: bytes) -> bytes:
        """The signature of the entry ``body`` filed under cache key ``key``."""
        return hmac.new(self.secret, _DOMAIN + key.encode() + b"\0" + body, hashlib.sha256).digest()

    def verifies(self, key: str, body: bytes, signature: bytes) -> bool:
        return hmac.compare_digest(self.sign(key, body), signature)


@dataclass(frozen=True)
class FleetKeys:
    """The keys in effect: ``current`` signs (and verifies), ``previous`` only verifies. No current key: nothing
    is signed, and entries are accepted on their checksum alone (the behaviour before fleet keys)."""

    current: FleetKey | None = None
    previous: FleetKey | None = None

    @property
    def signing(self) -> bool:
        return self.current is not None

    def by_fingerprint(self, fingerprint: object) -> FleetKey | None:
        return next((k for k in (self.current, self.previous) if k is not None and k.fingerprint == fingerprint),
                    None)

    def describe(self) -> str:
        """For ``tritonplug info``: whether entries are signed, and with which key (by fingerprint)."""
        if self.current is None:
            return (f"unsigned: entries are trusted on their checksum alone (set {settings.FLEET_KEY.name} to sign "
                    f"them and refuse unsigned ones)")
        also = f", and entries signed by the previous key {self.previous.fingerprint} are accepted" \
            if self.previous is not None else ""
        return f"signed with the fleet key {self.current.fingerprint}; unsigned entries are refused{also}"


def fleet_keys() -> FleetKeys:
    """The keys the settings name now; a :class:`~tritonplug.settings.SettingError` naming the variable for a key file
    that is missing, a directory, empty, shorter than :data:`MIN_KEY_BYTES` or accessible to group or others, and for
    a previous key without a current one. A file is read again only when it changes."""
    current, previous = settings.FLEET_KEY.get(), settings.FLEET_KEY_PREVIOUS.get()
    if previous is not None and current is None:
        raise settings.SettingError(f"{settings.FLEET_KEY_PREVIOUS.name} is set without {settings.FLEET_KEY.name}: "
                                    f"a previous key is only accepted beside the key that signs now")
    return FleetKeys(_read(current, settings.FLEET_KEY.name) if current is not None else None,
                     _read(previous, settings.FLEET_KEY_PREVIOUS.name) if previous is not None else None)


def fingerprint(secret: bytes) -> str:
    return hashlib.sha256(b"tritonplug fleet key\0" + secret).hexdigest()[:16]


def _read(path: Path, variable: str) -> FleetKey:
    try:
        st = path.stat()
        return _load(str(path), variable, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError as exc:
        raise settings.SettingError(f"{variable} names {path}, which cannot be read ({exc.strerror})") from None


@functools.lru_cache(maxsize=8)
def _load(path: str, variable: str, *identity: int) -> FleetKey:
    """The key in ``path``, read once per version of the file (``identity``: its device, inode, mtime and size).
    Surrounding white space is not part of the key, so ``openssl rand -hex 32 > key`` works as well as raw bytes."""
    secret = Path(path).read_bytes().strip()
    if len(secret) < MIN_KEY_BYTES:
        raise settings.SettingError(f"{variable} names {path}, which holds {len(secret)} bytes; a fleet key must have "
                                    f"at least {MIN_KEY_BYTES} (`head -c 32 /dev/urandom > {path}`)")
    return FleetKey(secret, fingerprint(secret), variable)
