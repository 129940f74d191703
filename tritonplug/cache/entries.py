"""The bytes of one cache entry: what the disk cache stores in a file and the remote tier under a key (no pickle).

Unsigned (written when no fleet key is set; the format of every entry before fleet keys)::

    b"tritonplug-cache 1\\n"                   magic line
    {"key", "kernel_name", "format", "metadata", "payload_size",
     "images": [{"name", "offset", "size"}]}\\n   one line of JSON
    <images back to back><sha256 of all the bytes before it, 32 raw bytes>

Signed (written when ``TRITONPLUG_FLEET_KEY`` is set, :mod:`tritonplug.cache.signing`)::

    b"tritonplug-cache 2\\n"                   magic line
    {... as above, "signer": <fingerprint of the signing key>}\\n
    <images><HMAC-SHA256 over (cache key, every byte before it), 32 raw bytes><sha256 of all before it, 32 raw bytes>

The signature covers the cache key the entry is filed under and the whole body (header, metadata, images), so an
entry cannot be moved to another key, nor its metadata changed. Reading checks, in order: magic, checksum (damage),
signature (with a fleet key set: an unsigned entry, one signed by a key that is neither the current nor the previous
one, or one whose signature does not verify raises :class:`EntryRefused`), then that the header matches. Without a
fleet key, both formats are read and signatures are not checked (there is nothing to check them with).
"""

from __future__ import annotations

import hashlib
import json

from tritonplug.cache import signing
from tritonplug.cache.signing import FleetKeys
from tritonplug.records import Binary

MAGIC = b"tritonplug-cache 1\n"
MAGIC_SIGNED = b"tritonplug-cache 2\n"
_DIGEST = 32
_SIGNATURE = signing.DIGEST_BYTES


class EntryRefused(ValueError):
    """An intact entry that the fleet key forbids running; ``reason`` says why in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode_entry(key: str, binary: Binary, keys: FleetKeys | None = None) -> bytes:
    """One entry's bytes (the format above), signed with ``keys.current`` if there is one (default: the keys the
    settings name now). ``TypeError`` for metadata that JSON cannot hold."""
    keys = signing.fleet_keys() if keys is None else keys
    blobs = {str(name): bytes(image) for name, image in binary.images.items()}
    images, offset = [], 0
    for name, image in blobs.items():
        images.append({"name": name, "offset": offset, "size": len(image)})
        offset += len(image)
    header = {"key": key, "kernel_name": binary.kernel_name, "format": binary.format,
              "metadata": dict(binary.metadata), "images": images, "payload_size": offset}
    if keys.current is not None:
        header["signer"] = keys.current.fingerprint
    try:
        line = json.dumps(header, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the metadata of kernel {binary.kernel_name!r} is not JSON-serialisable, so it "
                        f"cannot be cached: {exc}") from exc
    body = b"".join([MAGIC if keys.current is None else MAGIC_SIGNED, line, b"\n", *blobs.values()])
    if keys.current is not None:
        body += keys.current.sign(key, body)
    return body + hashlib.sha256(body).digest()


def decode_entry(key: str, data: bytes, keys: FleetKeys | None = None) -> Binary:
    """Parse and check one entry (a file, or a remote value) filed under ``key``, against ``keys`` (default: the keys
    the settings name now). Damage, or an entry made for another key, raises ValueError (or KeyError/TypeError); an
    entry the fleet key refuses raises :class:`EntryRefused` (a ValueError)."""
    keys = signing.fleet_keys() if keys is None else keys
    signed = data.startswith(MAGIC_SIGNED)
    trailer = _DIGEST + (_SIGNATURE if signed else 0)
    if len(data) < len(MAGIC) + trailer or not (signed or data.startswith(MAGIC)):
        raise ValueError("bad magic or truncated")
    checked = data[:-_DIGEST]
    if hashlib.sha256(checked).digest() != data[-_DIGEST:]:
        raise ValueError("checksum mismatch")
    body, signature = (checked[:-_SIGNATURE], checked[-_SIGNATURE:]) if signed else (checked, b"")
    if keys.signing:
        _check_signature(key, body, signature if signed else None, keys)
    end = body.index(b"\n", len(MAGIC))
    header = json.loads(body[len(MAGIC):end])
    payload = body[end + 1:]
    if header["key"] != key or header["payload_size"] != len(payload):
        raise ValueError("header does not match the file")
    images = {}
    for image in header["images"]:
        start, size = int(image["offset"]), int(image["size"])
        if start < 0 or size < 0 or start + size > len(payload):
            raise ValueError(f"image {image['name']!r} lies outside the payload")
        images[str(image["name"])] = payload[start:start + size]
    return Binary(kernel_name=str(header["kernel_name"]), format=str(header["format"]), images=images,
                  metadata=dict(header["metadata"]))


def _check_signature(key: str, body: bytes, signature: bytes | None, keys: FleetKeys) -> None:
    """Raise :class:`EntryRefused` unless ``signature`` is the current or the previous key's signature of ``body``
    under ``key``. Checked before the header is even parsed."""
    if signature is None:
        raise EntryRefused("unsigned")
    if any(k is not None and k.verifies(key, body, signature) for k in (keys.current, keys.previous)):
        return
    try:
        named = json.loads(body[len(MAGIC):body.index(b"\n", len(MAGIC))]).get("signer")
    except (ValueError, AttributeError):
        named = None
    if keys.by_fingerprint(named) is None:
        raise EntryRefused(f"signed by an unknown key (fingerprint {str(named)[:40]!r}, not "
                           f"{' or '.join(repr(k.fingerprint) for k in (keys.current, keys.previous) if k)})")
    raise EntryRefused("bad signature")
